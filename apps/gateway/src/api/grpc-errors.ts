// Mapping between thrown errors and gRPC statuses at the edge of the gateway.
import { status, type ServiceError, Metadata } from '@grpc/grpc-js';
import { GatewayError, Code } from '@sandgate/core';
import type { Logger } from '@sandgate/telemetry';

export interface StatusLike {
  code: number;
  details: string;
}

/**
 * Redis answers of a cluster (or a primary) in the middle of a failover or a resharding: the
 * slot's owner is moving (MOVED, ASK: ioredis follows them, but not when the target is the node
 * that just died, nor inside a pipeline whose commands moved apart), the cluster cannot serve
 * the slot yet (CLUSTERDOWN, TRYAGAIN), a node is loading or was demoted (LOADING, READONLY,
 * MASTERDOWN).
 */
const REDIS_MOVING = /^(MOVED|ASK|CLUSTERDOWN|TRYAGAIN|LOADING|READONLY|MASTERDOWN) /;

/**
 * ioredis gave up on a command because Redis is unreachable (restarting, failing over): the
 * request did not fail on its merits, and the same request will work once Redis is back.
 */
export function isRedisUnavailable(err: unknown): boolean {
  const e = err as { name?: string; message?: string; code?: string } | undefined;
  if (!e || typeof e !== 'object') return false;
  if (e.name === 'MaxRetriesPerRequestError' || e.name === 'ClusterAllFailedError') return true;
  if (e.code === 'ECONNREFUSED' || e.code === 'ECONNRESET' || e.code === 'EPIPE') return true;
  if (typeof e.message !== 'string') return false;
  return /^(Connection is closed|Stream isn't writeable|Failed to refresh slots cache|None of startup nodes is available|Too many Cluster redirections)/.test(e.message) || REDIS_MOVING.test(e.message);
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
  log?.error('internal error', { err });
  return { code: Code.INTERNAL, details: `internal error: ${err instanceof Error ? err.message : String(err)}` };
}

/**
 * How a failed relay hop reaches the client. A hop that vanished (a killed replica, a reset
 * stream, a dropped peer link) surfaces as CANCELLED, UNKNOWN, INTERNAL or no status at all:
 * to the client that is a broken path, which is retriable (UNAVAILABLE, `what: details`).
 * Deliberate statuses from the far end (RESOURCE_EXHAUSTED, …) pass through unchanged.
 */
export function relayFailure(err: unknown, what: string): GatewayError {
  const e = err as { code?: number; details?: string } | undefined;
  const code = e?.code;
  if (code === undefined || code === Code.CANCELLED || code === Code.UNKNOWN || code === Code.INTERNAL || code === Code.OK) {
    return new GatewayError(Code.UNAVAILABLE, e?.details ? `${what}: ${e.details}` : what);
  }
  return new GatewayError(code as Code, e?.details ?? what);
}

/**
 * The status an exec or forward client gets for `err`. `retriableAsInternal` is the debug fault
 * `retriable-errors` (negative chaos runs only): a retriable failure (UNAVAILABLE, e.g. a broken
 * relay hop as relayFailure reports it) then reaches the client as INTERNAL, which it must not retry.
 */
export function toClientError(err: unknown, log: Logger | undefined, retriableAsInternal: boolean): Partial<ServiceError> {
  const s = toServiceError(err, log);
  return retriableAsInternal && s.code === Code.UNAVAILABLE ? { ...s, code: Code.INTERNAL } : s;
}

/** A ServiceError object as grpc-js expects for callbacks and `emit('error')`. */
export function toServiceError(err: unknown, log?: Logger): Partial<ServiceError> {
  const s = toStatus(err, log);
  return { code: s.code, details: s.details, message: s.details, metadata: new Metadata() };
}
