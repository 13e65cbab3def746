// The stores whose operations span several hash slots (sandbox creates and deletes, warm-pool
// claims, SSH sessions and forwards, exposed services, workspaces and pools), run the same way on
// one redis-server and on a real Redis Cluster of three primaries (test/harness/redis-cluster.ts),
// where each of their scripts must stay inside one slot (Redis refuses one that does not:
// CROSSSLOT). And what the reconcile sweep does with a create or a delete whose replica died
// between two of its steps (SandboxStore.settlePending).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Cluster, type Redis } from 'ioredis';
import {
  MemberBusyError,
  PoolStore,
  SandboxLogStore,
  SandboxStore,
  ServiceEndpointStore,
  SshSessionStore,
  WorkspaceStore,
  keysFor,
  tokenDigest,
  type RedisClient,
} from '@sandgate/store';
import { randomUUID } from 'node:crypto';
import { Code, GatewayError, poolMemberName, poolWorkspace } from '@sandgate/core';
import type { Sandbox, ServiceEndpoint } from '@sandgate/protocols';
import { startRedis, type TestRedis } from '@sandgate/test-harness/redis';
import { startRedisCluster, type TestRedisCluster } from '@sandgate/test-harness/redis-cluster';

let single: TestRedis;
let cluster: TestRedisCluster;
const clients: Record<string, RedisClient> = {};

beforeAll(async () => {
  [single, cluster] = await Promise.all([startRedis(), startRedisCluster()]);
  clients['one Redis'] = single.client();
  clients['a cluster'] = cluster.client();
}, 60_000);
afterAll(async () => {
  await Promise.all([single?.stop(), cluster?.stop()]);
});

let seq = 0;
const unique = (prefix: string) => `${prefix}-${process.pid}-${++seq}`;

const sandbox = (id: string, name: string, workspace = 'default'): Sandbox => ({
  metadata: { id, name, workspace, labels: {}, annotations: {}, created_at_ms: Date.now() },
  spec: { environment: {}, providers: [], command: ['sleep', '1'] },
  status: { conditions: [], phase: 1 },
});

const endpoint = (sandboxId: string, sandboxName: string, service: string, workspace = 'default'): ServiceEndpoint => ({
  metadata: { id: `ep-${sandboxName}-${service}`, name: `${sandboxName}--${service}`, labels: {}, annotations: {}, workspace, created_at_ms: Date.now() },
  sandbox_id: sandboxId,
  sandbox_name: sandboxName,
  service_name: service,
  target_port: 8080,
  domain: true,
});

/** Every key on every primary. */
async function allKeys(redis: RedisClient): Promise<string[]> {
  const nodes: Redis[] = redis instanceof Cluster ? redis.nodes('master') : [redis];
  const out: string[] = [];
  for (const node of nodes) out.push(...(await node.keys('*')));
  return out.sort();
}

/** Keys naming `text` (a sandbox id, a name, a digest). */
const mentioning = (all: string[], ...texts: string[]) => all.filter((k) => texts.some((t) => k.includes(t)));

describe.each(['one Redis', 'a cluster'])('on %s', (mode) => {
  const redis = () => clients[mode]!;

  it('creates, finds, lists and deletes a sandbox, leaving no key of it but its closing event stream', async () => {
    const store = new SandboxStore(redis());
    const ssh = new SshSessionStore(redis());
    const services = new ServiceEndpointStore(redis());
    const logs = new SandboxLogStore(redis());
    const [id, name] = [unique('sbx'), unique('web')];
    await store.create(sandbox(id, name), 'cred');
    expect((await store.get(id))?.sandbox.metadata?.name).toBe(name);
    expect((await store.getByName('default', name))?.sandbox.metadata?.id).toBe(id);
    expect((await store.list()).map((r) => r.sandbox.metadata!.id)).toContain(id);
    await expect(store.create(sandbox(unique('sbx'), name), 'cred')).rejects.toMatchObject({ code: Code.ALREADY_EXISTS });

    // Everything a sandbox can have: a log line, an endpoint, SSH sessions and a forward.
    await logs.append(id, { timestamp_ms: 1, level: 'INFO', target: 't', source: 'gateway', message: 'hello' } as never);
    await services.upsert(endpoint(id, name, 'http'), 0);
    expect((await services.listWorkspace('default', 0, 100, async (n) => (n === name ? id : null))).map((e) => e.metadata?.name)).toContain(`${name}--http`);
    const session = { sandboxId: id, runStartedAtMs: 0, expiresAtMs: 0, revoked: false, createdAtMs: 1 };
    const [forever, expiring] = [unique('tok'), unique('tok')];
    expect(await ssh.create(forever, session)).toBe(true);
    expect(await ssh.create(expiring, { ...session, expiresAtMs: Date.now() + 60_000 })).toBe(true);
    expect(await ssh.get(forever)).toMatchObject({ sandboxId: id, revoked: false });
    expect(await ssh.acquireForward({ token: forever, sandboxId: id, forwardId: 'f1' }, { perToken: 1, perSandbox: 5 })).toBe('ok');
    expect(await ssh.acquireForward({ token: forever, sandboxId: id, forwardId: 'f2' }, { perToken: 1, perSandbox: 5 })).toBe('token-limit');
    expect(await ssh.acquireForward({ token: expiring, sandboxId: id, forwardId: 'f3' }, { perToken: 1, perSandbox: 1 })).toBe('sandbox-limit');
    // The one refused by the sandbox's cap left nothing counted on its token.
    expect(await ssh.acquireForward({ token: expiring, sandboxId: id, forwardId: 'f4' }, { perToken: 1, perSandbox: 2 })).toBe('ok');
    await ssh.heartbeatForwards([{ token: forever, sandboxId: id, forwardId: 'f1' }]);
    expect(await ssh.liveForwards(id)).toBe(2);

    const digests = [tokenDigest(forever), tokenDigest(expiring)];
    expect(mentioning(await allKeys(redis()), id, ...digests).length).toBeGreaterThan(8);
    expect(await store.remove(id, 'default', name)).toBe(true);
    expect(await store.get(id)).toBeNull();
    expect(await store.getByName('default', name)).toBeNull();
    expect(await ssh.get(forever)).toBeNull();
    expect(await services.listWorkspace('default', 0, 100, async () => id)).toEqual([]);
    expect(mentioning(await allKeys(redis()), id, name, ...digests)).toEqual([keysFor(redis()).events(id)]);
    // A session asked for after the delete is refused and leaves nothing behind.
    expect(await ssh.create(unique('tok'), session)).toBe(false);
    expect(mentioning(await allKeys(redis()), id, name)).toEqual([keysFor(redis()).events(id)]);
    // Deleting again is harmless.
    expect(await store.remove(id, 'default', name)).toBe(false);
  });

  it('refuses a create over the workspace quota, in a missing workspace and in one being deleted', async () => {
    const store = new SandboxStore(redis());
    const workspaces = new WorkspaceStore(redis());
    const ws = unique('ws');
    await expect(store.create(sandbox(unique('s'), 'a', ws), 'c')).rejects.toMatchObject({ code: Code.NOT_FOUND });
    expect(await workspaces.create(ws, {})).not.toBeNull();
    expect((await workspaces.list()).map((w) => w.name)).toContain(ws);
    const first = unique('s');
    await store.create(sandbox(first, 'a', ws), 'c', { maxPerWorkspace: 1 });
    await expect(store.create(sandbox(unique('s'), 'b', ws), 'c', { maxPerWorkspace: 1 })).rejects.toMatchObject({ code: Code.RESOURCE_EXHAUSTED });
    expect(await workspaces.delete(ws)).toBe('holds-sandboxes');
    await expect(store.create(sandbox(unique('s'), 'b', ws), 'c')).rejects.toMatchObject({ code: Code.FAILED_PRECONDITION });
    await store.remove(first, ws, 'a');
    expect(await workspaces.delete(ws)).toBe('deleted');
    expect((await workspaces.list()).map((w) => w.name)).not.toContain(ws);
    expect(mentioning(await allKeys(redis()), `:${ws}`, `{w:${ws}}`)).toEqual([]);
  });

  it('fills a warm pool up to its size and claims a member once, into the caller\'s workspace', async () => {
    const store = new SandboxStore(redis());
    const pools = new PoolStore(redis(), store);
    const pool = unique('pool');
    const def = await pools.set(pool, 2, { image: 'img' } as never);
    const members = [unique('m'), unique('m'), unique('m')];
    const results = [];
    for (const [i, id] of members.entries()) results.push(await pools.createMember(sandbox(id, `m${i}`, poolWorkspace(pool)), 'c', pool, def.generation));
    expect(results).toEqual([1, 1, 0]);
    expect(await pools.createMember(sandbox(unique('m'), 'm9', poolWorkspace(pool)), 'c', pool, def.generation + 1)).toBe(-1);
    const [member] = (await pools.members(pool)).filter((m) => m.sandbox.metadata?.id === members[0]);
    const name = unique('claimed');
    const claimed = sandbox(members[0]!, name);
    expect(await pools.claim(member!, claimed, { workspace: 'default', name, maxPerWorkspace: 0 })).toBe(true);
    // The same read of the member cannot claim it again.
    expect(await pools.claim(member!, sandbox(members[0]!, unique('again')), { workspace: 'default', name: unique('again'), maxPerWorkspace: 0 })).toBe(false);
    const rec = await store.get(members[0]!);
    expect(rec).toMatchObject({ pool: null, mainPending: true, claimed: true });
    expect(rec?.sandbox.metadata).toMatchObject({ name, workspace: 'default' });
    expect((await pools.members(pool)).map((m) => m.sandbox.metadata?.id)).toEqual([members[1]]);
    expect(await store.getByName(poolWorkspace(pool), 'm0')).toBeNull();
    expect((await store.getByName('default', name))?.sandbox.metadata?.id).toBe(members[0]);
    // A claim into a taken name fails as a create would, and leaves the member in its pool.
    const [other] = await pools.members(pool);
    await expect(pools.claim(other!, sandbox(other!.sandbox.metadata!.id!, name), { workspace: 'default', name, maxPerWorkspace: 0 })).rejects.toMatchObject({ code: Code.ALREADY_EXISTS });
    expect((await pools.members(pool)).map((m) => m.sandbox.metadata?.id)).toEqual([members[1]]);

    expect(await pools.delete(pool)).toBe(true);
    expect(await pools.forget(pool)).toBe(false); // a member is left
    await store.remove(members[1]!, poolWorkspace(pool), 'm1');
    expect(await pools.forget(pool)).toBe(true);
    expect(await pools.names()).not.toContain(pool);
  });

  it('settles a create whose replica died after its reservation: the name and the quota are free again', async () => {
    const store = new SandboxStore(redis());
    const k = keysFor(redis());
    const [id, name] = [unique('sbx'), unique('half')];
    const at = await store.reserve(id, 'default', name, 0, 'create');
    expect(await redis().hget(k.pendingSandboxes('default'), id)).toBe(`create ${at} ${name}`);
    // Not yet past the grace: left alone.
    expect(await store.settlePending(60_000)).toMatchObject({ released: 0 });
    expect(await store.idByName('default', name)).toBe(id);
    expect(await store.settlePending(0)).toMatchObject({ released: 1 });
    expect(await store.idByName('default', name)).toBeNull();
    expect(await redis().sismember(k.workspaceSandboxes('default'), id)).toBe(0);
    expect(await redis().hget(k.pendingSandboxes('default'), id)).toBeNull();
    await store.create(sandbox(unique('sbx'), name), 'c');
  });

  it('settles a create whose replica died after writing the record: it is listed', async () => {
    const store = new SandboxStore(redis());
    const k = keysFor(redis());
    const [id, name] = [unique('sbx'), unique('half')];
    await store.reserve(id, 'default', name, 0, 'create');
    // The record step's writes, as if its replica died right after them.
    await redis().hset(k.sandbox(id), 'pb', Buffer.from(''), 'rv', 0, 'ws', 'default', 'name', name, 'cred', 'c');
    expect(await store.settlePending(0)).toMatchObject({ finished: 1 });
    expect(await redis().sismember(k.sandboxIndex(), id)).toBe(1);
    expect(await redis().hget(k.pendingSandboxes('default'), id)).toBeNull();
    await store.remove(id, 'default', name);
  });

  it('refuses a record written after the create window, and undoes the reservation', async () => {
    const store = new SandboxStore(redis());
    const [id, name] = [unique('sbx'), unique('late')];
    const at = await store.reserve(id, 'default', name, 0, 'create');
    const err = await store.writeReserved(id, 'default', name, at - 11_000, [Buffer.from(''), 'default', name, 'c', 10]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(GatewayError);
    expect((err as GatewayError).code).toBe(Code.UNAVAILABLE);
    expect(await store.get(id)).toBeNull();
    // The reservation written was `create <at> …`, not the one passed: left for the sweep.
    expect(await store.settlePending(0)).toMatchObject({ released: 1 });
    expect(await store.idByName('default', name)).toBeNull();
  });

  it('finishes a delete whose replica died between its steps', async () => {
    const store = new SandboxStore(redis());
    const k = keysFor(redis());
    const [id, name] = [unique('sbx'), unique('gone')];
    await store.create(sandbox(id, name), 'c');
    // The delete's first step and its record removal, as if its replica died before the rest.
    await redis().hset(k.pendingSandboxes('default'), id, `delete ${Date.now() - 120_000} ${name}`);
    await redis().del(k.sandbox(id));
    expect(await store.idByName('default', name)).toBe(id);
    expect(await store.settlePending()).toMatchObject({ deleted: 1 });
    expect(await store.idByName('default', name)).toBeNull();
    expect(await redis().sismember(k.sandboxIndex(), id)).toBe(0);
    expect(await redis().sismember(k.workspaceSandboxes('default'), id)).toBe(0);
    expect(await redis().hget(k.pendingSandboxes('default'), id)).toBeNull();
  });

  it('a member whose record was lost (its shard failed over) leaves its pool: its place, its name, its index entry; one still being created stays', async () => {
    const store = new SandboxStore(redis());
    const pools = new PoolStore(redis(), store);
    const k = keysFor(redis());
    const pool = unique('pool');
    const def = await pools.set(pool, 3, { image: 'img' } as never);
    const member = async () => {
      const id = randomUUID();
      expect(await pools.createMember(sandbox(id, poolMemberName(pool, id), poolWorkspace(pool)), 'c', pool, def.generation)).toBe(1);
      return id;
    };
    const [kept, lost] = [await member(), await member()];
    // A create in its steps: reserved (its place and a pending entry), no record yet.
    const creating = randomUUID();
    await redis().sadd(k.workspaceSandboxes(poolWorkspace(pool)), creating);
    await redis().hset(k.pendingSandboxes(poolWorkspace(pool)), creating, `create ${Date.now()} ${poolMemberName(pool, creating)}`);
    // What a failover of the record's shard leaves: every key of the sandbox gone (they share
    // its hash tag), its place in the pool, its name and its index entry kept (other slots).
    await redis().del(k.sandbox(lost), k.events(lost));
    const seen = await pools.membership(pool);
    expect(seen.members.map((m) => m.sandbox.metadata!.id)).toEqual([kept]);
    expect(seen.lost).toEqual([lost]);
    expect(await pools.dropLost(pool, seen.lost)).toBe(1);
    expect(await pools.dropLost(pool, seen.lost)).toBe(0);
    expect((await redis().smembers(k.workspaceSandboxes(poolWorkspace(pool)))).sort()).toEqual([kept, creating].sort());
    expect(await redis().exists(k.sandboxName(poolWorkspace(pool), poolMemberName(pool, lost)))).toBe(0);
    expect(await redis().sismember(k.sandboxIndex(), lost)).toBe(0);
    expect(await redis().exists(k.sandboxName(poolWorkspace(pool), poolMemberName(pool, kept)))).toBe(1);
    // Not pending any more (its entry went, as a settled create's does) and still without a record: lost too.
    await redis().hdel(k.pendingSandboxes(poolWorkspace(pool)), creating);
    expect((await pools.membership(pool)).lost).toEqual([creating]);
  });

  it("two claims of one member into one workspace: the second finds it busy, so neither overwrites the other's pending entry and leaks its name", async () => {
    const store = new SandboxStore(redis());
    const k = keysFor(redis());
    const member = randomUUID();
    const [first, second] = [unique('claim-a'), unique('claim-b')];
    const at = await store.reserve(member, 'default', first, 0, 'claim p m0');
    await expect(store.reserve(member, 'default', second, 0, 'claim p m0')).rejects.toBeInstanceOf(MemberBusyError);
    expect(await redis().hget(k.pendingSandboxes('default'), member)).toBe(`claim ${at} ${first} p m0`);
    expect(await redis().exists(k.sandboxName('default', second))).toBe(0);
    // The first claim missed (another took the record): its release frees its name and the member.
    expect(await store.releaseReservation(member, 'default', first, `claim ${at} ${first} p m0`)).toBe(true);
    expect(await redis().exists(k.sandboxName('default', first))).toBe(0);
    await store.reserve(member, 'default', second, 0, 'claim p m0');
  });

  it('settles a claim whose replica died after claiming the record: the member leaves its pool', async () => {
    const store = new SandboxStore(redis());
    const pools = new PoolStore(redis(), store);
    const k = keysFor(redis());
    const pool = unique('pool');
    const def = await pools.set(pool, 1, { image: 'img' } as never);
    const id = unique('m');
    expect(await pools.createMember(sandbox(id, 'm0', poolWorkspace(pool)), 'c', pool, def.generation)).toBe(1);
    const name = unique('claimed');
    const at = await store.reserve(id, 'default', name, 0, `claim ${pool} m0`);
    expect(await redis().hget(k.pendingSandboxes('default'), id)).toBe(`claim ${at} ${name} ${pool} m0`);
    // The record claimed, as claim-record-2 leaves it, then the replica died.
    await redis().hdel(k.sandbox(id), 'pool', 'poolgen');
    await redis().hset(k.sandbox(id), 'ws', 'default', 'name', name, 'pb', Buffer.from(new Uint8Array(0)));
    await store.mutate(id, (cur) => ({ sandbox: { ...cur.sandbox, metadata: { ...cur.sandbox.metadata!, workspace: 'default', name } } }));
    expect(await store.settlePending(0)).toMatchObject({ finished: 1 });
    expect(await pools.members(pool)).toEqual([]);
    expect(await store.getByName(poolWorkspace(pool), 'm0')).toBeNull();
    expect((await store.getByName('default', name))?.sandbox.metadata?.id).toBe(id);
  });
});
