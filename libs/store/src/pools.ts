// Warm pools in Redis: definitions (sg:pool:{name}, sg:pools), members (records in the pool's
// workspace, whose sandbox set is the member set), and the claim that moves a member into a
// caller's workspace atomically (claim-pool-member-9). The rules are libs/core's pools.ts.
import type { Redis } from 'ioredis';
import { randomUUID } from 'node:crypto';
import type { Sandbox } from '@sandgate/protocols';
import { DEFAULT_WORKSPACE, poolWorkspace, type PoolDefinition, type PoolTemplate } from '@sandgate/core';
import { keys } from './keys.ts';
import { luaScript } from './lua.ts';
import { createRefusal, EVENTS_MAXLEN, sandboxCodec, type SandboxStore, type StoredSandbox } from './sandbox-store.ts';

const SET = luaScript('set-pool');
const DELETE = luaScript('delete-pool');
const CREATE_MEMBER = luaScript('create-pool-member');
const CLAIM = luaScript('claim-pool-member');
const FORGET = luaScript('forget-pool');
const NOTE_FAILURE = luaScript('note-pool-failure');
const CLEAR_FAILURES = luaScript('clear-pool-failures');

/** What create-pool-member-6 answers. */
export const MemberCreateResult = { created: 1, full: 0, stale: -1 } as const;
/** claim-pool-member-9's answer when the member cannot be claimed (any other non-1 is create-sandbox-7's). */
const CLAIM_MISSED = -4;

export interface ClaimTarget {
  workspace: string;
  name: string;
  maxPerWorkspace: number;
}

export class PoolStore {
  private readonly redis: Redis;
  private readonly sandboxes: SandboxStore;

  constructor(redis: Redis, sandboxes: SandboxStore) {
    this.redis = redis;
    this.sandboxes = sandboxes;
  }

  /** Creates or replaces the definition; returns it as stored (a template change is a new generation). */
  async set(name: string, size: number, template: PoolTemplate, autoMatch = false): Promise<PoolDefinition> {
    await SET.run(this.redis, [keys.pool(name), keys.poolIndex()], [name, JSON.stringify(template), size, Date.now(), autoMatch ? '1' : '0']);
    const stored = await this.get(name);
    if (!stored) throw new Error(`pool ${name} vanished right after it was set`);
    return stored;
  }

  async get(name: string): Promise<PoolDefinition | null> {
    const hash = await this.redis.hgetall(keys.pool(name));
    return hash.template ? toDefinition(name, hash) : null;
  }

  /** Every pool, by name. */
  async list(): Promise<PoolDefinition[]> {
    const names = (await this.redis.smembers(keys.poolIndex())).sort();
    const pipeline = this.redis.pipeline();
    for (const name of names) pipeline.hgetall(keys.pool(name));
    const results = (await pipeline.exec()) ?? [];
    const out: PoolDefinition[] = [];
    results.forEach(([err, hash], i) => {
      const h = hash as Record<string, string>;
      if (!err && h.template) out.push(toDefinition(names[i]!, h));
    });
    return out;
  }

  /** Names in the index, also those whose definition is gone (members still to retire). */
  async names(): Promise<string[]> {
    return this.redis.smembers(keys.poolIndex());
  }

  async delete(name: string): Promise<boolean> {
    return (await DELETE.run(this.redis, [keys.pool(name), keys.poolIndex()], [name])) === 1;
  }

  /** Drops a deleted pool's name once its last member is gone; false while either remains. */
  async forget(name: string): Promise<boolean> {
    return (await FORGET.run(this.redis, [keys.pool(name), keys.workspaceSandboxes(poolWorkspace(name)), keys.poolIndex()], [name])) === 1;
  }

  /**
   * Records a failed start of `generation`'s members: the refill waits `firstMs`, doubled per
   * consecutive failure up to `longestMs`, before starting more. Returns the wait, or null when
   * the pool is gone or moved to another generation meanwhile (the failure no longer counts).
   */
  async noteFailure(name: string, generation: number, error: string, firstMs: number, longestMs: number): Promise<number | null> {
    const delay = (await NOTE_FAILURE.run(this.redis, [keys.pool(name)], [generation, Date.now(), firstMs, longestMs, error.slice(0, 1000)])) as number;
    return delay < 0 ? null : delay;
  }

  /** A member of `generation` got Ready: the pool's failures are forgotten. True if there were any. */
  async clearFailures(name: string, generation: number): Promise<boolean> {
    return (await CLEAR_FAILURES.run(this.redis, [keys.pool(name)], [generation])) === 1;
  }

  /** The pool's unclaimed members' records (any phase). */
  async members(name: string): Promise<StoredSandbox[]> {
    return this.sandboxes.readMany(await this.redis.smembers(keys.workspaceSandboxes(poolWorkspace(name))));
  }

  /** Writes a new member's record, unless the pool is full, gone or of another generation. */
  async createMember(sandbox: Sandbox, credentialHash: string, pool: string, generation: number): Promise<number> {
    const { id, name } = sandbox.metadata!;
    const workspace = poolWorkspace(pool);
    return (await CREATE_MEMBER.run(
      this.redis,
      [keys.sandbox(id!), keys.sandboxName(workspace, name!), keys.sandboxIndex(), keys.events(id!), keys.workspaceSandboxes(workspace), keys.pool(pool)],
      [id!, sandboxCodec.encode(sandbox), workspace, name!, credentialHash, EVENTS_MAXLEN, pool, generation],
    )) as number;
  }

  /**
   * Makes `member` (as read: its resource_version and generation) the sandbox `claimed`, in the
   * caller's workspace. False when the member was taken or changed meanwhile (try another);
   * throws create's errors (name taken, workspace missing or terminating, quota).
   */
  async claim(member: StoredSandbox, claimed: Sandbox, target: ClaimTarget): Promise<boolean> {
    const id = member.sandbox.metadata!.id!;
    const pool = member.pool;
    if (!pool) return false;
    const memberWorkspace = poolWorkspace(pool.name);
    const answer = await CLAIM.run(
      this.redis,
      [
        keys.sandbox(id),
        keys.workspaceSandboxes(memberWorkspace),
        keys.sandboxName(memberWorkspace, member.sandbox.metadata!.name!),
        keys.sandboxName(target.workspace, target.name),
        keys.events(id),
        keys.workspace(target.workspace),
        keys.workspaceSandboxes(target.workspace),
        keys.workspaceIndex(),
        keys.pool(pool.name),
      ],
      [
        id, member.resourceVersion, pool.generation, sandboxCodec.encode(claimed), target.workspace, target.name, EVENTS_MAXLEN,
        target.maxPerWorkspace, target.workspace === DEFAULT_WORKSPACE ? '1' : '0', randomUUID(), Date.now(),
      ],
    );
    if (answer === 1) return true;
    if (answer === CLAIM_MISSED) return false;
    throw createRefusal(answer, target.workspace, target.name, target.maxPerWorkspace);
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
