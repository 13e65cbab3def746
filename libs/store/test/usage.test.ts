// Against a real redis-server: a sandbox's usage key lives and dies with its record.
import { describe, expect, it } from 'vitest';
import type { RedisClient } from '@sandgate/store';
import { SandboxStore, SandboxUsageStore, keys } from '@sandgate/store';
import type { Sandbox } from '@sandgate/protocols';
import { redisForFile } from '@sandgate/test-harness/redis-per-file';

let client: RedisClient;
redisForFile((server) => (client = server.client()));

const sandbox = (id: string, name: string): Sandbox => ({
  metadata: { id, name, workspace: 'default', labels: {}, annotations: {}, created_at_ms: Date.now() },
  spec: { environment: {}, providers: [], command: ['sleep', '1'] },
  status: { conditions: [], phase: 2 },
});

const sample = (sandboxId: string) => ({ sandboxId, cpuSeconds: 1.5, memoryBytes: 4096, atMs: Date.now(), replica: 'r0' });

describe('SandboxUsageStore', () => {
  it('publishes a sample while the record exists, and the record\'s removal takes the sample with it', async () => {
    const store = new SandboxStore(client);
    const usage = new SandboxUsageStore(client);
    await store.create(sandbox('u-1', 'usage-one'), 'h');
    await usage.publish([sample('u-1')], 45_000);
    expect(await usage.get('u-1')).toMatchObject({ cpuSeconds: 1.5, memoryBytes: 4096, replica: 'r0' });
    expect(await client.pttl(keys.usage('u-1'))).toBeGreaterThan(40_000);
    expect(await store.remove('u-1', 'default', 'usage-one')).toBe(true);
    expect(await client.exists(keys.usage('u-1'))).toBe(0);
  });

  it('writes nothing for a sandbox whose record is gone (a sample read just before a delete)', async () => {
    const usage = new SandboxUsageStore(client);
    await usage.publish([sample('u-gone')], 45_000);
    expect(await client.exists(keys.usage('u-gone'))).toBe(0);
    expect(await usage.get('u-gone')).toBeNull();
  });
});
