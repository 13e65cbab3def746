// Against a real redis-server: the endpoint upsert (create, CAS update, lost races), listing order,
// delete, and the endpoints going with their sandbox (remove-sandbox-record-n).
import { describe, expect, it } from 'vitest';
import type { RedisClient } from '@sandgate/store';
import { SandboxStore, ServiceEndpointStore, WorkspaceStore, keys } from '@sandgate/store';
import { Code } from '@sandgate/core';
import type { Sandbox, ServiceEndpoint } from '@sandgate/protocols';
import { redisForFile } from '@sandgate/test-harness/redis-per-file';

let client: RedisClient;
redisForFile((server) => (client = server.client()));

const sandbox = (id: string, name: string, workspace = 'default'): Sandbox => ({
  metadata: { id, name, workspace, labels: {}, annotations: {}, created_at_ms: Date.now() },
  spec: { environment: {}, providers: [], command: ['sleep', '1'] },
  status: { conditions: [], phase: 1 },
});

const endpoint = (sandboxId: string, sandboxName: string, service: string, port: number, createdAt: number, workspace = 'default'): ServiceEndpoint => ({
  metadata: {
    id: `ep-${sandboxName}-${service}`,
    name: service ? `${sandboxName}--${service}` : sandboxName,
    labels: { sandbox: sandboxName },
    annotations: {},
    workspace,
    created_at_ms: createdAt,
  },
  sandbox_id: sandboxId,
  sandbox_name: sandboxName,
  service_name: service,
  target_port: port,
  domain: true,
});

describe('ServiceEndpointStore', () => {
  it('creates at version 1, updates by CAS, refuses a stale version and a second create', async () => {
    const sandboxes = new SandboxStore(client);
    const store = new ServiceEndpointStore(client);
    await sandboxes.create(sandbox('s1', 'one'), 'h');
    const created = await store.upsert(endpoint('s1', 'one', 'web', 8080, 1000), 0);
    expect(created.metadata?.resource_version).toBe(1);
    expect((await store.get('s1', 'one--web'))?.target_port).toBe(8080);
    await expect(store.upsert(endpoint('s1', 'one', 'web', 8081, 1000), 0)).rejects.toMatchObject({ code: Code.INTERNAL });
    const updated = await store.upsert({ ...created, target_port: 9090 }, 1);
    expect(updated.metadata?.resource_version).toBe(2);
    await expect(store.upsert({ ...created, target_port: 1 }, 1)).rejects.toMatchObject({
      code: Code.ABORTED,
      message: 'expose service failed due to concurrent modification (current resource_version: 2)',
    });
    const read = await store.get('s1', 'one--web');
    expect(read?.target_port).toBe(9090);
    expect(read?.metadata?.id).toBe('ep-one-web');
  });

  it('refuses an endpoint for a sandbox that is gone, and for a terminating workspace', async () => {
    const store = new ServiceEndpointStore(client);
    await expect(store.upsert(endpoint('nope', 'nope', '', 80, 1), 0)).rejects.toMatchObject({ code: Code.NOT_FOUND, message: 'sandbox not found' });
    const workspaces = new WorkspaceStore(client);
    await workspaces.create('closing', {});
    await new SandboxStore(client).create(sandbox('s-closing', 'c', 'closing'), 'h');
    expect(await workspaces.delete('closing')).toBe('holds-sandboxes');
    await expect(store.upsert(endpoint('s-closing', 'c', '', 80, 1, 'closing'), 0)).rejects.toMatchObject({ code: Code.FAILED_PRECONDITION });
  });

  it('lets one of many concurrent creates of one key win', async () => {
    await new SandboxStore(client).create(sandbox('race', 'race'), 'h');
    const store = new ServiceEndpointStore(client);
    const results = await Promise.allSettled(Array.from({ length: 10 }, (_, i) => store.upsert(endpoint('race', 'race', '', 1000 + i, 5), 0)));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
  });

  it('lists a workspace oldest first, then by name, pages, and drops endpoints with their sandbox', async () => {
    const sandboxes = new SandboxStore(client);
    const store = new ServiceEndpointStore(client);
    const workspaces = new WorkspaceStore(client);
    await workspaces.create('lst', {});
    await sandboxes.create(sandbox('a-id', 'a', 'lst'), 'h');
    await sandboxes.create(sandbox('b-id', 'b', 'lst'), 'h');
    await store.upsert(endpoint('b-id', 'b', '', 1, 10, 'lst'), 0);
    await store.upsert(endpoint('a-id', 'a', 'z', 1, 20, 'lst'), 0);
    await store.upsert(endpoint('a-id', 'a', 'y', 1, 20, 'lst'), 0);
    await store.upsert(endpoint('a-id', 'a', '', 1, 30, 'lst'), 0);
    const idOf = (name: string) => sandboxes.idByName('lst', name);
    const names = async (offset: number, limit: number) => (await store.listWorkspace('lst', offset, limit, idOf)).map((e) => e.metadata?.name);
    expect(await names(0, 100)).toEqual(['b', 'a--y', 'a--z', 'a']);
    expect(await names(1, 2)).toEqual(['a--y', 'a--z']);
    expect((await store.listBySandbox('a-id')).map((e) => e.metadata?.name)).toEqual(['a--y', 'a--z', 'a']);

    expect(await store.delete('a-id', 'lst', 'a--y')).toBe(true);
    expect(await store.delete('a-id', 'lst', 'a--y')).toBe(false);
    expect(await sandboxes.remove('a-id', 'lst', 'a')).toBe(true);
    expect(await names(0, 100)).toEqual(['b']);
    expect(await client.exists(keys.sandboxServices('a-id'))).toBe(0);
    // A new sandbox of the same name starts with no endpoints.
    await sandboxes.create(sandbox('a2-id', 'a', 'lst'), 'h');
    expect(await store.get('a2-id', 'a')).toBeNull();
  });
});
