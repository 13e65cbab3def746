// Structured logging: one JSON object per line on stderr. Small on purpose; every component
// (replica, worker, supervisor) logs the same shape so lines can be merged and filtered.
export const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
}

/** `level` is the least severe level written; it comes from the process's config (SANDGATE_LOG_LEVEL). */
export function createLogger(base: Record<string, unknown>, level: LogLevel = 'info'): Logger {
  const min = ORDER[level] ?? ORDER.info;
  const write = (lvl: LogLevel, msg: string, fields?: Record<string, unknown>) => {
    if (ORDER[lvl] < min) return;
    const line = JSON.stringify({ ts: new Date().toISOString(), level: lvl, msg, ...base, ...fields }, (_k, v: unknown) =>
      v instanceof Error ? v.message : v,
    );
    process.stderr.write(line + '\n');
  };
  return {
    debug: (m, f) => write('debug', m, f),
    info: (m, f) => write('info', m, f),
    warn: (m, f) => write('warn', m, f),
    error: (m, f) => write('error', m, f),
    child: (fields) => createLogger({ ...base, ...fields }, level),
  };
}
