// The warm-pool admin calls on a real Redis (PoolService + PoolStore): only gateway admins may
// set, list or delete a pool, and a refused call writes nothing; settings are checked; a template
// change is a new generation, a size change is not. Claims, refills and the isolation of members
// run end to end in test/e2e/pools.test.ts and under the chaos suite.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { Code, GatewayError, LOCAL_DEV_PRINCIPAL, type Principal } from '@sandgate/core';
import { encodeStruct } from '@sandgate/protocols';
import { keys, PoolStore, SandboxStore } from '@sandgate/store';
import { createLogger, Metrics } from '@sandgate/telemetry';
import { startRedis, type TestRedis } from '@sandgate/test-harness/redis';
import { PoolService } from '../src/pools/pool-service.ts';
import type { LifecycleService } from '../src/sandboxes/lifecycle-service.ts';

let server: TestRedis;
let redis: Redis;
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
