// What every sandgate log line is, whichever writer makes it (log.ts: pino, for the replica, the
// worker and the CLI; line-log.ts: a few lines of our own, for the supervisor): the levels, the
// Logger interface, the one error serialiser and the active span's ids. No dependency, so the
// supervisor, which runs in every sandbox, loads neither pino nor the OTel API through it.
//
// The shape operators and tests read, one JSON object per line on stderr:
//   {"level":"info","ts":"<ISO 8601>",<bound fields>,["trace_id","span_id",]<fields>,"msg":"…"}
// `level` is the level's name (not pino's number); `trace_id`/`span_id` appear on every line
// written inside an active span (read through the reader tracing.ts installs: whether spans are
// recorded is the tracing setup's business, not the logger's); every Error in the fields, under
// any key, goes through serialiseError().
export const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  /** A logger that adds `fields` to every line (e.g. the exec id). */
  child(fields: LogFields): Logger;
}

/** Where lines go: stderr unless a test hands its own sink. Each call gets one whole line ending in '\n'. */
export interface LogDestination {
  write(line: string): unknown;
}

export interface LoggerOptions {
  destination?: LogDestination;
}

/** A level name as given (SANDGATE_LOG_LEVEL, any case); anything else is `info`. */
export function parseLogLevel(value: string | undefined): LogLevel {
  const v = (value ?? '').trim().toLowerCase();
  return (LOG_LEVELS as readonly string[]).includes(v) ? (v as LogLevel) : 'info';
}

// The gRPC status names by code (the wire's numbers, fixed by the gRPC spec), so a logged status
// error says UNAVAILABLE rather than 14 without this library depending on a gRPC package.
const GRPC_STATUS = [
  'OK', 'CANCELLED', 'UNKNOWN', 'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED', 'NOT_FOUND', 'ALREADY_EXISTS',
  'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED', 'FAILED_PRECONDITION', 'ABORTED', 'OUT_OF_RANGE',
  'UNIMPLEMENTED', 'INTERNAL', 'UNAVAILABLE', 'DATA_LOSS', 'UNAUTHENTICATED',
] as const;

/** Causes nested deeper than this are cut: a cause chain is rarely longer, and a cycle must end. */
const MAX_CAUSE_DEPTH = 5;

/**
 * The one error serialiser: `type` (its name), `message`, `code` (a string code such as an errno
 * name), `grpc_code`/`grpc_status` for a gRPC status (a numeric `code` 0–16: grpc-js ServiceError,
 * GatewayError), `details` (a gRPC error's details), `stack`, `cause` (serialised alike) and, for
 * an AggregateError, `errors`.
 */
export function serialiseError(err: Error, depth = 0): Record<string, unknown> {
  const e = err as Error & { code?: unknown; details?: unknown; errors?: unknown };
  const out: Record<string, unknown> = { type: err.name, message: err.message };
  if (typeof e.code === 'number' && Number.isInteger(e.code) && e.code >= 0 && e.code < GRPC_STATUS.length) {
    out.grpc_code = e.code;
    out.grpc_status = GRPC_STATUS[e.code];
    if (typeof e.details === 'string' && e.details) out.details = e.details;
  } else if (e.code !== undefined && e.code !== null) {
    out.code = e.code;
  }
  if (err.stack) out.stack = err.stack;
  if (err.cause !== undefined) out.cause = serialiseValue(err.cause, depth + 1);
  if (Array.isArray(e.errors) && e.errors.length > 0) out.errors = e.errors.map((x) => serialiseValue(x, depth + 1));
  return out;
}

function serialiseValue(value: unknown, depth: number): unknown {
  if (!(value instanceof Error)) return value;
  return depth > MAX_CAUSE_DEPTH ? { type: value.name, message: value.message } : serialiseError(value, depth);
}

/** `fields` with every Error value serialised; the object itself when it holds none (the common case). */
export function serialiseFields(fields: LogFields): LogFields {
  let out: LogFields | undefined;
  for (const key in fields) {
    const v = fields[key];
    if (v instanceof Error) {
      out ??= { ...fields };
      out[key] = serialiseError(v);
    }
  }
  return out ?? fields;
}

let activeTraceFields: () => LogFields = () => ({});

/** The ids of the span a line is written in (none until tracing.ts installed its reader). */
export function traceFields(): LogFields {
  return activeTraceFields();
}

/**
 * Where a line finds the ids of the span it is written in. tracing.ts, this package's one user of
 * the OTel API, installs its reader when it is loaded, and every process that makes spans loads
 * it. Until then there can be no active span, and the API is not loaded for nothing: the
 * supervisor loads tracing.ts only once the gateway turns tracing on (BENCHMARKS.md, "The
 * supervisor's gRPC client").
 */
export function readTraceIdsWith(reader: () => LogFields): void {
  activeTraceFields = reader;
}

/**
 * A Logger whose lines `write` makes. Logging must never take its caller down: whatever `write`
 * throws (a throwing getter in the fields, a dead stderr) is dropped with its line.
 */
export function loggerOver(write: (level: LogLevel, msg: string, fields?: LogFields) => void, child: (fields: LogFields) => Logger): Logger {
  const line = (level: LogLevel, msg: string, fields?: LogFields) => {
    try {
      write(level, msg, fields);
    } catch {
      // dropped: see above
    }
  };
  return {
    debug: (msg, fields) => line('debug', msg, fields),
    info: (msg, fields) => line('info', msg, fields),
    warn: (msg, fields) => line('warn', msg, fields),
    error: (msg, fields) => line('error', msg, fields),
    child,
  };
}
