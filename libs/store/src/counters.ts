// Cluster-wide facts other than sandboxes: counters operators and tests read, the fleet's phase
// counts; and the removal of the peer secret older versions stored here.
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
 * The fleet's sandboxes by phase, counted once for the whole cluster by the reconcile sweep (which
 * reads every record anyway) instead of by every replica: a scan per replica costs Redis a read
 * of every record per replica per round. The hash expires when sweeps stop, so a reader never
 * takes an old count for a current one; it then counts for itself.
 */
export class PhaseCounts {
  private readonly redis: RedisClient;
  private readonly keys: KeySchema;
  constructor(redis: RedisClient) {
    this.redis = redis;
    this.keys = keysFor(redis);
  }

  /** Replaces the counts (one key: atomic on a cluster too); they expire after `ttlMs`. */
  async publish(counts: ReadonlyMap<number, number>, atMs: number, ttlMs: number): Promise<void> {
    const fields: (string | number)[] = ['at', atMs];
    for (const [phase, n] of counts) fields.push(String(phase), n);
    const key = this.keys.phaseCounts();
    await this.redis.multi().del(key).hset(key, ...fields).pexpire(key, ttlMs).exec();
  }

  /** The last published counts (phase number → records), or null when none is current. */
  async read(): Promise<Map<number, number> | null> {
    const hash = await this.redis.hgetall(this.keys.phaseCounts());
    if (!hash.at) return null;
    const counts = new Map<number, number>();
    for (const [field, value] of Object.entries(hash)) if (field !== 'at') counts.set(Number(field), Number(value));
    return counts;
  }
}

/**
 * Older versions kept the peer secret in Redis, in clear (`sg:peer-secret`). It is never read:
 * every replica and worker deletes it at start, so an upgraded cluster does not keep it lying there.
 */
export async function deleteLeftoverPeerSecret(redis: RedisClient): Promise<boolean> {
  return (await redis.del(keysFor(redis).legacyPeerSecret())) > 0;
}
