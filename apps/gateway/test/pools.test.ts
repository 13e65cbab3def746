// Warm pools on a real Redis (PoolService + PoolStore). The admin calls: only gateway admins may
// set, list or delete a pool, and a refused call writes nothing; settings are checked; a template
// change is a new generation, a size change is not. Claims, with member records written straight
// into Redis (no compute): two claims of one member never both get it; a claim whose replication
// cannot be confirmed is undone, so the caller's retry finds its name free. Claims, refills and the
// isolation of members run end to end in test/e2e/pools.test.ts and under the chaos suite.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RedisClient } from '@sandgate/store';
import { randomUUID } from 'node:crypto';
import { Code, GatewayError, LOCAL_DEV_PRINCIPAL, Phase, poolMemberName, poolWorkspace, type LifecycleStatus, type Principal } from '@sandgate/core';
import { encodeStruct, type CreateSandboxRequest, type Sandbox } from '@sandgate/protocols';
import { keys, PoolStore, SandboxStore, type ReplicationGuard, type StoredSandbox } from '@sandgate/store';
import { createLogger, Metrics } from '@sandgate/telemetry';
import { startRedis, type TestRedis } from '@sandgate/test-harness/redis';
import { PoolService } from '../src/pools/pool-service.ts';
import type { LifecycleService } from '../src/sandboxes/lifecycle-service.ts';

let server: TestRedis;
let redis: RedisClient;
let pools: PoolService;
const refills: string[] = [];

const admin: Principal = { ...LOCAL_DEV_PRINCIPAL, admin: true };
const member: Principal = { ...LOCAL_DEV_PRINCIPAL, subject: 'token:member', admin: false, workspace: 'team-a' };

beforeAll(async () => {
  server = await startRedis();
  redis = server.client();
  pools = new PoolService({
    pools: new PoolStore(redis, new SandboxStore(redis)),
    // The admin calls start nothing themselves: the refill job does (recorded here, not run).
    lifecycle: {} as LifecycleService,
    scheduler: { poolRefill: async (name: string) => void refills.push(name), deleteSandbox: async () => undefined },
    startMain: async () => false,
    defaultImage: 'host',
    log: createLogger({ component: 'test' }, 'error'),
    metrics: new Metrics(),
  });
});

afterAll(async () => {
  redis?.disconnect();
  await server?.stop();
});

async function refusal(p: Promise<unknown>): Promise<GatewayError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err, 'the call was accepted').toBeInstanceOf(GatewayError);
  return err as GatewayError;
}

describe('warm pools: the admin calls', () => {
  it('refuses every call to a caller who is not a gateway admin, and writes nothing', async () => {
    for (const call of [pools.set({ name: 'p1', size: 1 }, member), pools.list(member), pools.delete('p1', member)]) {
      const err = await refusal(call);
      expect(err.code).toBe(Code.PERMISSION_DENIED);
      expect(err.message).toMatch(/requires a gateway admin/);
    }
    expect(await redis.exists(keys.pool('p1'), keys.poolIndex())).toBe(0);
    expect(refills).toEqual([]);
  });

  it('checks the settings, naming what is wrong', async () => {
    const cases: [object, RegExp][] = [
      [{ size: 1 }, /name is required/],
      [{ name: 'Bad_Name', size: 1 }, /pool name 'Bad_Name' is invalid/],
      [{ name: 'p1', size: 65 }, /size 65 is out of range: 0 to 64/],
      [{ name: 'p1', size: 1, resources: encodeStruct({ limits: { memory: 'lots' } }) }, /resources/],
      [{ name: 'p1', size: 1, resources: encodeStruct({ limits: { 'ephemeral-storage': '1Gi' } }) }, /ephemeral-storage is not supported for a pool/],
      [{ name: 'p1', size: 1, policy: Buffer.from([0xff, 0xff]) }, /policy/],
    ];
    for (const [req, message] of cases) {
      const err = await refusal(pools.set(req, admin));
      expect(err.code, JSON.stringify(req)).toBe(Code.INVALID_ARGUMENT);
      expect(err.message).toMatch(message);
    }
    expect(await redis.exists(keys.pool('p1'))).toBe(0);
  });

  it('a template change is a new generation; a size change is not; delete, then NOT_FOUND', async () => {
    const first = await pools.set({ name: 'p1', size: 2 }, admin);
    expect(first).toMatchObject({ name: 'p1', size: 2, image: 'host', generation: 1, ready: 0, starting: 0 });
    expect((await pools.set({ name: 'p1', size: 3 }, admin)).generation).toBe(1);
    const memory = encodeStruct({ limits: { memory: '256Mi' } });
    expect((await pools.set({ name: 'p1', size: 3, resources: memory }, admin)).generation).toBe(2);
    expect((await pools.set({ name: 'p1', size: 3, resources: memory }, admin)).generation).toBe(2);
    expect((await pools.list(admin)).pools.map((p) => [p.name, p.size, p.generation])).toEqual([['p1', 3, 2]]);
    expect(refills).toEqual(['p1', 'p1', 'p1', 'p1']);
    expect(await pools.delete('p1', admin)).toEqual({ deleted: true });
    expect((await pools.list(admin)).pools).toEqual([]);
    // Its name stays in the index until the refill job has retired its members (none here).
    expect(await redis.sismember(keys.poolIndex(), 'p1')).toBe(1);
    expect((await refusal(pools.delete('p1', admin))).code).toBe(Code.NOT_FOUND);
  });
});

describe('warm pools: claims', () => {
  const started: string[] = [];
  const deleted: string[] = [];
  let replicationFails = false;
  let store: SandboxStore;
  let poolStore: PoolStore;
  let claims: PoolService;
  const metrics = new Metrics();

  beforeAll(() => {
    store = new SandboxStore(redis);
    poolStore = new PoolStore(redis, store);
    claims = new PoolService({
      pools: poolStore,
      lifecycle: {
        note: () => undefined,
        // As LifecycleService.transition: the change applied with the store's compare-and-swap.
        transition: (id: string, change: (status: LifecycleStatus, rec: StoredSandbox) => LifecycleStatus | null) =>
          store.mutate(id, (cur) => {
            const next = change(cur.sandbox.status as LifecycleStatus, cur);
            return next ? { sandbox: { ...cur.sandbox, status: { ...cur.sandbox.status!, ...next } as Sandbox['status'] } } : null;
          }),
        finishDelete: async (id: string) => {
          deleted.push(id);
          const rec = await store.get(id);
          return rec ? store.remove(id, rec.sandbox.metadata!.workspace!, rec.sandbox.metadata!.name!) : false;
        },
      } as unknown as LifecycleService,
      scheduler: { poolRefill: async () => undefined, deleteSandbox: async () => undefined },
      startMain: async (id: string) => {
        started.push(id);
        return true;
      },
      defaultImage: 'host',
      replication: {
        confirm: async (what: string) => {
          if (replicationFails) throw new GatewayError(Code.UNAVAILABLE, `${what} reached 0 of the 1 Redis replica(s) required`);
        },
      } as ReplicationGuard,
      log: createLogger({ component: 'test' }, 'error'),
      metrics,
    });
  });

  /** A Ready member of `pool`'s current generation, as the refill job would have left it. */
  async function member(pool: string): Promise<string> {
    const def = (await poolStore.get(pool))!;
    const id = randomUUID();
    const name = poolMemberName(pool, id);
    const sandbox: Sandbox = {
      metadata: { id, name, created_at_ms: Date.now(), labels: {}, annotations: {}, resource_version: 0, workspace: poolWorkspace(pool) },
      spec: { command: ['/bin/bash', '-l'], tty: true, environment: {}, providers: [], template: { image: 'host', labels: {}, annotations: {}, environment: {} } },
      status: { sandbox_name: name, phase: Phase.READY, conditions: [] },
    };
    expect(await poolStore.createMember(sandbox, 'hash', pool, def.generation)).toBe(1);
    return id;
  }

  const request = (name: string): CreateSandboxRequest & { spec: NonNullable<CreateSandboxRequest['spec']> } => ({
    name,
    labels: { team: 'x' },
    annotations: { 'sandgate.dev/pool': 'claims' },
    spec: { command: ['sleep', 'infinity'], environment: { A: '1' }, providers: [] },
  });

  it('a refill takes a member whose record was lost (its Redis Cluster shard failed over) out of the pool, so that its place is refilled', async () => {
    await claims.set({ name: 'lost', size: 1 }, admin);
    const id = await member('lost');
    await claims.refill('lost');
    expect(await redis.smembers(keys.workspaceSandboxes(poolWorkspace('lost')))).toEqual([id]);
    // The record's shard lost it; the pool's set (another slot) keeps its place: the pool looks full.
    await redis.del(keys.sandbox(id));
    // Backing off (a Ready member would have cleared it in the refill above), so that this refill
    // launches nothing (there is no compute here): it only tidies.
    const lostPool = (await poolStore.get('lost'))!;
    await poolStore.noteFailure('lost', lostPool.generation, lostPool.failures, 'test: launch nothing', 60_000, 60_000);
    await claims.refill('lost');
    expect(await redis.smembers(keys.workspaceSandboxes(poolWorkspace('lost')))).toEqual([]);
    expect(await redis.exists(keys.sandboxName(poolWorkspace('lost'), poolMemberName('lost', id)))).toBe(0);
    expect(metrics.get('sandgate_pool_members_lost_total')).toBe(1);
  });

  it('two refills side by side that both find a member in Error delete it once and count it once', async () => {
    await claims.set({ name: 'failing', size: 1 }, admin);
    const id = await member('failing');
    await store.mutate(id, (cur) => ({ sandbox: { ...cur.sandbox, status: { ...cur.sandbox.status!, phase: Phase.ERROR } } }));
    const before = metrics.get('sandgate_pool_member_failures_total') ?? 0;
    deleted.length = 0;
    // Both read the member in Error before either deletes it (the first read is the pool's).
    await Promise.all([claims.refill('failing'), claims.refill('failing')]);
    expect(await redis.exists(keys.sandbox(id))).toBe(0);
    expect(new Set(deleted)).toEqual(new Set([id]));
    deleted.length = 0;
    expect(metrics.get('sandgate_pool_member_failures_total')).toBe(before + 1);
    // The round was recorded once too: one failure, backing off (nothing launched: no compute here).
    const after = (await poolStore.get('failing'))!;
    expect(after.failures).toBe(1);
    expect(after.retryAtMs).toBeGreaterThan(Date.now());
  });

  it('two claims of the one member: one gets it, the other finds the pool empty', async () => {
    await claims.set({ name: 'claims', size: 2 }, admin);
    const id = await member('claims');
    const pool = (await poolStore.get('claims'))!;
    const [a, b] = await Promise.all([claims.claim(request('one'), pool, 'default', 0), claims.claim(request('two'), pool, 'default', 0)]);
    const got = [a, b].filter((x) => x !== null);
    expect(got).toHaveLength(1);
    expect(got[0]!.metadata!.id).toBe(id);
    expect(started).toEqual([id]);
    const rec = (await store.get(id))!;
    expect(rec.pool).toBeNull();
    expect(rec.mainPending).toBe(true);
    expect(rec.claimed).toBe(true);
    expect(rec.sandbox.metadata).toMatchObject({ workspace: 'default', labels: { team: 'x' } });
    expect(rec.sandbox.spec).toMatchObject({ command: ['sleep', 'infinity'], environment: { A: '1' } });
    expect(await redis.smembers(keys.workspaceSandboxes(poolWorkspace('claims')))).toEqual([]);
    expect(await redis.get(keys.sandboxName('default', got[0]!.metadata!.name!))).toBe(id);
  });

  it('a claim whose replication cannot be confirmed is refused UNAVAILABLE and undone', async () => {
    const id = await member('claims');
    const pool = (await poolStore.get('claims'))!;
    replicationFails = true;
    try {
      const err = await refusal(claims.claim(request('refused'), pool, 'default', 0));
      expect(err.code).toBe(Code.UNAVAILABLE);
    } finally {
      replicationFails = false;
    }
    expect(deleted).toEqual([id]);
    expect(await store.get(id)).toBeNull();
    expect(await redis.get(keys.sandboxName('default', 'refused'))).toBeNull();
    // The retry of the same name is served (cold here: the only member went with the undo).
    expect(await claims.claim(request('refused'), pool, 'default', 0)).toBeNull();
  });
});
