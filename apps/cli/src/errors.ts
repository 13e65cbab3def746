// How failures are reported: `error: <message>` on stderr, and the exit status.
import { status as Status } from '@grpc/grpc-js';
import { UsageError } from './args.ts';
import { isServiceError, statusName } from './client.ts';

export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;
export const EXIT_INTERRUPTED = 130;

/** Raised by commands that already printed their own error; carries the exit status. */
export class ExitError extends Error {
  readonly exitCode: number;
  constructor(exitCode: number, message = `exit ${exitCode}`) {
    super(message);
    this.name = 'ExitError';
    this.exitCode = exitCode;
  }
}

/** The message for a gRPC failure of a unary call against `endpoint`. */
export function describeGrpcError(err: unknown, endpoint?: string): string {
  if (!isServiceError(err)) return err instanceof Error ? err.message : String(err);
  const details = err.details || statusName(err.code);
  // Only a transport failure means the gateway itself could not be reached; an UNAVAILABLE the
  // gateway sent (a relay hop broke, a supervisor is reconnecting) is shown as it is.
  if (err.code === Status.UNAVAILABLE && endpoint && /^(No connection established|Failed to connect|Connection dropped)/.test(details)) {
    // grpc-js: "No connection established. Last error: Error: connect ECONNREFUSED …. Resolution note: "
    const last = /Last error: (?:Error: )?(.*?)(?:\.? Resolution note:.*)?$/s.exec(details);
    return `cannot reach the gateway at ${endpoint}: ${last ? last[1] : details}`;
  }
  if (err.code === Status.DEADLINE_EXCEEDED) return `the gateway${endpoint ? ` at ${endpoint}` : ''} did not answer in time (${details})`;
  return details;
}

/** Prints an error the way every command does and returns the exit status to use. */
export function reportError(err: unknown, endpoint?: string): number {
  if (err instanceof ExitError) return err.exitCode;
  if (err instanceof UsageError) {
    const hint = err.command ? `sandgate ${err.command} --help` : 'sandgate --help';
    process.stderr.write(`error: ${err.message}\nrun '${hint}' for usage\n`);
    return EXIT_USAGE;
  }
  process.stderr.write(`error: ${describeGrpcError(err, endpoint)}\n`);
  return EXIT_FAILURE;
}
