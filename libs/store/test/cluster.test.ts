// Against a real Redis Cluster (three primaries, one replica each): the cluster layout of the key
// schema puts what one script touches in one slot and spreads sandboxes over every primary, and
// the ownership scripts (the per-session load: claim, renew, release) run on it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Cluster, Redis } from 'ioredis';
import { ClusterCounter, OwnershipStore, ReplicationGuard, clusterKeys, keys, keysFor } from '@sandgate/store';
import { Code } from '@sandgate/core';
import { startRedis, type TestRedis } from '@sandgate/test-harness/redis';
import { startRedisCluster, type TestRedisCluster } from '@sandgate/test-harness/redis-cluster';

let cluster: TestRedisCluster;
let client: Cluster;
let single: TestRedis;

beforeAll(async () => {
  [cluster, single] = await Promise.all([startRedisCluster(), startRedis()]);
  client = cluster.client();
}, 60_000);
afterAll(async () => {
  await Promise.all([cluster?.stop(), single?.stop()]);
});

/** The slot Redis itself computes for a key. */
const slotOf = (key: string) => client.cluster('KEYSLOT', key) as Promise<number>;
const slotsOf = async (names: string[]) => new Set(await Promise.all(names.map(slotOf)));

/** Which primary (by port) holds a key's slot, from CLUSTER SLOTS. */
async function primaryOf(): Promise<(slot: number) => number> {
  const ranges = await client.cluster('SLOTS');
  return (slot) => {
    const range = ranges.find(([from, to]) => slot >= from && slot <= to);
    if (!range?.[2]) throw new Error(`no primary serves slot ${slot}`);
    return range[2][1];
  };
}

describe('the cluster layout of the key schema', () => {
  it('is picked by the connection', () => {
    expect(keysFor(client)).toBe(clusterKeys);
    expect(keysFor(single.client())).toBe(keys);
  });

  it('puts every key of one sandbox in one slot, and so for a workspace, a token and the cluster-wide keys', async () => {
    const id = 'c0ffee00-1111-2222-3333-444455556666';
    const sandboxKeys = [
      clusterKeys.sandbox(id),
      clusterKeys.owner(id),
      clusterKeys.fence(id),
      clusterKeys.events(id),
      clusterKeys.logs(id),
      clusterKeys.usage(id),
      clusterKeys.sandboxSshSessions(id),
      clusterKeys.forwardsBySandbox(id),
      clusterKeys.sandboxServices(id),
    ];
    expect((await slotsOf(sandboxKeys)).size).toBe(1);
    const workspaceKeys = ['default', 'team-a'].map((ws) => [
      clusterKeys.workspace(ws),
      clusterKeys.workspaceMembers(ws),
      clusterKeys.workspaceSandboxes(ws),
      clusterKeys.workspaceExecs(ws),
      clusterKeys.workspaceServices(ws),
      clusterKeys.pendingSandboxes(ws),
      clusterKeys.sandboxName(ws, 'web'),
      clusterKeys.sandboxName(ws, 'db'),
    ]);
    for (const ws of workspaceKeys) expect((await slotsOf(ws)).size).toBe(1);
    expect(await slotOf(workspaceKeys[0]![0]!)).not.toBe(await slotOf(workspaceKeys[1]![0]!));
    // A warm pool's definition is with its members (the sandbox set of its workspace).
    expect((await slotsOf([clusterKeys.pool('small'), clusterKeys.workspaceSandboxes('pool:small'), clusterKeys.sandboxName('pool:small', 'm1')])).size).toBe(1);
    expect((await slotsOf([clusterKeys.sshSession('ab12'), clusterKeys.forwardsByToken('ab12')])).size).toBe(1);
    const globalKeys = [
      clusterKeys.sandboxIndex(),
      clusterKeys.orphans(),
      clusterKeys.workspaceIndex(),
      clusterKeys.poolIndex(),
      clusterKeys.apiTokenIndex(),
      clusterKeys.apiToken('ab12'),
      clusterKeys.apiToken('cd34'),
      clusterKeys.counter(ClusterCounter.execBackstopKills),
      clusterKeys.legacyPeerSecret(),
    ];
    expect((await slotsOf(globalKeys)).size).toBe(1);
  });

  it('spreads sandboxes over every primary', async () => {
    const primary = await primaryOf();
    const perPrimary = new Map<number, number>();
    for (let i = 0; i < 600; i++) {
      const port = primary(await slotOf(clusterKeys.owner(`sbx-${i}`)));
      perPrimary.set(port, (perPrimary.get(port) ?? 0) + 1);
    }
    expect([...perPrimary.keys()].sort()).toEqual([...cluster.primaryPorts].sort());
    // Three equal shares of the slots: 200 each, give or take chance.
    for (const n of perPrimary.values()) expect(n).toBeGreaterThan(120);
  });
});

describe('ownership on a cluster', () => {
  const holder = (session: string) => ({ replica: 'r1', session, instance: 'i1' });

  it('claims, renews and releases, fenced, with every sandbox on its own slot', async () => {
    const store = new OwnershipStore(client, 6000);
    const fence = await store.claim('one', 'r1', 's1', 'i1');
    expect(await store.get('one')).toEqual({ replica: 'r1', session: 's1', fence, instance: 'i1' });
    expect(await store.renew('one', fence, holder('s1'))).toBe(true);
    // Another replica's claim supersedes ours: our renew and release no longer act.
    const newer = await store.claim('one', 'r2', 's2', 'i2');
    expect(newer).toBeGreaterThan(fence);
    expect(await store.renew('one', fence, holder('s1'))).toBe(false);
    expect(await store.release('one', fence)).toBe(false);
    expect((await store.get('one'))?.replica).toBe('r2');
    expect(await store.release('one', newer)).toBe(true);
    expect(await store.get('one')).toBeNull();
  });

  it('renews many sessions spread over the shards in one call, and says which are no longer ours', async () => {
    const store = new OwnershipStore(client, 6000);
    const ids = Array.from({ length: 300 }, (_, i) => `many-${i}`);
    const fences = await Promise.all(ids.map((id) => store.claim(id, 'r1', `s-${id}`, 'i1')));
    // Every primary holds some of them.
    for (const port of cluster.primaryPorts) {
      const node: Redis = cluster.node(port);
      expect(((await node.keys('sg:own:*')) as string[]).length, `keys on :${port}`).toBeGreaterThan(30);
    }
    await store.claim('many-7', 'r2', 'other', 'i2');
    const renewed = await store.renewMany(ids.map((id, i) => ({ sandboxId: id, fence: fences[i]!, holder: holder(`s-${id}`) })));
    expect(renewed.filter((ok) => !ok)).toHaveLength(1);
    expect(renewed[7]).toBe(false);
    expect(await client.pttl(clusterKeys.owner('many-299'))).toBeGreaterThan(5000);
  });
});

describe('acknowledged writes on a cluster', () => {
  it('wait for the replica of the primary that took the write: frozen, UNAVAILABLE; the other shards do not hold it up', async () => {
    const guard = new ReplicationGuard(client, { minReplicas: 1, timeoutMs: 500 });
    const frozen = cluster.replicaPorts[0]!;
    const info = await cluster.node(frozen).info('replication');
    const primaryPort = Number(/master_port:(\d+)/.exec(info)![1]);
    const primary = await primaryOf();
    let onFrozenShard = '';
    let elsewhere = '';
    for (let i = 0; !onFrozenShard || !elsewhere; i++) {
      const key = clusterKeys.sandbox(`acked-${i}`);
      if (primary(await slotOf(key)) === primaryPort) onFrozenShard ||= key;
      else elsewhere ||= key;
    }
    await client.set(onFrozenShard, '1');
    await guard.confirm('the first write');
    cluster.signal(frozen, 'SIGSTOP');
    try {
      // Another shard's write is confirmed: its replica has it, and this client's writes to the
      // frozen one's primary were all acknowledged before the freeze.
      await client.set(elsewhere, '2');
      await guard.confirm('the write elsewhere');
      await client.set(onFrozenShard, '3');
      await expect(guard.confirm('the write')).rejects.toMatchObject({ code: Code.UNAVAILABLE, message: expect.stringMatching(/reached 0 of the 1 Redis replica/) });
    } finally {
      cluster.signal(frozen, 'SIGCONT');
    }
    await guard.confirm('the write after the thaw');
  });
});
