// The e2e-sentinel project really runs its files on a Sentinel-managed Redis: its vitest project
// sets SANDGATE_TEST_REDIS=sentinel, and under that setting the harness' startRedis() gives a
// `redis+sentinel://` URL whose Sentinels name a primary with a replica attached, replicas get
// the WAIT setting, what a test does to its Redis reaching every node, and TLS refused.
// The same for e2e-cluster (SANDGATE_TEST_REDIS=cluster): a `redis+cluster://` URL of a cluster
// whose every primary has a replica. Without this a project that lost its setting would silently
// test the single server again.
import { afterEach, describe, expect, it } from 'vitest';
import { Cluster } from 'ioredis';
import config from '../../vitest.config.ts';
import { startRedis, testRedisMode, testRedisReplicaEnv, type TestRedis } from '../harness/redis.ts';
import { sleep } from '../harness/wait.ts';

const saved = process.env.SANDGATE_TEST_REDIS;
afterEach(() => {
  if (saved === undefined) delete process.env.SANDGATE_TEST_REDIS;
  else process.env.SANDGATE_TEST_REDIS = saved;
});

/** A persistent test Redis killed whole and restarted keeps a key written before. */
async function expectKeptThroughKillAndRestart(): Promise<void> {
  const redis = await startRedis({ persistent: true });
  try {
    await redis.client().set('sg:test:kept', 'yes');
    await sleep(1_500); // one append-only fsync (every second)
    await redis.kill();
    await redis.restart();
    expect(await redis.client().get('sg:test:kept')).toBe('yes');
  } finally {
    await redis.stop();
  }
}

describe('SANDGATE_TEST_REDIS', () => {
  it('is set to sentinel by the e2e-sentinel project, which has files to run', () => {
    const projects = (config.test?.projects ?? []) as { test?: { name?: string; env?: Record<string, string>; include?: string[] } }[];
    const project = projects.find((p) => p.test?.name === 'e2e-sentinel');
    expect(project?.test?.env).toEqual({ SANDGATE_TEST_REDIS: 'sentinel' });
    expect(project?.test?.include?.length).toBeGreaterThan(0);
  });

  it('sentinel: startRedis() is a Sentinel group with a replica, and replicas wait for it', async () => {
    process.env.SANDGATE_TEST_REDIS = 'sentinel';
    let redis: TestRedis | undefined;
    try {
      redis = await startRedis();
      // Replicas on it wait for its replica; on any other Redis (a test's own group) nothing is added.
      expect(testRedisReplicaEnv(redis.url)).toEqual({ SANDGATE_REDIS_MIN_REPLICAS: '1' });
      expect(testRedisReplicaEnv(redis.url.replace('sgmaster', 'other'))).toEqual({});
      expect(redis.url).toMatch(/^redis\+sentinel:\/\/sandgate:[^@]+@127\.0\.0\.1:\d+,127\.0\.0\.1:\d+,127\.0\.0\.1:\d+\/sgmaster\?sentinelPassword=/);
      const client = redis.client();
      await client.set('sg:test:mode', 'sentinel');
      expect(await client.get('sg:test:mode')).toBe('sentinel');
      // The write is on a primary with one replica that acknowledges it.
      expect(await client.call('WAIT', '1', '2000')).toBe(1);
    } finally {
      await redis?.stop();
    }
    // What a single server's test does to its Redis happens to every data node: a persistent
    // group killed whole and restarted keeps its keys.
    await expectKeptThroughKillAndRestart();
    await expect(startRedis({ tls: { cert: '', key: '', ca: '' } })).rejects.toThrow(/tls/);
  });

  it('is set to cluster by the e2e-cluster project, over the same files as e2e-sentinel', () => {
    const projects = (config.test?.projects ?? []) as { test?: { name?: string; env?: Record<string, string>; include?: string[] } }[];
    const cluster = projects.find((p) => p.test?.name === 'e2e-cluster');
    expect(cluster?.test?.env).toEqual({ SANDGATE_TEST_REDIS: 'cluster' });
    expect(cluster?.test?.include).toEqual(projects.find((p) => p.test?.name === 'e2e-sentinel')?.test?.include);
  });

  it('cluster: startRedis() is a cluster of three primaries with a replica each, and replicas wait for them', async () => {
    process.env.SANDGATE_TEST_REDIS = 'cluster';
    let redis: TestRedis | undefined;
    try {
      redis = await startRedis();
      expect(testRedisReplicaEnv(redis.url)).toEqual({ SANDGATE_REDIS_MIN_REPLICAS: '1' });
      expect(redis.url).toMatch(/^redis\+cluster:\/\/sandgate:[^@]+@(127\.0\.0\.1:\d+,){5}127\.0\.0\.1:\d+$/);
      const client = redis.client();
      expect(client).toBeInstanceOf(Cluster);
      await client.set('sg:test:mode', 'cluster');
      expect(await client.get('sg:test:mode')).toBe('cluster');
      const nodes = (client as Cluster).nodes('master');
      expect(nodes).toHaveLength(3);
      for (const node of nodes) expect(await node.call('WAIT', '1', '2000')).toBe(1);
    } finally {
      await redis?.stop();
    }
    // Every node at once: a persistent cluster killed whole and restarted keeps its keys.
    await expectKeptThroughKillAndRestart();
    await expect(startRedis({ tls: { cert: '', key: '', ca: '' } })).rejects.toThrow(/tls/);
  });

  it('single (the default) is one redis-server; anything else fails the run', async () => {
    delete process.env.SANDGATE_TEST_REDIS;
    expect(testRedisMode()).toBe('single');
    process.env.SANDGATE_TEST_REDIS = 'sentinal';
    expect(() => testRedisMode()).toThrow(/SANDGATE_TEST_REDIS=sentinal: use single, sentinel or cluster/);
  });
});
