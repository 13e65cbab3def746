// Against a real redis-server: workspace records, members, the sandbox set kept in step by the
// sandbox scripts (and the quota it enforces under concurrent creates), and the cross-replica exec
// cap with a crashed replica's slots pruned.
import { describe, expect, it } from 'vitest';
import type { RedisClient } from '@sandgate/store';
import { randomUUID } from 'node:crypto';
import { Code } from '@sandgate/core';
import type { Sandbox } from '@sandgate/protocols';
import { SandboxStore, WorkspaceExecSlots, WorkspaceStore, keys } from '@sandgate/store';
import { redisForFile } from '@sandgate/test-harness/redis-per-file';
import { sleep } from '@sandgate/test-harness/wait';

let client: RedisClient;
redisForFile((server) => (client = server.client()));

const sandbox = (workspace: string, name: string): Sandbox => ({
  metadata: { id: randomUUID(), name, workspace, labels: {}, annotations: {}, created_at_ms: Date.now() },
  spec: { environment: {}, providers: [], command: ['sleep', '1'] },
  status: { conditions: [], phase: 1 },
});

describe('WorkspaceStore', () => {
  it('ensureDefault is idempotent: the record made first stays', async () => {
    const ws = new WorkspaceStore(client);
    await ws.ensureDefault(1000);
    const first = await ws.get('default');
    await ws.ensureDefault(2000);
    expect(await ws.get('default')).toEqual(first);
    expect(first).toMatchObject({ name: 'default', phase: 'active', resourceVersion: 1, labels: {}, createdAtMs: 1000 });
  });

  it('sandbox create/remove keep the workspace sandbox set in step; a missing workspace refuses the create', async () => {
    const ws = new WorkspaceStore(client);
    const store = new SandboxStore(client);
    await expect(store.create(sandbox('ghost', 'x'), 'h')).rejects.toMatchObject({ code: Code.NOT_FOUND, message: "workspace 'ghost' not found" });
    expect(await client.exists(keys.sandboxName('ghost', 'x'))).toBe(0);
    await ws.create('sets', {});
    const sb = sandbox('sets', 'one');
    await store.create(sb, 'h');
    expect(await client.smembers(keys.workspaceSandboxes('sets'))).toEqual([sb.metadata!.id]);
    expect(await store.remove(sb.metadata!.id!, 'sets', 'one')).toBe(true);
    expect(await client.scard(keys.workspaceSandboxes('sets'))).toBe(0);
  });

  it('the quota holds under 20 concurrent creates', async () => {
    const ws = new WorkspaceStore(client);
    const store = new SandboxStore(client);
    await ws.create('race', {});
    const results = await Promise.allSettled(Array.from({ length: 20 }, (_, i) => store.create(sandbox('race', `s${i}`), 'h', { maxPerWorkspace: 3 })));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(3);
    for (const r of results.filter((r) => r.status === 'rejected')) {
      expect((r as PromiseRejectedResult).reason).toMatchObject({ code: Code.RESOURCE_EXHAUSTED });
    }
    expect(await ws.sandboxCount('race')).toBe(3);
  });

  it('delete: refused while it holds a sandbox (left terminating), then removes record, members and sets', async () => {
    const ws = new WorkspaceStore(client);
    const store = new SandboxStore(client);
    await ws.create('gone', { a: 'b' });
    await ws.addMember('gone', 'alice', 'admin');
    const sb = sandbox('gone', 'held');
    await store.create(sb, 'h');
    expect(await ws.delete('gone', 5000)).toBe('holds-sandboxes');
    expect(await ws.get('gone')).toMatchObject({ phase: 'terminating', resourceVersion: 2, deletedAtMs: 5000 });
    expect(await ws.delete('gone', 6000)).toBe('holds-sandboxes');
    expect(await ws.get('gone')).toMatchObject({ resourceVersion: 2, deletedAtMs: 5000 }); // marked once
    await expect(store.create(sandbox('gone', 'late'), 'h')).rejects.toMatchObject({ code: Code.FAILED_PRECONDITION });
    expect(await ws.addMember('gone', 'bob', 'member')).toEqual({ ok: false, reason: 'terminating' });
    await store.remove(sb.metadata!.id!, 'gone', 'held');
    expect(await ws.delete('gone')).toBe('deleted');
    expect(await ws.get('gone')).toBeNull();
    expect(await client.exists(keys.workspaceMembers('gone'))).toBe(0);
    expect(await client.sismember(keys.workspaceIndex(), 'gone')).toBe(0);
    expect(await ws.delete('gone')).toBe('not-found');
  });

  it('members: one record per subject, any role; listed oldest first', async () => {
    const ws = new WorkspaceStore(client);
    await ws.create('team', {});
    expect((await ws.addMember('team', 'zed', 'member', 1)).ok).toBe(true);
    expect((await ws.addMember('team', 'amy', 'admin', 2)).ok).toBe(true);
    expect(await ws.addMember('team', 'zed', 'admin')).toEqual({ ok: false, reason: 'exists' });
    expect(await ws.addMember('nope', 'zed', 'admin')).toEqual({ ok: false, reason: 'not-found' });
    expect((await ws.listMembers('team')).map((m) => [m.subject, m.role])).toEqual([['zed', 'member'], ['amy', 'admin']]);
    expect(await ws.memberRole('team', 'amy')).toBe('admin');
    expect(await ws.memberRole('team', 'nobody')).toBeNull();
    expect([...(await ws.workspacesOf('zed'))]).toEqual(['team']);
    expect(await ws.removeMember('team', 'zed')).toBe(true);
    expect(await ws.removeMember('team', 'zed')).toBe(false);
  });
});

describe('WorkspaceExecSlots', () => {
  it('caps live execs across replicas; a live replica keeps its slot; a crashed one loses it once stale', async () => {
    const staleMs = 400;
    const r1 = new WorkspaceExecSlots(client, { staleMs });
    const r2 = new WorkspaceExecSlots(client, { staleMs });
    const a = { workspace: 'cap', execId: 'e1' };
    expect(await r1.acquire(a, 1)).toBe(true);
    expect(await r2.acquire({ workspace: 'cap', execId: 'e2' }, 1)).toBe(false);
    // r1 is alive: its heartbeat keeps the slot past the stale window.
    await sleep(staleMs * 2);
    expect(await r2.acquire({ workspace: 'cap', execId: 'e3' }, 1)).toBe(false);
    expect(await r1.liveCount('cap')).toBe(1);
    // Another workspace is not affected.
    const other = { workspace: 'cap-other', execId: 'o1' };
    expect(await r2.acquire(other, 1)).toBe(true);
    await r2.release(other);
    // r1 "crashes": it stops refreshing without releasing.
    r1.close();
    await sleep(staleMs + 150);
    expect(await r2.acquire({ workspace: 'cap', execId: 'e4' }, 1)).toBe(true);
    expect(await client.zrange(keys.workspaceExecs('cap'), '0', '-1')).toEqual(['e4']);
    await r2.release({ workspace: 'cap', execId: 'e4' });
    expect(await r2.liveCount('cap')).toBe(0);
    r2.close();
  });

  it('cap 0 counts nothing', async () => {
    const r = new WorkspaceExecSlots(client);
    expect(await r.acquire({ workspace: 'free', execId: 'x' }, 0)).toBe(true);
    expect(await client.exists(keys.workspaceExecs('free'))).toBe(0);
    r.close();
  });
});
