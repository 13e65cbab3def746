// Warm pools in Redis: definitions (sg:pool:{name}, sg:pools), members (records in the pool's
// workspace, whose sandbox set is the member set), and the claim that moves a member into a
// caller's workspace once (claim-record-2's compare-and-set, in steps: PoolStore.claim). The rules are libs/core's pools.ts.
import { readAll, type RedisClient } from './client.ts';
import type { Sandbox } from '@sandgate/protocols';
import { Code, GatewayError, poolMemberName, poolWorkspace, type PoolDefinition, type PoolTemplate } from '@sandgate/core';
import { keysFor, type KeySchema } from './keys.ts';
import { luaScript } from './lua.ts';
import { CREATE_WINDOW_MS, EVENTS_MAXLEN, MemberBusyError, sandboxCodec, type SandboxStore, type StoredSandbox } from './sandbox-store.ts';

const SET = luaScript('set-pool');
const RESERVE_MEMBER = luaScript('reserve-pool-member');
const CLAIM_CHECK = luaScript('claim-member-check');
const CLAIM_RECORD = luaScript('claim-record');
const FORGET = luaScript('forget-pool');
const NOTE_FAILURE = luaScript('note-pool-failure');
const CLEAR_FAILURES = luaScript('clear-pool-failures');
const DROP_LOST_MEMBER = luaScript('drop-lost-pool-member');

/** What createMember answers (reserve-pool-member-4's first answer). */
export const MemberCreateResult = { created: 1, full: 0, stale: -1 } as const;
/** reserve-pool-member-4's answer when the member's name is taken. */
const MEMBER_NAME_TAKEN = -2;
/** What claim-record-2 answers. */
const ClaimResult = { claimed: 1, missed: -4, tooLate: -1 } as const;

export interface ClaimTarget {
  workspace: string;
  name: string;
  maxPerWorkspace: number;
}

export class PoolStore {
  private readonly redis: RedisClient;
  private readonly keys: KeySchema;
  private readonly sandboxes: SandboxStore;

  constructor(redis: RedisClient, sandboxes: SandboxStore) {
    this.redis = redis;
    this.keys = keysFor(redis);
    this.sandboxes = sandboxes;
  }

  /** Creates or replaces the definition; returns it as stored (a template change is a new generation). */
  async set(name: string, size: number, template: PoolTemplate, autoMatch = false): Promise<PoolDefinition> {
    await SET.run(this.redis, [this.keys.pool(name)], [name, JSON.stringify(template), size, Date.now(), autoMatch ? '1' : '0']);
    // After the definition, never before: forget() relies on the order.
    await this.redis.sadd(this.keys.poolIndex(), name);
    const stored = await this.get(name);
    if (!stored) throw new Error(`pool ${name} vanished right after it was set`);
    return stored;
  }

  async get(name: string): Promise<PoolDefinition | null> {
    const hash = await this.redis.hgetall(this.keys.pool(name));
    return hash.template ? toDefinition(name, hash) : null;
  }

  /** Every pool, by name. */
  async list(): Promise<PoolDefinition[]> {
    const names = (await this.redis.smembers(this.keys.poolIndex())).sort();
    const hashes = await readAll(
      this.redis,
      (p) => names.forEach((name) => p.hgetall(this.keys.pool(name))),
      (c) => names.map((name) => c.hgetall(this.keys.pool(name))),
    );
    const out: PoolDefinition[] = [];
    hashes.forEach((h, i) => {
      if (h?.template) out.push(toDefinition(names[i]!, h));
    });
    return out;
  }

  /** Names in the index, also those whose definition is gone (members still to retire). */
  async names(): Promise<string[]> {
    return this.redis.smembers(this.keys.poolIndex());
  }

  /**
   * Deletes the definition. Its name stays in the index until the pool-refill job has retired
   * every member (forget), so a lost refill is found again by the sweep.
   */
  async delete(name: string): Promise<boolean> {
    return (await this.redis.del(this.keys.pool(name))) === 1;
  }

  /** Drops a deleted pool's name once its last member is gone; false while either remains. */
  async forget(name: string): Promise<boolean> {
    const mayForget = () => FORGET.run(this.redis, [this.keys.pool(name), this.keys.workspaceSandboxes(poolWorkspace(name))], []);
    if ((await mayForget()) !== 1) return false;
    const removed = (await this.redis.srem(this.keys.poolIndex(), name)) === 1;
    // A SetPool between the look and the removal wrote its definition first: put the name back.
    if ((await mayForget()) !== 1) {
      await this.redis.sadd(this.keys.poolIndex(), name);
      return false;
    }
    return removed;
  }

  /**
   * Records a failed start of `generation`'s members: the refill waits `firstMs`, doubled per
   * consecutive failure up to `longestMs`, before starting more. `seenFailures`: the pool's
   * failure count as the caller read it before launching, so that refills side by side count
   * their round once. Returns the wait, or null when the failure does not count: the pool is gone
   * or moved to another generation meanwhile, or a refill beside this one recorded the round.
   */
  async noteFailure(name: string, generation: number, seenFailures: number, error: string, firstMs: number, longestMs: number): Promise<number | null> {
    const delay = (await NOTE_FAILURE.run(this.redis, [this.keys.pool(name)], [generation, Date.now(), firstMs, longestMs, error.slice(0, 1000), seenFailures])) as number;
    return delay < 0 ? null : delay;
  }

  /** A member of `generation` got Ready: the pool's failures are forgotten. True if there were any. */
  async clearFailures(name: string, generation: number): Promise<boolean> {
    return (await CLEAR_FAILURES.run(this.redis, [this.keys.pool(name)], [generation])) === 1;
  }

  /** The pool's unclaimed members' records (any phase). */
  async members(name: string): Promise<StoredSandbox[]> {
    return this.sandboxes.readMany(await this.redis.smembers(this.keys.workspaceSandboxes(poolWorkspace(name))));
  }

  /**
   * The pool's members' records, and the ids in its member set that have no record and no
   * pending create or delete: lost (dropLost). The pending entries are read before the records:
   * a create settles (drops its entry) only after writing its record, so an id without an entry
   * then and without a record after had its record written and lost (or deleted meanwhile).
   */
  async membership(name: string): Promise<{ members: StoredSandbox[]; lost: string[] }> {
    const workspace = poolWorkspace(name);
    const [ids, pending] = await Promise.all([this.redis.smembers(this.keys.workspaceSandboxes(workspace)), this.redis.hkeys(this.keys.pendingSandboxes(workspace))]);
    const members = await this.sandboxes.readMany(ids);
    const present = new Set([...pending, ...members.map((m) => m.sandbox.metadata!.id!)]);
    return { members, lost: ids.filter((id) => !present.has(id)) };
  }

  /** Takes lost members (membership) out of the pool: its set, their names, the sandbox index. How many went. */
  async dropLost(name: string, ids: string[]): Promise<number> {
    const workspace = poolWorkspace(name);
    let dropped = 0;
    for (const id of ids) {
      const keys = [this.keys.workspaceSandboxes(workspace), this.keys.sandboxName(workspace, poolMemberName(name, id)), this.keys.pendingSandboxes(workspace)];
      if ((await DROP_LOST_MEMBER.run(this.redis, keys, [id])) !== 1) continue;
      await this.redis.srem(this.keys.sandboxIndex(), id);
      dropped++;
    }
    return dropped;
  }

  /**
   * Writes a new member's record, unless the pool is full, gone or of another generation: a
   * create in steps (SandboxStore.create), its reservation in the pool's workspace checking the
   * pool (reserve-pool-member-4).
   */
  async createMember(sandbox: Sandbox, credentialHash: string, pool: string, generation: number): Promise<number> {
    const { id, name } = sandbox.metadata!;
    const workspace = poolWorkspace(pool);
    const [answer, at] = (await RESERVE_MEMBER.run(
      this.redis,
      [this.keys.pool(pool), this.keys.workspaceSandboxes(workspace), this.keys.sandboxName(workspace, name!), this.keys.pendingSandboxes(workspace)],
      [id!, name!, generation],
    )) as [number, number?];
    if (answer === MEMBER_NAME_TAKEN) throw new GatewayError(Code.ALREADY_EXISTS, `pool member name '${name}' is taken in pool '${pool}'`);
    if (answer !== MemberCreateResult.created) return answer;
    await this.sandboxes.writeReserved(id!, workspace, name!, at!, [sandboxCodec.encode(sandbox), workspace, name!, credentialHash, EVENTS_MAXLEN], ['pool', pool, 'poolgen', String(generation)]);
    return MemberCreateResult.created;
  }

  /**
   * Makes `member` (as read: its resource_version and generation) the sandbox `claimed`, in the
   * caller's workspace. False when the member was taken or changed meanwhile (try another);
   * throws create's errors (name taken, workspace missing or terminating, quota). In steps: the
   * name reserved in the caller's workspace (its pending entry names the member), the member
   * checked in its pool, the record claimed by compare-and-set (the step that makes it the
   * caller's, once), the member taken out of its pool, the entry settled.
   */
  async claim(member: StoredSandbox, claimed: Sandbox, target: ClaimTarget): Promise<boolean> {
    const id = member.sandbox.metadata!.id!;
    const pool = member.pool;
    if (!pool) return false;
    const memberName = member.sandbox.metadata!.name!;
    const memberWorkspace = poolWorkspace(pool.name);
    const claimable = await CLAIM_CHECK.run(this.redis, [this.keys.pool(pool.name), this.keys.workspaceSandboxes(memberWorkspace)], [id, pool.generation]);
    if (claimable !== 1) return false;
    const op = `claim ${pool.name} ${memberName}` as const;
    let at: number;
    try {
      at = await this.sandboxes.reserve(id, target.workspace, target.name, target.maxPerWorkspace, op);
    } catch (err) {
      if (err instanceof MemberBusyError) return false; // another claim into this workspace has it
      throw err;
    }
    const entry = `claim ${at} ${target.name} ${pool.name} ${memberName}`;
    let answer: unknown;
    try {
      answer = await CLAIM_RECORD.run(
        this.redis,
        [this.keys.sandbox(id), this.keys.events(id)],
        [member.resourceVersion, pool.generation, sandboxCodec.encode(claimed), target.workspace, target.name, EVENTS_MAXLEN, at, CREATE_WINDOW_MS],
      );
    } catch (err) {
      await this.sandboxes.releaseReservation(id, target.workspace, target.name, entry).catch(() => undefined);
      throw err;
    }
    if (answer !== ClaimResult.claimed) {
      await this.sandboxes.releaseReservation(id, target.workspace, target.name, entry).catch(() => undefined);
      if (answer === ClaimResult.missed) return false;
      throw new GatewayError(Code.UNAVAILABLE, `claiming a member of pool '${pool.name}' took too long (over ${CREATE_WINDOW_MS} ms between its steps); retry`);
    }
    // Claimed: what is left only tidies up, and the sweep finishes it if this replica dies now.
    await this.sandboxes.takePoolMember(id, pool.name, memberName);
    await this.sandboxes.settle(id, target.workspace, entry);
    return true;
  }
}

function toDefinition(name: string, hash: Record<string, string>): PoolDefinition {
  return {
    name,
    size: Number(hash.size ?? 0),
    template: JSON.parse(hash.template!) as PoolTemplate,
    generation: Number(hash.gen ?? 0),
    createdAtMs: Number(hash.created ?? 0),
    failures: Number(hash.fails ?? 0),
    retryAtMs: Number(hash.retryat ?? 0),
    lastError: hash.lasterr ?? '',
    autoMatch: hash.auto === '1',
  };
}
