// One replica cut off from Redis while the others reach it: its sandboxes move. The balancer
// checks liveness (balancer-redis-restart.test.ts says why), so it no longer shuts the sessions of
// a replica that lost Redis; the replica itself must. Its supervisors hear its heartbeats and
// stay, while their ownership keys expire and no other replica can route to them (no owner
// record), so the sandboxes would be unreachable for as long as the partition lasts. The replica
// ends every session whose key has expired (ownerTtlMs after its last renewal that succeeded),
// and the supervisors reconnect through the balancer until a replica that can claim them takes
// them. The cut is real: the replica logs in to Redis as its own ACL user, which is switched off
// and its connections killed.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keysFor } from '@sandgate/store';
import { Cluster, runCli } from '../harness/cluster.ts';
import { startHaproxy, type Haproxy } from '../harness/haproxy.ts';
import { freePort } from '../harness/ports.ts';
import { onEveryNode, startRedis, type TestRedis } from '../harness/redis.ts';
import { createSandbox, deleteAllSandboxes } from '../harness/sandbox.ts';
import { waitFor } from '../harness/wait.ts';

const CUT_USER = 'sg-cut-off';

let redis: TestRedis;
let cluster: Cluster;
let lb: Haproxy;

beforeAll(async () => {
  redis = await startRedis();
  const admin = redis.client();
  // Another login with the same password: the same peer secret (derived from the password), so
  // the two replicas still trust each other's peer links.
  await onEveryNode(admin, 'ACL', 'SETUSER', CUT_USER, 'on', `>${redis.password}`, '~*', '&*', '+@all');
  admin.disconnect();
  const lbPort = await freePort();
  cluster = await Cluster.start({ redisUrl: redis.url, replicas: 1, supervisorEndpoint: `127.0.0.1:${lbPort}` });
  await cluster.addReplica({ redisUrl: redis.url.replace(`//${redis.user}:`, `//${CUT_USER}:`) });
  lb = await startHaproxy(lbPort, cluster.replicas.map((x) => ({ name: x.id, grpcPort: x.grpcPort, httpPort: x.httpPort })), { credentials: cluster.credentials });
});

afterAll(async () => {
  const admin = redis?.client();
  if (admin) await onEveryNode(admin, 'ACL', 'SETUSER', CUT_USER, 'on').catch(() => undefined);
  admin?.disconnect();
  if (cluster && lb) await deleteAllSandboxes(cluster.replicas[0]!.grpcAddress).catch(() => undefined);
  await lb?.stop();
  await cluster?.stop();
  cluster?.cleanup();
  await redis?.stop();
});

async function ownerOf(id: string): Promise<string | undefined> {
  const r = redis.client();
  try {
    return (await r.hget(keysFor(r).owner(id), 'replica')) ?? undefined;
  } finally {
    r.disconnect();
  }
}

async function echo(name: string, text: string, via: number): Promise<string> {
  const res = await runCli(['sandbox', 'exec', name, '--', 'echo', text], { gateway: cluster.replicas[via]!.grpcAddress, timeoutMs: 20_000 });
  return res.code === 0 ? res.stdout.toString().trim() : `exit ${res.code}: ${res.stderr.toString().trim()}`;
}

describe('a replica cut off from Redis alone', () => {
  it('ends its sessions once their ownership has expired, and the sandboxes answer through the other replica', async () => {
    // Sandboxes until one has its session on r1.
    let name = '';
    let id = '';
    const owners: string[] = [];
    for (let i = 0; i < 8 && !id; i++) {
      // Created through r0 directly: only the supervisors go through the balancer, so they alternate.
      const made = await createSandbox(cluster.replicas[0]!.grpcAddress, `cut-${i}`);
      const owner = await waitFor(`cut-${i}'s owner`, () => ownerOf(made.id), 30_000, 100);
      owners.push(owner);
      if (owner === 'r1') [name, id] = [`cut-${i}`, made.id];
    }
    expect(id, `no sandbox had its session on r1: owners ${owners.join(' ')}`).not.toBe('');
    expect(await echo(name, 'before', 0)).toBe('before');

    const admin = redis.client();
    await onEveryNode(admin, 'ACL', 'SETUSER', CUT_USER, 'off');
    await onEveryNode(admin, 'CLIENT', 'KILL', 'USER', CUT_USER);
    admin.disconnect();
    const cutAt = Date.now();

    // Past the owner TTL (6 s) r1 lets go; the supervisor's next hello lands on r0 (or on r1,
    // which cannot claim it, and then on r0).
    await waitFor('the sandbox owned by r0', async () => (await ownerOf(id)) === 'r0', 45_000, 200).catch(async (err: unknown) => {
      throw new Error(`${String(err)}; owner now ${String(await ownerOf(id))}\n${cluster.logs().slice(-6000)}`);
    });
    await waitFor(`${name} answering through r0`, async () => (await echo(name, 'after', 0)) === 'after', 30_000, 250);
    console.log(`redis partition: ${name} answered through r0 ${Date.now() - cutAt} ms after r1 lost Redis`);
    expect(cluster.replicas[1]!.logs.join('')).toContain('ownership lapsed: Redis out of reach for longer than the owner TTL');
    // r1 is alive all along: only its Redis is gone.
    expect(cluster.replicas[1]!.proc?.exitCode).toBeNull();
  });
});
