// The access rule as every path into a sandbox applies it, against a real redis-server.
import { describe, expect, it } from 'vitest';
import type { RedisClient } from '@sandgate/store';
import { SandboxStore, WorkspaceStore } from '@sandgate/store';
import { Code, LOCAL_DEV_PRINCIPAL, Phase, type Principal } from '@sandgate/core';
import type { Sandbox } from '@sandgate/protocols';
import { requireAccess, WorkspaceAccess } from '../src/api/access.ts';
import { redisForFile } from '@sandgate/test-harness/redis-per-file';

let client: RedisClient;
redisForFile((server) => (client = server.client()));

function sandbox(id: string, phase: number, workspace = 'default'): Sandbox {
  return {
    metadata: { id, name: id, workspace, labels: {}, annotations: {}, created_at_ms: Date.now() },
    spec: { environment: {}, providers: [], command: ['sleep', '1'] },
    status: { conditions: [], phase },
  };
}

const scope = (caller: Principal = LOCAL_DEV_PRINCIPAL) => ({ caller, workspaces: new WorkspaceAccess(new WorkspaceStore(client)) });
const memberOf = (workspace: string, subject = `token:${workspace}`): Principal => ({
  subject, displayName: subject, provider: 'api_token', admin: false, workspace, roles: [], scopes: [],
});

describe('requireAccess', () => {
  it("another workspace's sandbox is NOT_FOUND before the phase rule (never 'not ready', which would say it exists)", async () => {
    const store = new SandboxStore(client);
    const workspaces = new WorkspaceStore(client);
    await workspaces.create('ws-b', {});
    await store.create(sandbox('b-provisioning', Phase.PROVISIONING, 'ws-b'), 'h');
    await store.create(sandbox('b-ready', Phase.READY, 'ws-b'), 'h');
    const deps = { store, sessionLive: async () => true };
    for (const id of ['b-provisioning', 'b-ready']) {
      await expect(requireAccess(deps, id, scope(memberOf('ws-a')))).rejects.toMatchObject({ code: Code.NOT_FOUND, message: 'sandbox not found' });
    }
    // Its own workspace's member, and a member of A granted a membership in B, get through.
    expect((await requireAccess(deps, 'b-ready', scope(memberOf('ws-b')))).sandbox.metadata?.id).toBe('b-ready');
    await workspaces.addMember('ws-b', 'token:ws-a', 'member');
    expect((await requireAccess(deps, 'b-ready', scope(memberOf('ws-a')))).sandbox.metadata?.id).toBe('b-ready');
  });

  it('answers NOT_FOUND, FAILED_PRECONDITION, or the record, as the rule says', async () => {
    const store = new SandboxStore(client);
    const asked: string[] = [];
    const deps = (live: boolean) => ({
      store,
      sessionLive: async (id: string) => {
        asked.push(id);
        return live;
      },
    });
    await store.create(sandbox('ready', Phase.READY), 'h');
    await store.create(sandbox('provisioning', Phase.PROVISIONING), 'h');
    await store.create(sandbox('completed', Phase.COMPLETED), 'h');

    await expect(requireAccess(deps(true), 'missing', scope())).rejects.toMatchObject({ code: Code.NOT_FOUND });
    await expect(requireAccess(deps(true), 'provisioning', scope())).rejects.toMatchObject({
      code: Code.FAILED_PRECONDITION,
      message: 'sandbox is not ready',
    });
    await expect(requireAccess(deps(false), 'completed', scope())).rejects.toMatchObject({
      code: Code.FAILED_PRECONDITION,
      message: 'sandbox is not ready',
    });
    expect((await requireAccess(deps(true), 'completed', scope())).sandbox.metadata?.id).toBe('completed');
    asked.length = 0;
    expect((await requireAccess(deps(false), 'ready', scope())).sandbox.metadata?.id).toBe('ready');
    // Ready needs no session lookup.
    expect(asked).toEqual([]);
  });
});
