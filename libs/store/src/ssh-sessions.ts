// SSH session tokens (CreateSshSession / RevokeSshSession) and the live ForwardTcp connections
// counted against them. Tokens live in Redis so any replica can check one, each listed in its
// sandbox's session index so the sandbox's delete removes them all (SandboxStore.remove); the connection caps
// are counted in Redis too, so they hold across replicas, and crash-safely: each live forward is a
// member of two sorted sets scored by its last heartbeat, and members whose replica stopped
// refreshing them (it crashed) are ignored and pruned once they are older than `staleMs`.
import type { RedisClient } from './client.ts';
import { keysFor, type KeySchema, tokenDigest } from './keys.ts';
import { groupedByTag } from './client.ts';
import { luaScript } from './lua.ts';


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

const STAGE = luaScript('stage-ssh-session');
const LIST = luaScript('list-ssh-session');
const ACTIVATE = luaScript('activate-ssh-session');
const REVOKE = luaScript('revoke-ssh-session');
const ACQUIRE = luaScript('acquire-slot');
/** How long a session whose later steps never ran stays (stage-ssh-session-1). */
const PENDING_SESSION_MS = 30_000;
const HEARTBEAT = luaScript('heartbeat-slots');
const LIVE = luaScript('live-forwards');

/** What list-ssh-session-2 and activate-ssh-session-1 answer. */
const CreateResult = { sandboxGone: 0, created: 1 } as const;
/** What revoke-ssh-session-1 answers. */
const RevokeResult = { absent: 0, revoked: 1 } as const;
/** What acquire-slot-1 answers. */
const AcquireCode = { admitted: 1, atCap: 0 } as const;

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
  private readonly redis: RedisClient;
  private readonly keys: KeySchema;
  /** A forward not refreshed for this long belongs to a dead replica and no longer counts. */
  readonly staleMs: number;
  /** The forward sets expire this long after their last write (a cluster that stopped entirely). */
  private readonly keyTtlMs: number;

  constructor(redis: RedisClient, opts: { staleMs?: number } = {}) {
    this.redis = redis;
    this.keys = keysFor(redis);
    this.staleMs = opts.staleMs ?? 15_000;
    this.keyTtlMs = this.staleMs * 4;
  }

  /**
   * Stores the session, listed in its sandbox's session index so the sandbox's delete removes it.
   * false (nothing left) when the sandbox's record is gone: a session is never stored for a
   * sandbox already deleted, even one whose delete ran since the caller read the record. In
   * steps (the session's keys are its token's slot, the index its sandbox's): the session staged
   * (pending, short-lived), listed in the index while the record is there and not sealed, then
   * made active with its real expiry.
   */
  async create(token: string, rec: SshSessionRecord): Promise<boolean> {
    const digest = tokenDigest(token);
    const sessionKey = this.keys.sshSession(digest);
    // A session that never expires stays until its sandbox's delete (revoking marks it; its sandbox's next run voids it).
    const keyExpiresAtMs = rec.expiresAtMs > 0 ? rec.expiresAtMs + EXPIRED_GRACE_MS : 0;
    await STAGE.run(this.redis, [sessionKey], [rec.sandboxId, String(rec.runStartedAtMs), String(rec.expiresAtMs), rec.revoked ? '1' : '0', String(rec.createdAtMs), PENDING_SESSION_MS]);
    const listed = await LIST.run(this.redis, [this.keys.sandbox(rec.sandboxId), this.keys.sandboxSshSessions(rec.sandboxId)], [digest, String(keyExpiresAtMs)]);
    if (listed !== CreateResult.created) {
      await this.redis.del(sessionKey);
      return false;
    }
    return (await ACTIVATE.run(this.redis, [sessionKey], [String(keyExpiresAtMs)])) === CreateResult.created;
  }

  async get(token: string): Promise<SshSessionRecord | null> {
    const h = await this.redis.hgetall(this.keys.sshSession(tokenDigest(token)));
    // Pending: its create has not finished (and may never): it grants nothing yet.
    if (!h.sbx || h.pending) return null;
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
    return (await REVOKE.run(this.redis, [this.keys.sshSession(tokenDigest(token))], [])) === RevokeResult.revoked;
  }

  /**
   * Admits one more forward on the token and the sandbox, unless either is at its cap. Heartbeat
   * times are Redis' clock, not this replica's: skewed replicas still agree on what is stale.
   */
  async acquireForward(slot: ForwardSlot, limits: ForwardLimits): Promise<AcquireResult> {
    // The token's count and the sandbox's are two slots on a cluster: one at a time, the first
    // taken back when the second is full. Never fewer counted than live, at worst one more for a
    // moment (or, if this replica dies in between, until the member goes stale).
    const acquire = (key: string, cap: number) => ACQUIRE.run(this.redis, [key], [slot.forwardId, cap, this.staleMs, this.keyTtlMs]);
    const byToken = this.keys.forwardsByToken(tokenDigest(slot.token));
    if ((await acquire(byToken, limits.perToken)) !== AcquireCode.admitted) return 'token-limit';
    if ((await acquire(this.keys.forwardsBySandbox(slot.sandboxId), limits.perSandbox)) !== AcquireCode.admitted) {
      await this.redis.zrem(byToken, slot.forwardId);
      return 'sandbox-limit';
    }
    return 'ok';
  }

  /** Refreshes the heartbeat of this replica's live forwards (only members still present). */
  async heartbeatForwards(slots: Iterable<ForwardSlot>): Promise<void> {
    const entries: { key: string; forwardId: string }[] = [];
    for (const s of slots) {
      entries.push({ key: this.keys.forwardsByToken(tokenDigest(s.token)), forwardId: s.forwardId });
      entries.push({ key: this.keys.forwardsBySandbox(s.sandboxId), forwardId: s.forwardId });
    }
    await Promise.all(
      groupedByTag(this.redis, entries, (e) => e.key).map((group) =>
        HEARTBEAT.run(this.redis, group.map((e) => e.key), [this.keyTtlMs, ...group.map((e) => e.forwardId)]),
      ),
    );
  }

  async releaseForward(slot: ForwardSlot): Promise<void> {
    // Two keys of two slots on a cluster, so two commands: a member one of them leaves behind
    // (a crash between the two) stops counting once it is stale.
    await Promise.all([
      this.redis.zrem(this.keys.forwardsByToken(tokenDigest(slot.token)), slot.forwardId),
      this.redis.zrem(this.keys.forwardsBySandbox(slot.sandboxId), slot.forwardId),
    ]);
  }

  /** Live (non-stale) forwards to a sandbox, across replicas. */
  async liveForwards(sandboxId: string): Promise<number> {
    return (await LIVE.run(this.redis, [this.keys.forwardsBySandbox(sandboxId)], [this.staleMs])) as number;
  }
}
