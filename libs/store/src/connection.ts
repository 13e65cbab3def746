// Redis connections for the apps, so that connection policy lives with the rest of Redis.
import { Redis } from 'ioredis';

/**
 * - `commands`: request/response traffic; a command fails after two reconnect attempts, so
 *   callers see UNAVAILABLE instead of hanging while Redis is away.
 * - `jobs-worker`: a BullMQ worker's blocking connection, which must retry forever (BullMQ
 *   refuses any other setting).
 */
export type RedisPurpose = 'commands' | 'jobs-worker';

export function createRedisConnection(
  url: string,
  purpose: RedisPurpose,
  opts: { lazyConnect?: boolean; /** Shown by CLIENT LIST, so an operator (or a test) can tell connections apart. */ connectionName?: string } = {},
): Redis {
  return new Redis(url, {
    maxRetriesPerRequest: purpose === 'jobs-worker' ? null : 2,
    lazyConnect: opts.lazyConnect ?? false,
    ...(opts.connectionName ? { connectionName: opts.connectionName } : {}),
  });
}
