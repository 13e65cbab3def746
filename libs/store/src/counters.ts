// Cluster-wide facts other than sandboxes: counters operators and tests read; and the removal of
// the peer secret older versions stored here.
import type { RedisClient } from './client.ts';
import { keysFor, type KeySchema, type ClusterCounterName } from './keys.ts';

export class ClusterCounters {
  private readonly redis: RedisClient;
  private readonly keys: KeySchema;
  constructor(redis: RedisClient) {
    this.redis = redis;
    this.keys = keysFor(redis);
  }

  async incr(name: ClusterCounterName, by = 1): Promise<void> {
    await this.redis.incrby(this.keys.counter(name), by);
  }

  async get(name: ClusterCounterName): Promise<number> {
    return Number((await this.redis.get(this.keys.counter(name))) ?? 0);
  }
}

/**
 * Older versions kept the peer secret in Redis, in clear (`sg:peer-secret`). It is never read:
 * every replica and worker deletes it at start, so an upgraded cluster does not keep it lying there.
 */
export async function deleteLeftoverPeerSecret(redis: RedisClient): Promise<boolean> {
  return (await redis.del(keysFor(redis).legacyPeerSecret())) > 0;
}
