// The one client type every store takes: a connection to one Redis (plain or behind Sentinels) or
// to a Redis Cluster. Which one picks the key layout (keysFor in keys.ts).
import { Cluster, type Redis } from 'ioredis';
import { hashTagOf } from './keys.ts';

export type RedisClient = Redis | Cluster;

/** A second connection like `redis` (same server or cluster, same credentials), named for CLIENT LIST. */
export function duplicateClient(redis: RedisClient, connectionName: string): RedisClient {
  if (redis instanceof Cluster) return redis.duplicate(undefined, { redisOptions: { ...redis.options.redisOptions, connectionName } });
  return redis.duplicate({ connectionName });
}

/**
 * Replies of independent reads, in order, a failed one as null, in about one round trip. On one
 * Redis `pipelined` runs them as one pipeline; on a cluster an ioredis pipeline must stay on one
 * node, so `each` sends them one by one, all at once (each is then redirected on its own when its
 * slot moves; ioredis' auto-pipelining, which batches per node, is left off: a batch whose
 * commands a failover sends different ways fails whole, with the MOVED error).
 */
export async function readAll<T>(
  redis: RedisClient,
  pipelined: (p: ReturnType<Redis['pipeline']>) => void,
  each: (c: Cluster) => Promise<T>[],
): Promise<(T | null)[]> {
  if (redis instanceof Cluster) return Promise.all(each(redis).map((p) => p.catch(() => null)));
  const p = redis.pipeline();
  pipelined(p);
  return ((await p.exec()) ?? []).map(([err, value]) => (err ? null : (value as T)));
}

/**
 * `items` in groups whose keys (`keyOf`) may go into one script: all of them on one Redis; on a
 * cluster, by hash tag (keys with the same tag share a slot), each group keeping the items' order.
 */
export function groupedByTag<T>(redis: RedisClient, items: T[], keyOf: (item: T) => string): T[][] {
  if (!(redis instanceof Cluster)) return items.length > 0 ? [items] : [];
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const tag = hashTagOf(keyOf(item));
    const group = groups.get(tag);
    if (group) group.push(item);
    else groups.set(tag, [item]);
  }
  return [...groups.values()];
}
