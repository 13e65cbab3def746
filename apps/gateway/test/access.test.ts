// The access rule as every path into a sandbox applies it, against a real redis-server.
import { describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { SandboxStore } from '@sandgate/store';
import { Code, Phase } from '@sandgate/core';
import type { Sandbox } from '@sandgate/protocols';
import { requireAccess } from '../src/api/access.ts';
import { redisForFile } from '@sandgate/test-harness/redis-per-file';

let client: Redis;
redisForFile((server) => (client = server.client()));

function sandbox(id: string, phase: number): Sandbox {
  return {
    metadata: { id, name: id, workspace: 'default', labels: {}, annotations: {}, created_at_ms: Date.now() },
    spec: { environment: {}, providers: [], command: ['sleep', '1'] },
    status: { conditions: [], phase },
  };
}

describe('requireAccess', () => {
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

    await expect(requireAccess(deps(true), 'missing')).rejects.toMatchObject({ code: Code.NOT_FOUND });
    await expect(requireAccess(deps(true), 'provisioning')).rejects.toMatchObject({
      code: Code.FAILED_PRECONDITION,
      message: 'sandbox is not ready',
    });
    await expect(requireAccess(deps(false), 'completed')).rejects.toMatchObject({
      code: Code.FAILED_PRECONDITION,
      message: 'sandbox is not ready',
    });
    expect((await requireAccess(deps(true), 'completed')).sandbox.metadata?.id).toBe('completed');
    asked.length = 0;
    expect((await requireAccess(deps(false), 'ready')).sandbox.metadata?.id).toBe('ready');
    // Ready needs no session lookup.
    expect(asked).toEqual([]);
  });
});
