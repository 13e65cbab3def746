// Sandbox records in Redis. Writes are compare-and-swap on `rv` (resource_version), done in Lua
// so that a read-modify-write from any replica either applies whole or reports a conflict.
//
// A create and a delete touch the workspace's keys (name, sandbox set), the sandbox's own and the
// cluster-wide id set: three hash slots on a Redis Cluster, where one script may touch only one. So
// they run in steps, one script per slot, the same way on every Redis (ARCHITECTURE.md, "Creates
// and deletes in steps"): each begins with an entry in the workspace's pending hash, which the
// reconcile sweep settles when the replica running the steps died (settlePending).
import { readAll, type RedisClient } from './client.ts';
import { codec, type Sandbox } from '@sandgate/protocols';
import { randomUUID } from 'node:crypto';
import { GatewayError, Code, DEFAULT_WORKSPACE, poolWorkspace } from '@sandgate/core';
import { keysFor, type KeySchema } from './keys.ts';
import { luaScript } from './lua.ts';

export const sandboxCodec = codec<Sandbox>('openshell.v1.Sandbox');

/** Snapshots kept per sandbox event stream (approximate trim). */
export const EVENTS_MAXLEN = 256;
/** How long a deleted sandbox's event stream lingers for watchers to see the end. */
const EVENTS_TTL_AFTER_DELETE_MS = 60_000;

// Every write appends the new snapshot to the sandbox's event stream in the same script, so
// watchers on any replica see every change exactly once, in resource_version order.
const RESERVE = luaScript('reserve-sandbox');
const WRITE_RECORD = luaScript('create-sandbox-record');
const INDEX = luaScript('index-sandbox');
const RELEASE_RESERVATION = luaScript('release-reservation');
const SETTLE = luaScript('settle-entry');
const UPDATE = luaScript('update-sandbox');
const REMOVE_RECORD = luaScript('remove-sandbox-record');
const UNINDEX = luaScript('unindex-sandbox');
const SEAL_SSH_SESSIONS = luaScript('seal-ssh-sessions');
const TAKE_POOL_MEMBER = luaScript('take-pool-member');

/** What reserve-sandbox-4 answers first (for creates and claims alike). */
const CreateResult = { nameTaken: 0, created: 1, workspaceMissing: -1, workspaceTerminating: -2, atQuota: -3, memberBusy: -4 } as const;
/** What create-sandbox-record-2 and index-sandbox-1 answer. */
const StepResult = { done: 1, exists: 0, tooLate: -1 } as const;

/**
 * How long after its reservation (by Redis' clock) a create's later steps may still write. A
 * create whose replica stalls longer fails with UNAVAILABLE and is undone.
 */
export const CREATE_WINDOW_MS = 10_000;
/**
 * A pending create or delete this old lost its replica: the reconcile sweep settles it. Far
 * longer than the window, so no step of the create can write after the sweep looked, even with
 * the clocks of the replicas and the Redis nodes some seconds apart.
 */
export const PENDING_GRACE_MS = 60_000;

/**
 * A workspace's pending entry (sg:wspend): `create|delete <ms> <name>`, or for a warm-pool claim
 * `claim <ms> <name> <pool> <member name>`.
 */
export interface PendingEntry {
  op: 'create' | 'delete' | 'claim';
  atMs: number;
  name: string;
  /** A claim's member: its pool and its name there. */
  member?: { pool: string; name: string };
  /** As stored: the scripts act only on the entry the caller read. */
  raw: string;
}

export function parsePendingEntry(raw: string): PendingEntry | null {
  const m = /^(create|delete|claim) (\d+) (\S+)(?: (\S+) (\S+))?$/.exec(raw);
  if (!m || (m[1] === 'claim') !== (m[4] !== undefined)) return null;
  return { op: m[1] as PendingEntry['op'], atMs: Number(m[2]), name: m[3]!, ...(m[4] ? { member: { pool: m[4], name: m[5]! } } : {}), raw };
}
/** What update-sandbox-2 answers when it did not write (otherwise the new resource_version, >= 0). */
const UpdateResult = { gone: -1, conflict: -2 } as const;
/** What remove-sandbox-record-n answers first. */
const RemoveResult = { absent: 0, removed: 1, sessionsChanged: -1 } as const;
/** Reads of the session index a delete makes before giving up (the record is sealed first, so the first read is final). */
const REMOVE_ATTEMPTS = 5;

/**
 * Why reserve-sandbox-4 did not reserve (a create's or a claim's name): the error the caller gets.
 */
export function createRefusal(answer: unknown, workspace: string, name: string, maxPerWorkspace: number): GatewayError {
  switch (answer) {
    case CreateResult.memberBusy:
      return new MemberBusyError();
    case CreateResult.nameTaken:
      return new GatewayError(Code.ALREADY_EXISTS, `sandbox '${name}' already exists`);
    case CreateResult.workspaceMissing:
      return new GatewayError(Code.NOT_FOUND, `workspace '${workspace}' not found`);
    case CreateResult.workspaceTerminating:
      return new GatewayError(Code.FAILED_PRECONDITION, `workspace '${workspace}' is being deleted`);
    case CreateResult.atQuota:
      return new GatewayError(
        Code.RESOURCE_EXHAUSTED,
        `workspace '${workspace}' has reached its limit of ${maxPerWorkspace} sandboxes (--max-sandboxes-per-workspace); delete one first`,
      );
    default:
      return new GatewayError(Code.INTERNAL, `create sandbox failed: unexpected store answer ${String(answer)}`);
  }
}

/**
 * A claim's reservation found its warm-pool member reserved by another claim into the same
 * workspace (reserve-sandbox-4's -4): PoolStore.claim tries another member.
 */
export class MemberBusyError extends GatewayError {
  constructor() {
    super(Code.ABORTED, 'the warm-pool member is being claimed by another create; try again');
  }
}

export interface StoredSandbox {
  sandbox: Sandbox;
  resourceVersion: number;
  credentialHash: string;
  compute: Record<string, unknown> | null;
  /** Fence of the supervisor session that last moved the phase (guards disconnect handling). */
  ownerFence: number;
  /** Instance id of the run whose terminal delivery is final (the ephemeral-cleanup trigger). */
  terminalFinal: string;
  /** When the current run was launched (ms epoch): fences the provisioning deadline of older runs. */
  runStartedAtMs: number;
  /**
   * The policy UpdateConfig set last (SandboxPolicy bytes), null if none did: then spec.policy,
   * the create-time policy, is in force. spec.policy stays the baseline live updates are judged by.
   */
  policy: Buffer | null;
  /** The revision of that policy (0 if UpdateConfig never wrote one). */
  policyRevision: number;
  /** An unclaimed warm-pool member: its pool and the pool generation it was launched for. */
  pool: { name: string; generation: number } | null;
  /** A claimed pool member whose supervisor has not confirmed starting the claim's main process. */
  mainPending: boolean;
  /** Was a warm-pool member: every run is launched as the member was, its main process started by start_main. */
  claimed: boolean;
}

/**
 * Both records describe the same run of the sandbox: the same launch time and compute handle.
 * A decision made from one read (the compute is dead) applies to a later read only if so.
 */
export function sameRun(a: Pick<StoredSandbox, 'runStartedAtMs' | 'compute'>, b: Pick<StoredSandbox, 'runStartedAtMs' | 'compute'>): boolean {
  return a.runStartedAtMs === b.runStartedAtMs && JSON.stringify(a.compute) === JSON.stringify(b.compute);
}

/**
 * The policy in force and its revision: the one UpdateConfig set last, else the create-time
 * spec.policy (revision 1), else none (revision 0: no egress).
 */
export function policyInForce(rec: Pick<StoredSandbox, 'sandbox' | 'policy' | 'policyRevision'>): { bytes: Buffer | undefined; revision: number } {
  if (rec.policy) return { bytes: rec.policy, revision: rec.policyRevision };
  const spec = rec.sandbox.spec?.policy;
  return spec ? { bytes: spec, revision: 1 } : { bytes: undefined, revision: 0 };
}

export function fromHash(id: string, hash: Record<string, Buffer>): StoredSandbox | null {
  if (!hash.pb || !hash.rv) return null;
  const sandbox = sandboxCodec.decode(hash.pb);
  const resourceVersion = Number(hash.rv.toString());
  sandbox.metadata = { ...sandbox.metadata!, id, resource_version: resourceVersion };
  return {
    sandbox,
    resourceVersion,
    credentialHash: hash.cred?.toString() ?? '',
    compute: hash.compute ? (JSON.parse(hash.compute.toString()) as Record<string, unknown>) : null,
    ownerFence: Number(hash.ownfence?.toString() ?? 0),
    terminalFinal: hash.termfinal?.toString() ?? '',
    runStartedAtMs: Number(hash.runstart?.toString() ?? 0),
    policy: hash.pol !== undefined ? Buffer.from(hash.pol.toString(), 'base64') : null,
    policyRevision: Number(hash.polrev?.toString() ?? 0),
    pool: hash.pool ? { name: hash.pool.toString(), generation: Number(hash.poolgen?.toString() ?? 0) } : null,
    mainPending: hash.mainpending?.toString() === '1',
    claimed: hash.claimed?.toString() === '1',
  };
}

/** What a write of internal hash fields means for the returned view of the record. */
function withExtraFields(rec: StoredSandbox, extra: Record<string, string>): StoredSandbox {
  const out = { ...rec };
  if ('cred' in extra) out.credentialHash = extra.cred!;
  if ('compute' in extra) out.compute = JSON.parse(extra.compute!) as Record<string, unknown>;
  if ('ownfence' in extra) out.ownerFence = Number(extra.ownfence);
  if ('termfinal' in extra) out.terminalFinal = extra.termfinal!;
  if ('runstart' in extra) out.runStartedAtMs = Number(extra.runstart);
  if ('pol' in extra) out.policy = Buffer.from(extra.pol!, 'base64');
  if ('polrev' in extra) out.policyRevision = Number(extra.polrev);
  if ('mainpending' in extra) out.mainPending = extra.mainpending === '1';
  return out;
}

export class SandboxStore {
  private readonly redis: RedisClient;
  private readonly keys: KeySchema;
  constructor(redis: RedisClient) {
    this.redis = redis;
    this.keys = keysFor(redis);
  }

  /**
   * Creates the record in its workspace. Refused: the name is taken (ALREADY_EXISTS), the
   * workspace does not exist (NOT_FOUND) or is being deleted (FAILED_PRECONDITION), or it holds
   * `quota.maxPerWorkspace` sandboxes already (RESOURCE_EXHAUSTED, 0 = no quota). The default
   * workspace always exists: created here if a replica has not ensured it yet. In steps: the
   * reservation (name, quota, pending entry), the record, the id set, the entry settled; a step
   * that fails undoes the ones before (and if that fails too, the sweep does).
   */
  async create(sandbox: Sandbox, credentialHash: string, quota: { maxPerWorkspace: number } = { maxPerWorkspace: 0 }): Promise<void> {
    const { id, name, workspace } = sandbox.metadata!;
    const at = await this.reserve(id!, workspace!, name!, quota.maxPerWorkspace, 'create');
    await this.writeReserved(id!, workspace!, name!, at, [sandboxCodec.encode(sandbox), workspace!, name!, credentialHash, EVENTS_MAXLEN]);
  }

  /**
   * A create's or a claim's first step (reserve-sandbox-4): the name and a place in the workspace,
   * with a pending entry `<op> <at> <name>`; the reservation time (Redis' clock). Throws
   * createRefusal's errors.
   */
  async reserve(id: string, workspace: string, name: string, maxPerWorkspace: number, op: 'create' | `claim ${string} ${string}`): Promise<number> {
    const [answer, at, madeWorkspace] = (await RESERVE.run(
      this.redis,
      [this.keys.workspace(workspace), this.keys.workspaceSandboxes(workspace), this.keys.sandboxName(workspace, name), this.keys.pendingSandboxes(workspace)],
      [id, name, maxPerWorkspace, workspace === DEFAULT_WORKSPACE ? '1' : '0', randomUUID(), Date.now(), op],
    )) as [number, number?, number?];
    if (answer !== CreateResult.created) throw createRefusal(answer, workspace, name, maxPerWorkspace);
    // The default workspace made here: listed too (its own slot; ensureDefault lists it anyway).
    if (madeWorkspace === 1) await this.redis.sadd(this.keys.workspaceIndex(), workspace);
    return at!;
  }

  /**
   * A reserved create's remaining steps: the record (with `recordArgs`, create-sandbox-record-2's
   * ARGV before the reservation time), the id set, the pending entry settled. Undone on failure.
   */
  async writeReserved(id: string, workspace: string, name: string, reservedAt: number, recordArgs: (string | number | Buffer)[], extraFields: string[] = []): Promise<void> {
    const entry = `create ${reservedAt} ${name}`;
    try {
      const written = await WRITE_RECORD.run(this.redis, [this.keys.sandbox(id), this.keys.events(id)], [...recordArgs, reservedAt, CREATE_WINDOW_MS, ...extraFields]);
      if (written === StepResult.exists) throw new GatewayError(Code.ALREADY_EXISTS, `a sandbox with id ${id} exists already`);
      if (written === StepResult.tooLate) throw new GatewayError(Code.UNAVAILABLE, `creating sandbox '${name}' took too long (over ${CREATE_WINDOW_MS} ms between its steps); retry`);
      const listed = await INDEX.run(this.redis, [this.keys.sandboxIndex()], [id, reservedAt, CREATE_WINDOW_MS]);
      if (listed === StepResult.tooLate) {
        await this.redis.del(this.keys.sandbox(id), this.keys.events(id));
        throw new GatewayError(Code.UNAVAILABLE, `creating sandbox '${name}' took too long (over ${CREATE_WINDOW_MS} ms between its steps); retry`);
      }
      await this.settle(id, workspace, entry);
    } catch (err) {
      // Best effort: what is left is the sweep's (settlePending).
      await this.releaseReservation(id, workspace, name, entry).catch(() => undefined);
      throw err;
    }
  }

  /** A claimed member out of its pool's member set, its member name freed (take-pool-member-2). */
  async takePoolMember(id: string, pool: string, memberName: string): Promise<void> {
    const workspace = poolWorkspace(pool);
    await TAKE_POOL_MEMBER.run(this.redis, [this.keys.workspaceSandboxes(workspace), this.keys.sandboxName(workspace, memberName)], [id]);
  }

  /** Ends a pending create or claim whose steps are done (settle-entry-1); false if its entry changed or went. */
  async settle(id: string, workspace: string, entry: string): Promise<boolean> {
    return (await SETTLE.run(this.redis, [this.keys.pendingSandboxes(workspace)], [id, entry])) === 1;
  }

  /** Undoes a reservation (only the entry given: a later delete's stays). */
  async releaseReservation(id: string, workspace: string, name: string, entry: string): Promise<boolean> {
    return (await RELEASE_RESERVATION.run(this.redis, [this.keys.pendingSandboxes(workspace), this.keys.sandboxName(workspace, name), this.keys.workspaceSandboxes(workspace)], [id, entry])) === 1;
  }

  async get(id: string): Promise<StoredSandbox | null> {
    const hash = (await this.redis.hgetallBuffer(this.keys.sandbox(id))) as Record<string, Buffer>;
    return fromHash(id, hash);
  }

  async idByName(workspace: string, name: string): Promise<string | null> {
    return this.redis.get(this.keys.sandboxName(workspace, name));
  }

  async getByName(workspace: string, name: string): Promise<StoredSandbox | null> {
    const id = await this.idByName(workspace, name);
    return id ? this.get(id) : null;
  }

  /** Every record, in creation order. Records are small; the set is the source of truth. */
  async list(): Promise<StoredSandbox[]> {
    const out = await this.readMany(await this.redis.smembers(this.keys.sandboxIndex()));
    return out.sort(
      (a, b) =>
        (a.sandbox.metadata!.created_at_ms ?? 0) - (b.sandbox.metadata!.created_at_ms ?? 0) ||
        a.sandbox.metadata!.id!.localeCompare(b.sandbox.metadata!.id!),
    );
  }

  /**
   * Every record, a page at a time (SSCAN + one pipelined read per page), for sweeps: decoding
   * 10k records in one go blocked a replica's event loop for ~170 ms. SSCAN may return an id
   * twice; callers that care dedupe. Records present for the whole scan are all returned.
   */
  async *pages(pageSize = 500): AsyncGenerator<StoredSandbox[]> {
    let cursor = '0';
    do {
      const [next, ids] = await this.redis.sscan(this.keys.sandboxIndex(), cursor, 'COUNT', pageSize);
      cursor = next;
      if (ids.length > 0) yield await this.readMany(ids);
    } while (cursor !== '0');
  }

  /** The records of `ids` in one pipelined round trip; ids without a record are left out. */
  async readMany(ids: string[]): Promise<StoredSandbox[]> {
    const hashes = await readAll(
      this.redis,
      (p) => ids.forEach((id) => p.hgetallBuffer(this.keys.sandbox(id))),
      (c) => ids.map((id) => c.hgetallBuffer(this.keys.sandbox(id)) as Promise<Record<string, Buffer>>),
    );
    const out: StoredSandbox[] = [];
    hashes.forEach((hash, i) => {
      if (!hash) return;
      const rec = fromHash(ids[i]!, hash);
      if (rec) out.push(rec);
    });
    return out;
  }

  /**
   * Read-modify-write with compare-and-swap. `change` may return null to leave the record as is.
   * Retries on a conflict (another replica wrote in between) a bounded number of times.
   */
  async mutate(
    id: string,
    change: (current: StoredSandbox) => { sandbox: Sandbox; extra?: Record<string, string> } | null,
    attempts = 8,
  ): Promise<StoredSandbox | null> {
    for (let i = 0; i < attempts; i++) {
      const current = await this.get(id);
      if (!current) return null;
      // Encoded before `change` runs: a mutator may edit `current.sandbox` in place and return it.
      const before = sandboxCodec.encode(current.sandbox);
      const next = change(current);
      if (!next) return current;
      const extra = Object.entries(next.extra ?? {}).flat();
      // Only changes of the public resource are events; internal fields (handle, fence) are not.
      const encoded = sandboxCodec.encode(next.sandbox);
      const changed = encoded.equals(before) ? '0' : '1';
      const rv = (await UPDATE.run(
        this.redis,
        [this.keys.sandbox(id), this.keys.events(id)],
        [current.resourceVersion, encoded, changed, EVENTS_MAXLEN, ...extra],
      )) as number;
      if (rv === UpdateResult.gone) return null;
      if (rv !== UpdateResult.conflict) {
        next.sandbox.metadata = { ...next.sandbox.metadata!, resource_version: rv };
        return withExtraFields({ ...current, sandbox: next.sandbox, resourceVersion: rv }, next.extra ?? {});
      }
    }
    const latest = await this.get(id);
    throw new GatewayError(
      Code.ABORTED,
      `update failed due to concurrent modification (current resource_version: ${latest?.resourceVersion ?? 'gone'})`,
    );
  }

  /**
   * Removes the record and everything keyed by it, SSH sessions included, and its place in its
   * workspace (name, sandbox set, endpoint listing) and in the id set. Returns whether the record
   * existed. In steps, each safe to run again: the pending entry (so the sweep finishes a delete
   * whose replica died), the record sealed against new SSH sessions, the sessions' keys (their
   * tokens' slots), the record and the sandbox's keys, the id set, the workspace's keys.
   */
  async remove(id: string, workspace: string, name: string): Promise<boolean> {
    const k = this.keys;
    await this.redis.hset(k.pendingSandboxes(workspace), id, `delete ${Date.now()} ${name}`);
    // Sealed first, so the session index read below is final: no session can be minted after.
    await SEAL_SSH_SESSIONS.run(this.redis, [k.sandbox(id)], []);
    let answer: (number | string)[] = [];
    for (let attempt = 1; ; attempt++) {
      const digests = await this.redis.zrange(k.sandboxSshSessions(id), '0', '-1');
      await Promise.all(digests.map((d) => this.redis.del(k.sshSession(d), k.forwardsByToken(d))));
      answer = (await REMOVE_RECORD.run(
        this.redis,
        [k.sandbox(id), k.owner(id), k.fence(id), k.events(id), k.logs(id), k.usage(id), k.sandboxServices(id), k.forwardsBySandbox(id), k.sandboxSshSessions(id)],
        [EVENTS_TTL_AFTER_DELETE_MS, EVENTS_MAXLEN, ...digests],
      )) as (number | string)[];
      if (answer[0] !== RemoveResult.sessionsChanged) break;
      if (attempt >= REMOVE_ATTEMPTS) throw new Error(`sandbox ${id}: SSH sessions kept being created during its delete (${attempt} attempts); retry`);
    }
    await this.redis.srem(k.sandboxIndex(), id);
    await UNINDEX.run(this.redis, [k.sandboxName(workspace, name), k.workspaceSandboxes(workspace), k.workspaceServices(workspace), k.pendingSandboxes(workspace)], [id, ...answer.slice(1)]);
    return answer[0] === RemoveResult.removed;
  }

  /**
   * The reconcile sweep's part: every create or delete pending for longer than `graceMs` (its
   * replica died between two steps) is settled. A create whose record was written is finished
   * (listed; the sweep's "interrupted create" rule then deletes it if its compute never came); one
   * without a record is released (no step of it can write any more: CREATE_WINDOW_MS); a delete
   * is run again. Over every workspace, warm pools' included.
   */
  async settlePending(graceMs = PENDING_GRACE_MS, nowMs = Date.now()): Promise<{ finished: number; released: number; deleted: number }> {
    // A claim's record is claimed for good once written: the sweep finishes it (takes the member
    // out of its pool) the way the claim would have.
    const [workspaces, pools] = await Promise.all([this.redis.smembers(this.keys.workspaceIndex()), this.redis.smembers(this.keys.poolIndex())]);
    const out = { finished: 0, released: 0, deleted: 0 };
    for (const workspace of [...workspaces, ...pools.map(poolWorkspace)]) {
      const pending = await this.redis.hgetall(this.keys.pendingSandboxes(workspace));
      for (const [id, raw] of Object.entries(pending)) {
        const entry = parsePendingEntry(raw);
        if (!entry || nowMs - entry.atMs < graceMs) continue;
        if (entry.op === 'delete') {
          await this.remove(id, workspace, entry.name);
          out.deleted++;
        } else if (entry.op === 'claim') {
          const rec = await this.get(id);
          if (rec && !rec.pool && rec.sandbox.metadata?.workspace === workspace && rec.sandbox.metadata?.name === entry.name) {
            await this.takePoolMember(id, entry.member!.pool, entry.member!.name);
            if (await this.settle(id, workspace, raw)) out.finished++;
          } else if (await this.releaseReservation(id, workspace, entry.name, raw)) {
            out.released++;
          }
        } else if (await this.redis.exists(this.keys.sandbox(id))) {
          await this.redis.sadd(this.keys.sandboxIndex(), id);
          if (await this.settle(id, workspace, raw)) out.finished++;
        } else if (await this.releaseReservation(id, workspace, entry.name, raw)) {
          out.released++;
        }
      }
    }
    return out;
  }
}
