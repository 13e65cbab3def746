// SSH session tokens (CreateSshSession / RevokeSshSession) and the live ForwardTcp connections
// counted against them. Tokens live in Redis so any replica can check one, each listed in its
// sandbox's session index so the sandbox's delete removes them all (remove-sandbox-n); the connection caps
// are counted in Redis too, so they hold across replicas, and crash-safely: each live forward is a
// member of two sorted sets scored by its last heartbeat, and members whose replica stopped
// refreshing them (it crashed) are ignored and pruned once they are older than `staleMs`.
import type { Redis } from 'ioredis';
import { keys, tokenDigest } from './keys.ts';
import { luaScript } from './lua.ts';

const sessionKey = (token: string) => keys.sshSession(tokenDigest(token));
const forwardsByToken = (token: string) => keys.forwardsByToken(tokenDigest(token));

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

const CREATE = luaScript('create-ssh-session');
const REVOKE = luaScript('revoke-ssh-session');
const ACQUIRE = luaScript('acquire-forward');
const HEARTBEAT = luaScript('heartbeat-forwards');
const LIVE = luaScript('live-forwards');

/** What create-ssh-session-3 answers. */
const CreateResult = { sandboxGone: 0, created: 1 } as const;
/** What revoke-ssh-session-1 answers. */
const RevokeResult = { absent: 0, revoked: 1 } as const;
/** What acquire-forward-2 answers. */
const AcquireCode = { admitted: 0, tokenAtCap: 1, sandboxAtCap: 2 } as const;

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
  /** The forward sets expire this long after their last write (a cluster that stopped entirely). */
  private readonly keyTtlMs: number;

  constructor(redis: Redis, opts: { staleMs?: number } = {}) {
    this.redis = redis;
    this.staleMs = opts.staleMs ?? 15_000;
    this.keyTtlMs = this.staleMs * 4;
  }

  /**
   * Stores the session, listed in its sandbox's session index so the sandbox's delete removes it.
   * false (nothing written) when the sandbox's record is gone: a session is never stored for a
   * sandbox already deleted, even one whose delete ran since the caller read the record.
   */
  async create(token: string, rec: SshSessionRecord): Promise<boolean> {
    const digest = tokenDigest(token);
    // A session that never expires stays until its sandbox's delete (revoking marks it; its sandbox's next run voids it).
    const keyExpiresAtMs = rec.expiresAtMs > 0 ? rec.expiresAtMs + EXPIRED_GRACE_MS : 0;
    const result = await CREATE.run(
      this.redis,
      [keys.sshSession(digest), keys.sandbox(rec.sandboxId), keys.sandboxSshSessions(rec.sandboxId)],
      [digest, rec.sandboxId, String(rec.runStartedAtMs), String(rec.expiresAtMs), rec.revoked ? '1' : '0', String(rec.createdAtMs), String(keyExpiresAtMs)],
    );
    return result === CreateResult.created;
  }

  async get(token: string): Promise<SshSessionRecord | null> {
    const h = await this.redis.hgetall(sessionKey(token));
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
    return (await REVOKE.run(this.redis, [sessionKey(token)], [])) === RevokeResult.revoked;
  }

  /**
   * Admits one more forward on the token and the sandbox, unless either is at its cap. Heartbeat
   * times are Redis' clock, not this replica's: skewed replicas still agree on what is stale.
   */
  async acquireForward(slot: ForwardSlot, limits: ForwardLimits): Promise<AcquireResult> {
    const result = await ACQUIRE.run(
      this.redis,
      [forwardsByToken(slot.token), keys.forwardsBySandbox(slot.sandboxId)],
      [slot.forwardId, limits.perToken, limits.perSandbox, this.staleMs, this.keyTtlMs],
    );
    if (result === AcquireCode.admitted) return 'ok';
    return result === AcquireCode.tokenAtCap ? 'token-limit' : 'sandbox-limit';
  }

  /** Refreshes the heartbeat of this replica's live forwards (only members still present). */
  async heartbeatForwards(slots: Iterable<ForwardSlot>): Promise<void> {
    const keyList: string[] = [];
    const forwardIds: string[] = [];
    for (const s of slots) {
      keyList.push(forwardsByToken(s.token), keys.forwardsBySandbox(s.sandboxId));
      forwardIds.push(s.forwardId);
    }
    if (forwardIds.length > 0) await HEARTBEAT.run(this.redis, keyList, [this.keyTtlMs, ...forwardIds]);
  }

  async releaseForward(slot: ForwardSlot): Promise<void> {
    await this.redis
      .multi()
      .zrem(forwardsByToken(slot.token), slot.forwardId)
      .zrem(keys.forwardsBySandbox(slot.sandboxId), slot.forwardId)
      .exec();
  }

  /** Live (non-stale) forwards to a sandbox, across replicas. */
  async liveForwards(sandboxId: string): Promise<number> {
    return (await LIVE.run(this.redis, [keys.forwardsBySandbox(sandboxId)], [this.staleMs])) as number;
  }
}
