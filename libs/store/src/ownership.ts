// Who holds a sandbox's supervisor session. One expiring hash per sandbox, written only through
// these scripts. Every claim takes a fresh fencing token; renew and release act only while the
// caller's token is still the current one, so a replica that lost ownership (it stalled, or the
// supervisor reconnected elsewhere) can never extend or delete the newer owner's record.
import type { Redis } from 'ioredis';
import { keys } from './keys.ts';
import { LuaScript } from './lua.ts';

const CLAIM = new LuaScript(
  `
local fence = redis.call('INCR', KEYS[2])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'replica', ARGV[1], 'session', ARGV[2], 'fence', fence, 'instance', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return fence
`,
  2,
);

// Renewal. If the key expired (this replica was starved past the TTL) but nobody claimed since —
// the fence counter still holds our fence — the record is re-created: the session is still ours.
// Returns 1 renewed, 2 re-created after expiry, 0 superseded (or revoked).
const RENEW = new LuaScript(
  `
local current = redis.call('HGET', KEYS[1], 'fence')
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not current and redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('HSET', KEYS[1], 'replica', ARGV[3], 'session', ARGV[4], 'fence', ARGV[1], 'instance', ARGV[5])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 2
end
return 0
`,
  2,
);

// The same renewal for many sessions in one call (a replica renews all of its sessions per tick).
// KEYS: owner_1, fence_1, owner_2, fence_2, …; ARGV: ttl, then fence, replica, session, instance
// per session. Returns one result per session (1, 2 or 0 as above).
const RENEW_MANY = new LuaScript(
  `
local out = {}
for i = 1, #KEYS / 2 do
  local owner, fenceKey = KEYS[2 * i - 1], KEYS[2 * i]
  local base = 2 + (i - 1) * 4
  local fence = ARGV[base]
  local current = redis.call('HGET', owner, 'fence')
  if current == fence then
    redis.call('PEXPIRE', owner, ARGV[1])
    out[i] = 1
  elseif not current and redis.call('GET', fenceKey) == fence then
    redis.call('HSET', owner, 'replica', ARGV[base + 1], 'session', ARGV[base + 2], 'fence', fence, 'instance', ARGV[base + 3])
    redis.call('PEXPIRE', owner, ARGV[1])
    out[i] = 2
  else
    out[i] = 0
  end
end
return out
`,
  -1,
);

const RELEASE = new LuaScript(
  `
if redis.call('HGET', KEYS[1], 'fence') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`,
  1,
);

// Revocation: a new fence with no owner. Whoever held the session fails its next renewal and
// closes it, wherever it is.
const REVOKE = new LuaScript(
  `
redis.call('INCR', KEYS[2])
redis.call('DEL', KEYS[1])
return 1
`,
  2,
);

export interface OwnerRecord {
  replica: string;
  session: string;
  fence: number;
  instance: string;
}

// DEBUG ONLY (SANDGATE_DEBUG_DISABLE_FENCING): renew and release that ignore the fence, so the
// chaos suite can prove its invariants catch what fencing prevents. Never use in production.
const RENEW_UNFENCED = new LuaScript(
  `
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`,
  2,
);
const RENEW_MANY_UNFENCED = new LuaScript(
  `
local out = {}
for i = 1, #KEYS / 2 do
  redis.call('PEXPIRE', KEYS[2 * i - 1], ARGV[1])
  out[i] = 1
end
return out
`,
  -1,
);
const RELEASE_UNFENCED = new LuaScript(
  `
redis.call('DEL', KEYS[1])
return 1
`,
  1,
);

/** Sessions per renewMany script call: bounded work per call keeps other clients' latency low. */
const RENEW_CHUNK = 500;

export class OwnershipStore {
  private readonly redis: Redis;
  readonly ttlMs: number;
  private readonly renewScript: LuaScript;
  private readonly renewManyScript: LuaScript;
  private readonly releaseScript: LuaScript;
  constructor(redis: Redis, ttlMs: number, opts: { fencing?: boolean } = {}) {
    this.redis = redis;
    this.ttlMs = ttlMs;
    const fencing = opts.fencing ?? true;
    this.renewScript = fencing ? RENEW : RENEW_UNFENCED;
    this.renewManyScript = fencing ? RENEW_MANY : RENEW_MANY_UNFENCED;
    this.releaseScript = fencing ? RELEASE : RELEASE_UNFENCED;
  }

  async claim(sandboxId: string, replicaId: string, sessionId: string, instanceId: string): Promise<number> {
    const fence = await CLAIM.run(this.redis, [keys.owner(sandboxId), keys.fence(sandboxId)], [replicaId, sessionId, this.ttlMs, instanceId]);
    return Number(fence);
  }

  /** Extends our record; false when a newer claim (or a revocation) superseded us. */
  async renew(sandboxId: string, fence: number, holder: { replica: string; session: string; instance: string }): Promise<boolean> {
    const res = await this.renewScript.run(
      this.redis,
      [keys.owner(sandboxId), keys.fence(sandboxId)],
      [String(fence), this.ttlMs, holder.replica, holder.session, holder.instance],
    );
    return res === 1 || res === 2;
  }


  /**
   * Renews many records in one round trip (a replica's sessions, each tick); true per entry that
   * is still ours. Sent in chunks so one call never holds Redis for long.
   */
  async renewMany(entries: { sandboxId: string; fence: number; holder: { replica: string; session: string; instance: string } }[]): Promise<boolean[]> {
    const out: boolean[] = [];
    for (let i = 0; i < entries.length; i += RENEW_CHUNK) {
      const chunk = entries.slice(i, i + RENEW_CHUNK);
      const keysList: string[] = [];
      const args: (string | number)[] = [this.ttlMs];
      for (const e of chunk) {
        keysList.push(keys.owner(e.sandboxId), keys.fence(e.sandboxId));
        args.push(String(e.fence), e.holder.replica, e.holder.session, e.holder.instance);
      }
      const res = (await this.renewManyScript.run(this.redis, keysList, args)) as number[];
      for (const r of res) out.push(r === 1 || r === 2);
    }
    return out;
  }

  async release(sandboxId: string, fence: number): Promise<boolean> {
    return (await this.releaseScript.run(this.redis, [keys.owner(sandboxId)], [String(fence)])) === 1;
  }

  async revoke(sandboxId: string): Promise<void> {
    await REVOKE.run(this.redis, [keys.owner(sandboxId), keys.fence(sandboxId)], []);
  }

  async get(sandboxId: string): Promise<OwnerRecord | null> {
    const h = await this.redis.hgetall(keys.owner(sandboxId));
    if (!h.replica) return null;
    return { replica: h.replica, session: h.session ?? '', fence: Number(h.fence), instance: h.instance ?? '' };
  }
}
