// Mapping between thrown errors and gRPC statuses at the edge of the gateway.
import { status, type ServiceError, Metadata } from '@grpc/grpc-js';
import { GatewayError, Code } from '@sandgate/core';
import type { Logger } from '@sandgate/telemetry';

export interface StatusLike {
  code: number;
  details: string;
}

/**
 * ioredis gave up on a command because Redis is unreachable (restarting, failing over): the
 * request did not fail on its merits, and the same request will work once Redis is back.
 */
export function isRedisUnavailable(err: unknown): boolean {
  const e = err as { name?: string; message?: string; code?: string } | undefined;
  if (!e || typeof e !== 'object') return false;
  if (e.name === 'MaxRetriesPerRequestError') return true;
  if (e.code === 'ECONNREFUSED' || e.code === 'ECONNRESET' || e.code === 'EPIPE') return true;
  return typeof e.message === 'string' && /^(Connection is closed|Stream isn't writeable)/.test(e.message);
}

/** What the client should see for an error: our own errors as they are; anything else INTERNAL. */
export function toStatus(err: unknown, log?: Logger): StatusLike {
  if (err instanceof GatewayError) return { code: err.code, details: err.message };
  if (isRedisUnavailable(err)) {
    log?.warn('redis unavailable', { err: (err as Error).message });
    return { code: Code.UNAVAILABLE, details: 'the gateway cannot reach its Redis right now; retry' };
  }
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
