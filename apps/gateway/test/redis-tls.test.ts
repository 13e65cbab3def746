// A replica on a `rediss://` Redis with --redis-ca: its command connection, the job scheduler
// and the BullMQ worker connections all speak TLS and trust the given CA (a real redis-server
// serving TLS only, a certificate from @sandgate/pki). A replica without the CA cannot start.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { RedisClient } from '@sandgate/store';
import { createCertificateAuthority } from '@sandgate/pki';
import { startReplica, type ReplicaConfig } from '@sandgate/gateway';
import { startRedis, type TestRedis } from '@sandgate/test-harness/redis';
import { waitFor } from '@sandgate/test-harness/wait';
import { inProcessReplicaConfig } from './in-process-replica.ts';

let redis: TestRedis;
let client: RedisClient;
let stateDir: string;
let caFile: string;

beforeAll(async () => {
  const ca = await createCertificateAuthority('redis test CA');
  const server = await ca.issue({ commonName: 'redis', ipAddresses: ['127.0.0.1'], usage: 'server' });
  redis = await startRedis({ tls: { ...server, ca: ca.cert } });
  client = redis.client();
  stateDir = mkdtempSync(path.join(os.tmpdir(), 'sg-redis-tls-'));
  caFile = path.join(stateDir, 'redis-ca.pem');
  writeFileSync(caFile, ca.cert);
});
afterAll(async () => {
  await redis?.stop();
  rmSync(stateDir, { recursive: true, force: true });
});

function config(replicaId: string, redisCa: string): ReplicaConfig {
  return inProcessReplicaConfig({ replicaId, redisUrl: redis.url, stateDir }, { redisCa, workers: true });
}

describe('rediss:// with --redis-ca', () => {
  it('a replica reaches Redis over TLS on every connection, jobs included', async () => {
    expect(redis.url).toMatch(/^rediss:\/\/sandgate:/);
    const replica = await startReplica(config('tls-r1', caFile));
    try {
      await waitFor('the replica registered and its job connections', async () => {
        const list = (await client.client('LIST')) as string;
        return (await client.exists('sg:replica:tls-r1')) === 1 && list.includes('name=sandgate:tls-r1:jobs-scheduler') && list.includes('name=sandgate:tls-r1:jobs-worker');
      }, 10_000);
    } finally {
      await replica.close();
    }
  });

  it('without the CA the server is not trusted and the replica does not start', async () => {
    await expect(startReplica({ ...config('tls-r2', ''), redisUrl: redis.url })).rejects.toThrow();
    await expect(startReplica(config('tls-r3', path.join(stateDir, 'missing.pem')))).rejects.toThrow(/--redis-ca/);
  });
});
