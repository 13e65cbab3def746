// Mapping between thrown errors and gRPC statuses at the edge of the gateway.
import { status, type ServiceError, Metadata } from '@grpc/grpc-js';
import { GatewayError, Code } from '@sandgate/core';
import type { Logger } from '@sandgate/telemetry';

export interface StatusLike {
  code: number;
  details: string;
}

/** What the client should see for an error: our own errors as they are; anything else INTERNAL. */
export function toStatus(err: unknown, log?: Logger): StatusLike {
  if (err instanceof GatewayError) return { code: err.code, details: err.message };
  const e = err as Partial<ServiceError> | undefined;
  if (e && typeof e.code === 'number' && typeof e.details === 'string' && e.code !== status.OK) {
    return { code: e.code, details: e.details };
  }
  log?.error('internal error', { err: err instanceof Error ? err.stack : String(err) });
  return { code: Code.INTERNAL, details: `internal error: ${err instanceof Error ? err.message : String(err)}` };
}

/** A ServiceError object as grpc-js expects for callbacks and `emit('error')`. */
export function toServiceError(err: unknown, log?: Logger): Partial<ServiceError> {
  const s = toStatus(err, log);
  return { code: s.code, details: s.details, message: s.details, metadata: new Metadata() };
}
