// The supervisor's logger: the lines log.ts writes through pino (the shape is log-core.ts's),
// written by the few lines below. A supervisor runs in every sandbox and logs a few lines per
// exec; pino and what it loads (thread-stream, sonic-boom, worker_threads) cost each one about
// 0.7 MiB of anonymous memory and 14 ms of its start (BENCHMARKS.md, "The supervisor's log
// lines without pino"). The replicas, which log far more, keep pino.
import { LOG_LEVELS, loggerOver, serialiseFields, traceFields, type LogFields, type Logger, type LoggerOptions, type LogLevel } from './log-core.ts';

export * from './log-core.ts';

/** A logger whose lines carry `base`; `level` is the least severe level written. */
export function createLineLogger(base: LogFields, level: LogLevel = 'info', opts: LoggerOptions = {}): Logger {
  const least = Math.max(0, LOG_LEVELS.indexOf(level));
  const destination = opts.destination ?? process.stderr;
  const make = (bound: LogFields): Logger =>
    loggerOver(
      (lineLevel, msg, fields) => {
        if (LOG_LEVELS.indexOf(lineLevel) < least) return;
        const record = { level: lineLevel, ts: new Date().toISOString(), ...bound, ...traceFields(), ...(fields ? serialiseFields(fields) : {}), msg };
        destination.write(`${safeJson(record)}\n`);
      },
      (fields) => make({ ...bound, ...serialiseFields(fields) }),
    );
  return make(serialiseFields(base));
}

/**
 * JSON of `value` with a cycle written as "[Circular]" and a bigint as its digits, as pino's
 * stringifier (safe-stable-stringify) does, where JSON.stringify throws.
 */
function safeJson(value: object): string {
  // The objects from the root to the one being written: JSON.stringify calls the replacer with
  // the holder of each key as `this`, so whatever is above the holder is done and is dropped.
  const ancestors: unknown[] = [];
  return JSON.stringify(value, function (this: unknown, _key: string, v: unknown) {
    if (typeof v === 'bigint') return (JSON as unknown as { rawJSON(text: string): unknown }).rawJSON(v.toString());
    if (typeof v !== 'object' || v === null) return v;
    while (ancestors.length > 0 && ancestors[ancestors.length - 1] !== this) ancestors.pop();
    if (ancestors.includes(v)) return '[Circular]';
    ancestors.push(v);
    return v;
  });
}
