// Workspaces (openshell-v1-more.md §10): the records, their members, the set of sandboxes each
// holds (kept in step by reserve-sandbox-4 / unindex-sandbox-4) and the live execs each runs, counted
// across replicas like the SSH forward caps: a sorted set scored by heartbeat, so the slots of a
// replica that crashed stop counting once they are stale.
import { randomUUID } from 'node:crypto';
import { groupedByTag, readAll, type RedisClient } from './client.ts';
import { DEFAULT_WORKSPACE, type WorkspaceRole } from '@sandgate/core';
import { keysFor, type KeySchema } from './keys.ts';
import { luaScript } from './lua.ts';

export type WorkspacePhaseName = 'active' | 'terminating';

export interface WorkspaceRecord {
  name: string;
  id: string;
  createdAtMs: number;
  resourceVersion: number;
  labels: Record<string, string>;
  phase: WorkspacePhaseName;
  /** 0 while active; when the delete began once terminating. */
  deletedAtMs: number;
}

export interface WorkspaceMemberRecord {
  workspace: string;
  subject: string;
  id: string;
  role: WorkspaceRole;
  createdAtMs: number;
}

/** Upstream's member cap (openshell-v1-more.md §10.8). */
export const MAX_WORKSPACE_MEMBERS = 1000;

const CREATE = luaScript('create-workspace');
const DELETE = luaScript('delete-workspace');
const ADD_MEMBER = luaScript('add-workspace-member');
const ACQUIRE_EXEC = luaScript('acquire-slot');
const HEARTBEAT_EXECS = luaScript('heartbeat-slots');

/** What delete-workspace-4 answers. */
const DeleteCode = { deleted: 1, absent: 0, holdsSandboxes: -1 } as const;
export type DeleteWorkspaceResult = 'deleted' | 'not-found' | 'holds-sandboxes';

/** What add-workspace-member-2 answers. */
const AddCode = { added: 1, exists: 0, missing: -1, terminating: -2, atCap: -3 } as const;
export type AddMemberResult = { ok: true; member: WorkspaceMemberRecord } | { ok: false; reason: 'exists' | 'not-found' | 'terminating' | 'at-cap' };

function recordFrom(name: string, h: Record<string, string>): WorkspaceRecord | null {
  if (!h.id) return null;
  let labels: Record<string, string> = {};
  try {
    labels = JSON.parse(h.labels ?? '{}') as Record<string, string>;
  } catch {
    labels = {};
  }
  return {
    name,
    id: h.id,
    createdAtMs: Number(h.created ?? 0),
    resourceVersion: Number(h.rv ?? 1),
    labels,
    phase: h.phase === 'terminating' ? 'terminating' : 'active',
    deletedAtMs: Number(h.deleted ?? 0),
  };
}

function memberFrom(workspace: string, subject: string, json: string): WorkspaceMemberRecord | null {
  try {
    const m = JSON.parse(json) as { id?: string; role?: string; created?: number };
    return { workspace, subject, id: m.id ?? '', role: m.role === 'admin' ? 'admin' : 'member', createdAtMs: Number(m.created ?? 0) };
  } catch {
    return null;
  }
}

export class WorkspaceStore {
  private readonly redis: RedisClient;
  private readonly keys: KeySchema;
  constructor(redis: RedisClient) {
    this.redis = redis;
    this.keys = keysFor(redis);
  }

  /** Creates `default` if it is missing (every replica start; idempotent). */
  async ensureDefault(nowMs = Date.now()): Promise<void> {
    await this.create(DEFAULT_WORKSPACE, {}, nowMs);
  }

  /** The new record, or null if the name is taken. */
  async create(name: string, labels: Record<string, string>, nowMs = Date.now()): Promise<WorkspaceRecord | null> {
    const id = randomUUID();
    const created = await CREATE.run(this.redis, [this.keys.workspace(name)], [id, nowMs, JSON.stringify(labels)]);
    // Listed after its hash exists, never before (list() relies on it); also when it existed, so
    // a create whose replica died between the two steps is listed by the next one (ensureDefault).
    await this.redis.sadd(this.keys.workspaceIndex(), name);
    if (created !== 1) return null;
    return { name, id, createdAtMs: nowMs, resourceVersion: 1, labels, phase: 'active', deletedAtMs: 0 };
  }

  async get(name: string): Promise<WorkspaceRecord | null> {
    return recordFrom(name, await this.redis.hgetall(this.keys.workspace(name)));
  }

  /** Every workspace, oldest first, then by name. */
  async list(): Promise<WorkspaceRecord[]> {
    const names = await this.redis.smembers(this.keys.workspaceIndex());
    const hashes = await readAll(
      this.redis,
      (p) => names.forEach((n) => p.hgetall(this.keys.workspace(n))),
      (c) => names.map((n) => c.hgetall(this.keys.workspace(n))),
    );
    const out: WorkspaceRecord[] = [];
    const gone: string[] = [];
    hashes.forEach((h, i) => {
      if (!h) return;
      const rec = recordFrom(names[i]!, h);
      if (rec) out.push(rec);
      // A delete whose last step (the index) did not run: a create lists its name only after its
      // hash exists, so a name read with no hash is safe to drop.
      else gone.push(names[i]!);
    });
    if (gone.length > 0) await this.redis.srem(this.keys.workspaceIndex(), ...gone);
    return out.sort((a, b) => a.createdAtMs - b.createdAtMs || a.name.localeCompare(b.name));
  }

  /** Marks it terminating, then removes it unless it still holds sandboxes (one atomic step), then its index entry. */
  async delete(name: string, nowMs = Date.now()): Promise<DeleteWorkspaceResult> {
    const code = await DELETE.run(
      this.redis,
      [this.keys.workspace(name), this.keys.workspaceMembers(name), this.keys.workspaceSandboxes(name), this.keys.workspaceExecs(name)],
      [nowMs],
    );
    if (code === DeleteCode.deleted) {
      await this.redis.srem(this.keys.workspaceIndex(), name);
      return 'deleted';
    }
    return code === DeleteCode.holdsSandboxes ? 'holds-sandboxes' : 'not-found';
  }

  /** How many sandboxes the workspace holds (any phase). */
  async sandboxCount(name: string): Promise<number> {
    return this.redis.scard(this.keys.workspaceSandboxes(name));
  }

  // ---- members ---------------------------------------------------------------------------------

  /** The subject's role in the workspace, null if it has no membership. */
  async memberRole(workspace: string, subject: string): Promise<WorkspaceRole | null> {
    const json = await this.redis.hget(this.keys.workspaceMembers(workspace), subject);
    return json ? (memberFrom(workspace, subject, json)?.role ?? null) : null;
  }

  async addMember(workspace: string, subject: string, role: WorkspaceRole, nowMs = Date.now()): Promise<AddMemberResult> {
    const member: WorkspaceMemberRecord = { workspace, subject, id: randomUUID(), role, createdAtMs: nowMs };
    const code = await ADD_MEMBER.run(
      this.redis,
      [this.keys.workspace(workspace), this.keys.workspaceMembers(workspace)],
      [subject, JSON.stringify({ id: member.id, role, created: nowMs }), MAX_WORKSPACE_MEMBERS],
    );
    switch (code) {
      case AddCode.added:
        return { ok: true, member };
      case AddCode.exists:
        return { ok: false, reason: 'exists' };
      case AddCode.terminating:
        return { ok: false, reason: 'terminating' };
      case AddCode.atCap:
        return { ok: false, reason: 'at-cap' };
      default:
        return { ok: false, reason: 'not-found' };
    }
  }

  /** true if a membership was removed. */
  async removeMember(workspace: string, subject: string): Promise<boolean> {
    return (await this.redis.hdel(this.keys.workspaceMembers(workspace), subject)) === 1;
  }

  /** The workspace's members, oldest first, then by subject. */
  async listMembers(workspace: string): Promise<WorkspaceMemberRecord[]> {
    const h = await this.redis.hgetall(this.keys.workspaceMembers(workspace));
    return Object.entries(h)
      .map(([subject, json]) => memberFrom(workspace, subject, json))
      .filter((m): m is WorkspaceMemberRecord => m !== null)
      .sort((a, b) => a.createdAtMs - b.createdAtMs || a.subject.localeCompare(b.subject));
  }

  /** The workspaces in which `subject` has a membership. */
  async workspacesOf(subject: string): Promise<Set<string>> {
    const names = await this.redis.smembers(this.keys.workspaceIndex());
    const results = await readAll(
      this.redis,
      (p) => names.forEach((n) => p.hexists(this.keys.workspaceMembers(n), subject)),
      (c) => names.map((n) => c.hexists(this.keys.workspaceMembers(n), subject)),
    );
    return new Set(names.filter((_, i) => results[i] === 1));
  }
}

/** One live exec counted against its workspace's cap. */
export interface ExecSlot {
  workspace: string;
  execId: string;
}

/**
 * The per-workspace concurrent exec cap across replicas. Each replica refreshes its own live
 * slots every `staleMs / 3`; a slot not refreshed for `staleMs` (its replica crashed) is pruned by
 * the next acquire and no longer counts.
 */
export class WorkspaceExecSlots {
  private readonly redis: RedisClient;
  private readonly keys: KeySchema;
  readonly staleMs: number;
  private readonly keyTtlMs: number;
  private readonly live = new Map<string, ExecSlot>();
  private timer: NodeJS.Timeout | undefined;

  constructor(redis: RedisClient, opts: { staleMs?: number } = {}) {
    this.redis = redis;
    this.keys = keysFor(redis);
    this.staleMs = opts.staleMs ?? 15_000;
    this.keyTtlMs = this.staleMs * 4;
  }

  /** Takes a slot unless the workspace has `cap` live execs already (cap 0 = no cap: nothing is counted). */
  async acquire(slot: ExecSlot, cap: number): Promise<boolean> {
    if (cap <= 0) return true;
    const ok = await ACQUIRE_EXEC.run(this.redis, [this.keys.workspaceExecs(slot.workspace)], [slot.execId, cap, this.staleMs, this.keyTtlMs]);
    if (ok !== 1) return false;
    this.live.set(slot.execId, slot);
    this.startHeartbeat();
    return true;
  }

  async release(slot: ExecSlot): Promise<void> {
    if (!this.live.delete(slot.execId)) return;
    if (this.live.size === 0) this.stopHeartbeat();
    await this.redis.zrem(this.keys.workspaceExecs(slot.workspace), slot.execId);
  }

  /** Live (non-stale) execs of a workspace, across replicas. */
  async liveCount(workspace: string): Promise<number> {
    const now = await this.redis.time();
    const nowMs = Number(now[0]) * 1000 + Math.floor(Number(now[1]) / 1000);
    return this.redis.zcount(this.keys.workspaceExecs(workspace), nowMs - this.staleMs, '+inf');
  }

  async heartbeat(): Promise<void> {
    const slots = [...this.live.values()];
    if (slots.length === 0) return;
    await Promise.all(
      groupedByTag(this.redis, slots, (s) => this.keys.workspaceExecs(s.workspace)).map((group) =>
        HEARTBEAT_EXECS.run(this.redis, group.map((s) => this.keys.workspaceExecs(s.workspace)), [this.keyTtlMs, ...group.map((s) => s.execId)]),
      ),
    );
  }

  /** Stops refreshing (replica shutdown): this replica's slots then go stale on their own. */
  close(): void {
    this.stopHeartbeat();
    this.live.clear();
  }

  private startHeartbeat(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.heartbeat().catch(() => undefined), Math.max(100, Math.floor(this.staleMs / 3)));
    this.timer.unref();
  }

  private stopHeartbeat(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }
}
