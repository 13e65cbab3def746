// Structured logging for the replica, the worker and the CLI's diagnostics: pino writing one JSON
// object per line on stderr, in the shape log-core.ts describes, so lines from every component
// merge and filter alike.
//
// Published on its own (`@sandgate/telemetry/log`), so a process that logs loads neither the OTel
// SDKs nor, until it turns tracing on, the OTel API. The supervisor, which runs in every sandbox,
// writes the same lines without pino (`@sandgate/telemetry/line-log`; BENCHMARKS.md, "The
// supervisor's log lines without pino").
import { pino, type Logger as PinoLogger } from 'pino';
import { LOG_LEVELS, loggerOver, serialiseFields, traceFields, type LogFields, type Logger, type LoggerOptions, type LogLevel } from './log-core.ts';

export * from './log-core.ts';

/**
 * A logger whose lines carry `base`. `level` is the least severe level written; it comes from the
 * process's config (SANDGATE_LOG_LEVEL).
 */
export function createLogger(base: LogFields, level: LogLevel = 'info', opts: LoggerOptions = {}): Logger {
  const p = pino(
    {
      level: LOG_LEVELS.includes(level) ? level : 'info',
      // No pid/hostname: the component and its id (replica, worker, sandbox_id) name the writer.
      base: serialiseFields(base),
      messageKey: 'msg',
      timestamp: () => `,"ts":"${new Date().toISOString()}"`,
      formatters: {
        level: (label) => ({ level: label }),
        log: (fields) => serialiseFields(fields),
      },
      // Errors are serialised above, under every key; pino's own `err` serialiser would redo it.
      serializers: { err: (v: unknown) => v },
      mixin: traceFields,
    },
    opts.destination ?? process.stderr,
  );
  return wrap(p);
}

function wrap(p: PinoLogger): Logger {
  return loggerOver(
    (level, msg, fields) => p[level](fields ?? {}, msg),
    // Bound fields are serialised once here: pino skips its formatters for a child's bindings.
    (fields) => wrap(p.child(serialiseFields(fields))),
  );
}
