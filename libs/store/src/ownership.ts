// Who holds a sandbox's supervisor session. One expiring hash per sandbox, written only through
// these scripts. Every claim takes a fresh fencing token; renew and release act only while the
// caller's token is still the current one, so a replica that lost ownership (it stalled, or the
// supervisor reconnected elsewhere) can never extend or delete the newer owner's record.
import { Cluster, type Redis } from 'ioredis';
import { keysFor, type KeySchema } from './keys.ts';
import { luaScript, type LuaScript } from './lua.ts';

const CLAIM = luaScript('claim');
const RENEW = luaScript('renew');
const RENEW_MANY = luaScript('renew-many');
const RELEASE = luaScript('release');
const REVOKE = luaScript('revoke-owner');
// DEBUG ONLY (debug break "fencing"): renew and release that ignore the fence, so the chaos suite
// can prove its invariants catch what fencing prevents. Never use in production.
const RENEW_UNFENCED = luaScript('renew-unfenced');
const RENEW_MANY_UNFENCED = luaScript('renew-many-unfenced');
const RELEASE_UNFENCED = luaScript('release-unfenced');

/** What renew-2 and renew-many-n answer per session. */
const RenewResult = { superseded: 0, renewed: 1, recreated: 2 } as const;
/** What release-1 answers. */
const ReleaseResult = { notOwner: 0, released: 1 } as const;

const stillOurs = (res: unknown) => res === RenewResult.renewed || res === RenewResult.recreated;

export interface OwnerRecord {
  replica: string;
  session: string;
  fence: number;
  instance: string;
}

type RenewEntry = { sandboxId: string; fence: number; holder: { replica: string; session: string; instance: string } };

/** Sessions per renewMany script call: bounded work per call keeps other clients' latency low. */
const RENEW_CHUNK = 500;

export class OwnershipStore {
  private readonly redis: Redis | Cluster;
  private readonly keys: KeySchema;
  readonly ttlMs: number;
  private readonly renewScript: LuaScript;
  private readonly renewManyScript: LuaScript;
  private readonly releaseScript: LuaScript;
  constructor(redis: Redis | Cluster, ttlMs: number, opts: { fencing?: boolean } = {}) {
    this.redis = redis;
    this.keys = keysFor(redis);
    this.ttlMs = ttlMs;
    const fencing = opts.fencing ?? true;
    this.renewScript = fencing ? RENEW : RENEW_UNFENCED;
    this.renewManyScript = fencing ? RENEW_MANY : RENEW_MANY_UNFENCED;
    this.releaseScript = fencing ? RELEASE : RELEASE_UNFENCED;
  }

  async claim(sandboxId: string, replicaId: string, sessionId: string, instanceId: string): Promise<number> {
    const fence = await CLAIM.run(this.redis, [this.keys.owner(sandboxId), this.keys.fence(sandboxId)], [replicaId, sessionId, this.ttlMs, instanceId]);
    return Number(fence);
  }

  /** Extends our record; false when a newer claim (or a revocation) superseded us. */
  async renew(sandboxId: string, fence: number, holder: { replica: string; session: string; instance: string }): Promise<boolean> {
    const res = await this.renewScript.run(
      this.redis,
      [this.keys.owner(sandboxId), this.keys.fence(sandboxId)],
      [String(fence), this.ttlMs, holder.replica, holder.session, holder.instance],
    );
    return stillOurs(res);
  }

  /**
   * Renews many records in one round trip (a replica's sessions, each tick); true per entry that
   * is still ours. Sent in chunks so one call never holds Redis for long.
   */
  async renewMany(entries: RenewEntry[]): Promise<boolean[]> {
    // On a cluster each sandbox's keys are a slot of their own: one call per sandbox, all sent at
    // once (ioredis writes them to each node's connection back to back).
    if (this.redis instanceof Cluster) return Promise.all(entries.map((e) => this.renewChunk([e]).then((r) => r[0]!)));
    const out: boolean[] = [];
    for (let i = 0; i < entries.length; i += RENEW_CHUNK) out.push(...(await this.renewChunk(entries.slice(i, i + RENEW_CHUNK))));
    return out;
  }

  private async renewChunk(chunk: RenewEntry[]): Promise<boolean[]> {
    const keysList: string[] = [];
    const args: (string | number)[] = [this.ttlMs];
    for (const e of chunk) {
      keysList.push(this.keys.owner(e.sandboxId), this.keys.fence(e.sandboxId));
      args.push(String(e.fence), e.holder.replica, e.holder.session, e.holder.instance);
    }
    const res = (await this.renewManyScript.run(this.redis, keysList, args)) as number[];
    return res.map(stillOurs);
  }

  async release(sandboxId: string, fence: number): Promise<boolean> {
    return (await this.releaseScript.run(this.redis, [this.keys.owner(sandboxId)], [String(fence)])) === ReleaseResult.released;
  }

  async revoke(sandboxId: string): Promise<void> {
    await REVOKE.run(this.redis, [this.keys.owner(sandboxId), this.keys.fence(sandboxId)], []);
  }

  /**
   * The current lease's holder and the time left on it (one round trip, no script): what a
   * claim is about to take over. Read for the failover metrics only, so a race with the claim
   * that follows is harmless.
   */
  async lease(sandboxId: string): Promise<{ replica: string; remainingMs: number } | null> {
    const [[, replica], [, pttl]] = (await this.redis.multi().hget(this.keys.owner(sandboxId), 'replica').pttl(this.keys.owner(sandboxId)).exec()) as [
      [unknown, string | null],
      [unknown, number],
    ];
    return replica && pttl > 0 ? { replica, remainingMs: pttl } : null;
  }

  async get(sandboxId: string): Promise<OwnerRecord | null> {
    const h = await this.redis.hgetall(this.keys.owner(sandboxId));
    if (!h.replica) return null;
    return { replica: h.replica, session: h.session ?? '', fence: Number(h.fence), instance: h.instance ?? '' };
  }
}
