// Sandbox records in Redis. Writes are compare-and-swap on `rv` (resource_version), done in Lua
// so that a read-modify-write from any replica either applies whole or reports a conflict.
import type { Redis } from 'ioredis';
import { codec, type Sandbox } from '@sandgate/protocols';
import { randomUUID } from 'node:crypto';
import { GatewayError, Code, DEFAULT_WORKSPACE } from '@sandgate/core';
import { keys } from './keys.ts';
import { luaScript } from './lua.ts';

export const sandboxCodec = codec<Sandbox>('openshell.v1.Sandbox');

/** Snapshots kept per sandbox event stream (approximate trim). */
export const EVENTS_MAXLEN = 256;
/** How long a deleted sandbox's event stream lingers for watchers to see the end. */
const EVENTS_TTL_AFTER_DELETE_MS = 60_000;

// Every write appends the new snapshot to the sandbox's event stream in the same script, so
// watchers on any replica see every change exactly once, in resource_version order.
const CREATE = luaScript('create-sandbox');
const UPDATE = luaScript('update-sandbox');
const REMOVE = luaScript('remove-sandbox');
const SEAL_SSH_SESSIONS = luaScript('seal-ssh-sessions');

/** What create-sandbox-7 answers. */
const CreateResult = { nameTaken: 0, created: 1, workspaceMissing: -1, workspaceTerminating: -2, atQuota: -3 } as const;
/** What update-sandbox-2 answers when it did not write (otherwise the new resource_version, >= 0). */
const UpdateResult = { gone: -1, conflict: -2 } as const;
/** What remove-sandbox-n answers. */
const RemoveResult = { absent: 0, removed: 1, sessionsChanged: -1 } as const;
/** Reads of the session index a delete makes before giving up; after the first conflict the record is sealed, so the second is final. */
const REMOVE_ATTEMPTS = 5;

/**
 * Why create-sandbox-7 (or claim-pool-member-9, which answers the same) did not create: the
 * error the caller gets.
 */
export function createRefusal(answer: unknown, workspace: string, name: string, maxPerWorkspace: number): GatewayError {
  switch (answer) {
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
  private readonly redis: Redis;
  constructor(redis: Redis) {
    this.redis = redis;
  }

  /**
   * Creates the record in its workspace, atomically with the workspace's sandbox set. Refused:
   * the name is taken (ALREADY_EXISTS), the workspace does not exist (NOT_FOUND) or is being
   * deleted (FAILED_PRECONDITION), or it holds `quota.maxPerWorkspace` sandboxes already
   * (RESOURCE_EXHAUSTED, 0 = no quota). The default workspace always exists: created here if a
   * replica has not ensured it yet.
   */
  async create(sandbox: Sandbox, credentialHash: string, quota: { maxPerWorkspace: number } = { maxPerWorkspace: 0 }): Promise<void> {
    const { id, name, workspace } = sandbox.metadata!;
    const created = await CREATE.run(
      this.redis,
      [
        keys.sandbox(id!),
        keys.sandboxName(workspace!, name!),
        keys.sandboxIndex(),
        keys.events(id!),
        keys.workspace(workspace!),
        keys.workspaceSandboxes(workspace!),
        keys.workspaceIndex(),
      ],
      [
        id!, sandboxCodec.encode(sandbox), workspace!, name!, credentialHash, EVENTS_MAXLEN,
        quota.maxPerWorkspace, workspace === DEFAULT_WORKSPACE ? '1' : '0', randomUUID(), Date.now(),
      ],
    );
    if (created !== CreateResult.created) throw createRefusal(created, workspace!, name!, quota.maxPerWorkspace);
  }

  async get(id: string): Promise<StoredSandbox | null> {
    const hash = (await this.redis.hgetallBuffer(keys.sandbox(id))) as Record<string, Buffer>;
    return fromHash(id, hash);
  }

  async idByName(workspace: string, name: string): Promise<string | null> {
    return this.redis.get(keys.sandboxName(workspace, name));
  }

  async getByName(workspace: string, name: string): Promise<StoredSandbox | null> {
    const id = await this.idByName(workspace, name);
    return id ? this.get(id) : null;
  }

  /** Every record, in creation order. Records are small; the set is the source of truth. */
  async list(): Promise<StoredSandbox[]> {
    const out = await this.readMany(await this.redis.smembers(keys.sandboxIndex()));
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
      const [next, ids] = await this.redis.sscan(keys.sandboxIndex(), cursor, 'COUNT', pageSize);
      cursor = next;
      if (ids.length > 0) yield await this.readMany(ids);
    } while (cursor !== '0');
  }

  /** The records of `ids` in one pipelined round trip; ids without a record are left out. */
  async readMany(ids: string[]): Promise<StoredSandbox[]> {
    const pipeline = this.redis.pipeline();
    for (const id of ids) pipeline.hgetallBuffer(keys.sandbox(id));
    const results = (await pipeline.exec()) ?? [];
    const out: StoredSandbox[] = [];
    results.forEach(([err, hash], i) => {
      if (err) return;
      const rec = fromHash(ids[i]!, hash as Record<string, Buffer>);
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
        [keys.sandbox(id), keys.events(id)],
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
   * Removes the record and everything keyed by it, SSH sessions included, in one script call.
   * Returns whether it existed. The sessions' keys are passed as read from the sandbox's session
   * index just before; when a session was created in between, the script does nothing and the
   * index is read again (a few times: then the caller's retry, e.g. the delete job's, goes on).
   */
  async remove(id: string, workspace: string, name: string): Promise<boolean> {
    for (let attempt = 1; ; attempt++) {
      const digests = await this.redis.zrange(keys.sandboxSshSessions(id), '0', '-1');
      const existed = await REMOVE.run(
        this.redis,
        [
          keys.sandbox(id), keys.sandboxName(workspace, name), keys.sandboxIndex(), keys.owner(id), keys.fence(id), keys.events(id), keys.logs(id),
          keys.workspaceSandboxes(workspace), keys.usage(id), keys.sandboxServices(id), keys.workspaceServices(workspace),
          keys.forwardsBySandbox(id), keys.sandboxSshSessions(id),
          ...digests.flatMap((d) => [keys.sshSession(d), keys.forwardsByToken(d)]),
        ],
        [id, EVENTS_TTL_AFTER_DELETE_MS, EVENTS_MAXLEN, ...digests],
      );
      if (existed !== RemoveResult.sessionsChanged) return existed === RemoveResult.removed;
      if (attempt >= REMOVE_ATTEMPTS) throw new Error(`sandbox ${id}: SSH sessions kept being created during its delete (${attempt} attempts); retry`);
      // Sessions are being minted while this delete runs (a client calling CreateSshSession in a
      // loop would otherwise win every race): close the record to new ones, so the next read of
      // the index has them all. Without this, a unit run on a busy machine saw five reads in a row
      // lose the race.
      await SEAL_SSH_SESSIONS.run(this.redis, [keys.sandbox(id)], []);
    }
  }
}
