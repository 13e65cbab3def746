// A replica closed in-process leaves no Redis connection behind: an embedding process (tests,
// `sandgate up`) that starts and stops replicas must not leak a connection per replica.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { RedisClient } from '@sandgate/store';
import { startReplica, type ReplicaConfig } from '@sandgate/gateway';
import { startRedis, type TestRedis } from '@sandgate/test-harness/redis';
import { waitFor } from '@sandgate/test-harness/wait';
import { inProcessReplicaConfig } from './in-process-replica.ts';

let redis: TestRedis;
let client: RedisClient;
let stateDir: string;

beforeAll(async () => {
  redis = await startRedis();
  client = redis.client();
  stateDir = mkdtempSync(path.join(os.tmpdir(), 'sg-shutdown-'));
});
afterAll(async () => {
  await redis?.stop();
  rmSync(stateDir, { recursive: true, force: true });
});

/** Every connection on the server but the test's own, as `name` (empty when unnamed). */
async function otherConnections(): Promise<string[]> {
  const own = await client.client('ID');
  const list = (await client.client('LIST')) as string;
  return list
    .trim()
    .split('\n')
    .map((line) => Object.fromEntries(line.split(' ').map((kv) => kv.split('=') as [string, string])))
    .filter((c) => Number(c.id) !== own)
    .map((c) => c.name ?? '');
}

function config(replicaId: string): ReplicaConfig {
  // Shutdown, not authentication, is under test here.
  return inProcessReplicaConfig({ replicaId, redisUrl: redis.url, stateDir }, { workers: true, auth: false });
}

describe('replica shutdown', () => {
  it('closes every Redis connection it opened, the job scheduler and worker connections included', async () => {
    const replica = await startReplica(config('shutdown-r1'));
    // The job connections are named after the replica, so an operator's CLIENT LIST tells them apart.
    await waitFor('the job scheduler and worker connections', async () => {
      const names = await otherConnections();
      return names.some((n) => n === 'sandgate:shutdown-r1:jobs-scheduler') && names.some((n) => n.startsWith('sandgate:shutdown-r1:jobs-worker'));
    }, 10_000);
    await replica.close();
    // Server-side bookkeeping of a closed socket can trail the client by a moment; a leak never clears.
    await waitFor('no connection of the closed replica', async () => (await otherConnections()).length === 0, 3_000, 50);
  });
});
