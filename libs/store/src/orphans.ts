// Orphaned compute in quarantine: compute the reconcile sweep found without a record. A record can
// be missing for a while without being gone (a Redis failover that has not settled, a primary
// that came back stale), so the sweep deletes such compute only after it has been seen orphaned
// for a grace period; until then it is only counted and logged. The first sightings live in
// Redis so that every sweeper (replicas and `sandgate worker`s) agrees on them.
import type { RedisClient } from './client.ts';
import { keysFor, type KeySchema } from './keys.ts';
import { luaScript } from './lua.ts';

const SIGHT = luaScript('sight-orphans');

export class OrphanQuarantine {
  private readonly redis: RedisClient;
  private readonly keys: KeySchema;

  constructor(redis: RedisClient) {
    this.redis = redis;
    this.keys = keysFor(redis);
  }

  /**
   * Records one sweep's orphans: returns, for each id, when it was first seen orphaned (ms; now
   * for a new one). Ids quarantined before and not among `ids` are released.
   */
  async sight(ids: string[], nowMs: number): Promise<Map<string, number>> {
    const firstSeen = (await SIGHT.run(this.redis, [this.keys.orphans()], [nowMs, ...ids])) as string[];
    return new Map(ids.map((id, i) => [id, Number(firstSeen[i])]));
  }

  /** Every id in quarantine, with its first sighting (tests, operators). */
  async list(): Promise<Map<string, number>> {
    const flat = await this.redis.zrange(this.keys.orphans(), '0', '-1', 'WITHSCORES');
    const out = new Map<string, number>();
    for (let i = 0; i < flat.length; i += 2) out.set(flat[i]!, Number(flat[i + 1]));
    return out;
  }
}
