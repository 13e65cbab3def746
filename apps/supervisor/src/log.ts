// Structured logging: one JSON object per line on stderr. The compute driver redirects the
// supervisor's stderr to the sandbox log, so every line carries the sandbox id to stay
// attributable once logs from many sandboxes are aggregated.

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

const LEVELS: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  /** A logger that adds `fields` to every line (e.g. the exec id). */
  child(fields: LogFields): Logger;
}

export function parseLogLevel(value: string | undefined): LogLevel {
  const v = (value ?? '').trim().toLowerCase();
  return v in LEVELS ? (v as LogLevel) : 'info';
}

/** Errors do not survive JSON.stringify; turn them into something readable. */
function serialise(value: unknown): unknown {
  if (value instanceof Error) {
    const code = (value as NodeJS.ErrnoException).code;
    return { message: value.message, ...(code ? { code } : {}), stack: value.stack };
  }
  return value;
}

export function createLogger(opts: {
  level: LogLevel;
  base?: LogFields;
  write?: (line: string) => void;
}): Logger {
  const min = LEVELS[opts.level];
  const base = opts.base ?? {};
  const write = opts.write ?? ((line: string) => process.stderr.write(line));

  const emit = (level: LogLevel, msg: string, fields?: LogFields): void => {
    if (LEVELS[level] < min) return;
    const record: LogFields = { ts: new Date().toISOString(), level, msg, ...base };
    if (fields) for (const [k, v] of Object.entries(fields)) record[k] = serialise(v);
    let line: string;
    try {
      line = JSON.stringify(record);
    } catch {
      // Circular or otherwise unserialisable fields must never make logging throw.
      line = JSON.stringify({ ts: record.ts, level, msg, ...base, note: 'unserialisable fields' });
    }
    try {
      write(line + '\n');
    } catch {
      // stderr gone (EPIPE): nothing sensible left to do, and logging must not kill us.
    }
  };

  return {
    debug: (msg, fields) => emit('debug', msg, fields),
    info: (msg, fields) => emit('info', msg, fields),
    warn: (msg, fields) => emit('warn', msg, fields),
    error: (msg, fields) => emit('error', msg, fields),
    child: (fields) => createLogger({ level: opts.level, base: { ...base, ...fields }, write }),
  };
}
