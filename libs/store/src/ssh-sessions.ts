// SSH session tokens (CreateSshSession / RevokeSshSession) and the live ForwardTcp connections
// counted against them. Tokens live in Redis so any replica can check one; the connection caps
// are counted in Redis too, so they hold across replicas, and crash-safely: each live forward is a
// member of two sorted sets scored by its last heartbeat, and members whose replica stopped
// refreshing them (it crashed) are ignored and pruned once they are older than `staleMs`.
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import { LuaScript } from './lua.ts';

/**
 * Key names. The token itself is a bearer secret: keys carry its SHA-256, so listing keys (or a
 * debugging dump) never reveals a usable token.
 */
export const sshKeys = {
  /** Hash, expiring: one SSH session (`sbx`, `run`, `exp`, `rev`, `created`). */
  session: (token: string) => `sg:ssh:${tokenDigest(token)}`,
  /** Sorted set, expiring: live forwards on one token (member = forward id, score = heartbeat ms). */
  forwardsByToken: (token: string) => `sg:sshfwd:tok:${tokenDigest(token)}`,
  /** Sorted set, expiring: live forwards to one sandbox (member = forward id, score = heartbeat ms). */
  forwardsBySandbox: (sandboxId: string) => `sg:sshfwd:sbx:${sandboxId}`,
} as const;

export function tokenDigest(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

export interface SshSessionRecord {
  sandboxId: string;
  /** The sandbox run the token was minted for (its `runStartedAtMs`): a new run voids it. */
  runStartedAtMs: number;
  /** ms epoch; 0 = never. */
  expiresAtMs: number;
  revoked: boolean;
  createdAtMs: number;
}

/** How long a session's key outlives its expiry, so a late use says "expired" rather than "not found". */
const EXPIRED_GRACE_MS = 3_600_000;

// KEYS: the session. Returns 1 if it existed (and is now revoked), 0 otherwise.
const REVOKE = new LuaScript(
  `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'rev', '1')
return 1
`,
  1,
);

// KEYS: forwards by token, forwards by sandbox.
// ARGV: now, stale-before, forward id, per-token cap, per-sandbox cap, key ttl ms.
// Returns 0 (admitted), 1 (token at its cap), 2 (sandbox at its cap).
const ACQUIRE = new LuaScript(
  `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[2])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 1 end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then return 2 end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
return 0
`,
  2,
);

export interface ForwardLimits {
  perToken: number;
  perSandbox: number;
}

export type AcquireResult = 'ok' | 'token-limit' | 'sandbox-limit';

/** One live forward, as its replica refreshes it. */
export interface ForwardSlot {
  token: string;
  sandboxId: string;
  forwardId: string;
}

export class SshSessionStore {
  private readonly redis: Redis;
  /** A forward not refreshed for this long belongs to a dead replica and no longer counts. */
  readonly staleMs: number;

  constructor(redis: Redis, opts: { staleMs?: number } = {}) {
    this.redis = redis;
    this.staleMs = opts.staleMs ?? 15_000;
  }

  async create(token: string, rec: SshSessionRecord): Promise<void> {
    const key = sshKeys.session(token);
    const multi = this.redis
      .multi()
      .hset(key, {
        sbx: rec.sandboxId,
        run: String(rec.runStartedAtMs),
        exp: String(rec.expiresAtMs),
        rev: rec.revoked ? '1' : '0',
        created: String(rec.createdAtMs),
      });
    // A session that never expires stays until revoked; its sandbox's next run voids it anyway.
    if (rec.expiresAtMs > 0) multi.pexpireat(key, rec.expiresAtMs + EXPIRED_GRACE_MS);
    await multi.exec();
  }

  async get(token: string): Promise<SshSessionRecord | null> {
    const h = await this.redis.hgetall(sshKeys.session(token));
    if (!h.sbx) return null;
    return {
      sandboxId: h.sbx,
      runStartedAtMs: Number(h.run ?? 0),
      expiresAtMs: Number(h.exp ?? 0),
      revoked: h.rev === '1',
      createdAtMs: Number(h.created ?? 0),
    };
  }

  /** true if the token existed (it is revoked now, also if it already was). */
  async revoke(token: string): Promise<boolean> {
    return (await REVOKE.run(this.redis, [sshKeys.session(token)], [])) === 1;
  }

  /** Admits one more forward on the token and the sandbox, unless either is at its cap. */
  async acquireForward(slot: ForwardSlot, limits: ForwardLimits, nowMs = Date.now()): Promise<AcquireResult> {
    const result = await ACQUIRE.run(
      this.redis,
      [sshKeys.forwardsByToken(slot.token), sshKeys.forwardsBySandbox(slot.sandboxId)],
      [nowMs, nowMs - this.staleMs, slot.forwardId, limits.perToken, limits.perSandbox, this.staleMs * 4],
    );
    return result === 0 ? 'ok' : result === 1 ? 'token-limit' : 'sandbox-limit';
  }

  /** Refreshes the heartbeat of this replica's live forwards (only members still present). */
  async heartbeatForwards(slots: Iterable<ForwardSlot>, nowMs = Date.now()): Promise<void> {
    const multi = this.redis.multi();
    let n = 0;
    for (const s of slots) {
      for (const key of [sshKeys.forwardsByToken(s.token), sshKeys.forwardsBySandbox(s.sandboxId)]) {
        multi.zadd(key, 'XX', nowMs, s.forwardId);
        multi.pexpire(key, this.staleMs * 4);
      }
      n++;
    }
    if (n > 0) await multi.exec();
  }

  async releaseForward(slot: ForwardSlot): Promise<void> {
    await this.redis
      .multi()
      .zrem(sshKeys.forwardsByToken(slot.token), slot.forwardId)
      .zrem(sshKeys.forwardsBySandbox(slot.sandboxId), slot.forwardId)
      .exec();
  }

  /** Live (non-stale) forwards to a sandbox, across replicas. */
  async liveForwards(sandboxId: string, nowMs = Date.now()): Promise<number> {
    return this.redis.zcount(sshKeys.forwardsBySandbox(sandboxId), nowMs - this.staleMs, '+inf');
  }
}
