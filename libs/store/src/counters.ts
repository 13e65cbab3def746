// Cluster-wide facts other than sandboxes: counters operators and tests read, and the secret
// replicas share for peer calls.
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { keys, type ClusterCounterName } from './keys.ts';

export class ClusterCounters {
  private readonly redis: Redis;
  constructor(redis: Redis) {
    this.redis = redis;
  }

  async incr(name: ClusterCounterName, by = 1): Promise<void> {
    await this.redis.incrby(keys.counter(name), by);
  }

  async get(name: ClusterCounterName): Promise<number> {
    return Number((await this.redis.get(keys.counter(name))) ?? 0);
  }
}

/** The peer secret shared through Redis: the first replica sets it, every later one reads it. */
export async function sharedPeerSecret(redis: Redis): Promise<string> {
  const candidate = randomBytes(24).toString('base64url');
  await redis.set(keys.peerSecret(), candidate, 'NX');
  return (await redis.get(keys.peerSecret())) ?? candidate;
}
