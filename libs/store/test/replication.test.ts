// ReplicationGuard against a real redis-server with no replicas: the shortfall case. (A Sentinel
// group with replicas, cut off and in step, is test/e2e/redis-wait.test.ts.)
import { describe, expect, it } from 'vitest';
import type { RedisClient } from '@sandgate/store';
import { Code, GatewayError } from '@sandgate/core';
import { ReplicationGuard } from '@sandgate/store';
import { redisForFile } from '@sandgate/test-harness/redis-per-file';

let client: RedisClient;
redisForFile((server) => (client = server.client()));

describe('ReplicationGuard', () => {
  it('refuses UNAVAILABLE when fewer replicas than required confirm, naming the setting and the timeout', async () => {
    await client.set('replication-test', '1');
    const err = await new ReplicationGuard(client, { minReplicas: 1, timeoutMs: 100 }).confirm('the create').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(GatewayError);
    expect((err as GatewayError).code).toBe(Code.UNAVAILABLE);
    expect((err as GatewayError).message).toBe(
      'the create reached 0 of the 1 Redis replica(s) required (SANDGATE_REDIS_MIN_REPLICAS) within 100 ms, so a failover could lose it; retry when the replicas are back',
    );
  });

  it('asks nothing of Redis when no replica is required', async () => {
    const before = Number(/total_commands_processed:(\d+)/.exec(await client.info('stats'))![1]);
    await new ReplicationGuard(client, { minReplicas: 0, timeoutMs: 100 }).confirm('the create');
    const after = Number(/total_commands_processed:(\d+)/.exec(await client.info('stats'))![1]);
    // Only the first INFO itself was counted in between.
    expect(after - before).toBe(1);
  });
});
