// Argument parsing shared by every command: a strict `node:util` parseArgs wrapper that splits off
// everything after `--`, plus the small value parsers (KEY=VALUE lists, integers, endpoints).
// Pure: failures are UsageErrors, which main turns into `error: …` and exit status 2.
import { parseArgs, type ParseArgsOptionsConfig } from 'node:util';

/** A mistake in how the CLI was invoked (unknown flag, malformed value…): exit status 2. */
export class UsageError extends Error {
  /** The command whose usage to point at, e.g. `sandbox create`. */
  readonly command: string | undefined;
  constructor(message: string, command?: string) {
    super(message);
    this.name = 'UsageError';
    this.command = command;
  }
}

export const DEFAULT_GATEWAY = '127.0.0.1:8080';
const DEFAULT_GRPC_PORT = 8080;

export type Env = Record<string, string | undefined>;

export interface ParsedCommand<T extends ParseArgsOptionsConfig> {
  values: ReturnType<typeof parseArgs<{ options: T; strict: true; allowPositionals: true }>>['values'];
  /** Positional arguments before `--`. */
  positionals: string[];
  /** Everything after the first `--` (verbatim), or [] when there was none. */
  rest: string[];
  /** Whether `--` was present. */
  terminated: boolean;
}

/** Strict parse of one command's flags; `command` names it in error messages. */
export function parseCommand<T extends ParseArgsOptionsConfig>(argv: string[], options: T, command: string): ParsedCommand<T> {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options, strict: true, allowPositionals: true, allowNegative: false, tokens: true });
  } catch (err) {
    const e = err as { code?: string; message?: string };
    if (typeof e.code === 'string' && e.code.startsWith('ERR_PARSE_ARGS')) throw new UsageError(cleanParseMessage(e.code, e.message ?? String(err)), command);
    throw err;
  }
  const terminator = parsed.tokens.find((t) => t.kind === 'option-terminator');
  const cut = terminator ? terminator.index : argv.length;
  const positionals = parsed.tokens.filter((t) => t.kind === 'positional' && t.index < cut).map((t) => (t as { value: string }).value);
  return {
    values: parsed.values as ParsedCommand<T>['values'],
    positionals,
    rest: terminator ? argv.slice(cut + 1) : [],
    terminated: Boolean(terminator),
  };
}

// parseArgs messages are multi-sentence. For an unknown option keep the first sentence (the
// rest suggests quoting it as a positional); for a value that looks like a flag keep the hint.
function cleanParseMessage(code: string, message: string): string {
  if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') return message.replace(/\s*\n\s*/g, ' ');
  const first = message.split(/\.\s+(?=[A-Z])|\n/)[0] ?? message;
  return first.replace(/\.$/, '');
}

/**
 * `--env K=V` / `--label k=v` lists → a map (a later duplicate wins). The value may be empty
 * (`K=`); the key may not, and `=` is required.
 */
/** `https://` and `grpcs://` endpoints are TLS; anything else is plaintext unless a CA is given. */
export function endpointWantsTls(raw: string): boolean {
  return /^(https|grpcs):\/\//i.test(raw.trim());
}

export function parseKeyValues(items: readonly string[] | undefined, flag: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const item of items ?? []) {
    const eq = item.indexOf('=');
    if (eq < 0) throw new UsageError(`${flag} '${item}' is not KEY=VALUE (missing '=')`);
    if (eq === 0) throw new UsageError(`${flag} '${item}' has an empty key: expected KEY=VALUE`);
    out[item.slice(0, eq)] = item.slice(eq + 1);
  }
  return out;
}

/** A decimal integer within [min, max]; `what` names the flag or variable in the error. */
export function parseInteger(raw: string, what: string, min: number, max: number): number {
  const text = raw.trim();
  if (!/^\d+$/.test(text)) throw new UsageError(`${what} must be an integer, got '${raw}'`);
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < min || n > max) throw new UsageError(`${what} must be between ${min} and ${max}, got '${raw}'`);
  return n;
}

export function parsePort(raw: string, what: string): number {
  return parseInteger(raw, what, 0, 65535);
}

/** `-o FORMAT`: only `json` (and the explicit default `text`). Returns true for JSON. */
export function parseOutput(raw: string | undefined): boolean {
  if (raw === undefined || raw === 'text') return false;
  if (raw === 'json') return true;
  throw new UsageError(`unsupported output format '${raw}': use -o json`);
}

/**
 * Normalises a gateway endpoint to the `host:port` grpc-js dials (plaintext). Accepts `host:port`,
 * `http://host:port`, `grpc://host:port` (a trailing path is ignored), bracketed IPv6 and
 * `unix:/path`; a missing port means 8080 (443 for TLS URLs). `https://` and `grpcs://` (TLS) are accepted too: whether
 * to speak TLS is `endpointWantsTls`.
 */
export function normaliseEndpoint(raw: string): string {
  let text = raw.trim();
  if (text === '') throw new UsageError('the gateway endpoint is empty');
  if (text.startsWith('unix:')) return text;
  const scheme = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\//.exec(text);
  // A TLS URL without a port means 443, as it does for OpenShell's SDKs.
  const defaultPort = endpointWantsTls(text) ? 443 : DEFAULT_GRPC_PORT;
  if (scheme) {
    const name = scheme[1]!.toLowerCase();
    if (name !== 'http' && name !== 'grpc' && name !== 'https' && name !== 'grpcs') {
      throw new UsageError(`gateway endpoint '${raw}': unsupported scheme '${name}://' (use host:port, http://, https://, grpc:// or grpcs://)`);
    }
    text = text.slice(scheme[0].length);
  }
  text = text.replace(/[/?#].*$/, '');
  let host: string;
  let port: string | undefined;
  if (text.startsWith('[')) {
    const close = text.indexOf(']');
    if (close < 0) throw new UsageError(`gateway endpoint '${raw}': unterminated IPv6 address`);
    host = text.slice(0, close + 1);
    const after = text.slice(close + 1);
    if (after !== '' && !after.startsWith(':')) throw new UsageError(`gateway endpoint '${raw}' is not host:port`);
    port = after === '' ? undefined : after.slice(1);
  } else if ((text.match(/:/g) ?? []).length > 1) {
    host = `[${text}]`; // a bare IPv6 address
  } else {
    const colon = text.indexOf(':');
    host = colon < 0 ? text : text.slice(0, colon);
    port = colon < 0 ? undefined : text.slice(colon + 1);
  }
  if (host === '' || host === '[]') throw new UsageError(`gateway endpoint '${raw}' has no host`);
  const portNumber = port === undefined ? defaultPort : parseInteger(port, `gateway endpoint '${raw}' port`, 1, 65535);
  return `${host}:${portNumber}`;
}
