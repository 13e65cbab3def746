// Pool definitions on a real Redis. The auto-match flag is stored and each SetPool states it
// afresh. A pool whose members cannot start backs off (note-pool-failure-1, clear-pool-failures-1,
// set-pool-1): the wait doubles per consecutive failure up to its cap, refills side by side count
// their round once, a failure of a template that was replaced meanwhile does not count, a member
// that got Ready clears it all,
// and a new template starts afresh while a new size alone does not.
import { describe, expect, it } from 'vitest';
import type { RedisClient } from '@sandgate/store';
import { PoolStore, SandboxStore } from '@sandgate/store';
import { redisForFile } from '@sandgate/test-harness/redis-per-file';

let client: RedisClient;
redisForFile((server) => (client = server.client()));
const store = () => new PoolStore(client, new SandboxStore(client));
const template = { image: 'nope:1', resources: '', policy: '' };

describe('warm pools: back-off of members that cannot start', () => {
  it('doubles the wait per failure in a row, up to the cap, and says why', async () => {
    const pools = store();
    const pool = await pools.set('bo1', 2, template);
    expect(pool).toMatchObject({ failures: 0, retryAtMs: 0, lastError: '' });
    const delays: number[] = [];
    for (let i = 0; i < 6; i++) {
      const before = Date.now();
      delays.push((await pools.noteFailure('bo1', pool.generation, i, `no such image (${i})`, 1_000, 10_000))!);
      const now = (await pools.get('bo1'))!;
      expect(now.failures).toBe(i + 1);
      expect(now.lastError).toBe(`no such image (${i})`);
      expect(now.retryAtMs).toBeGreaterThanOrEqual(before + delays[i]!);
      expect(now.retryAtMs).toBeLessThanOrEqual(Date.now() + delays[i]!);
    }
    expect(delays).toEqual([1_000, 2_000, 4_000, 8_000, 10_000, 10_000]);
  });

  it('a member that got Ready clears the failures; a stale generation neither counts nor clears', async () => {
    const pools = store();
    const pool = await pools.set('bo2', 1, template);
    await pools.noteFailure('bo2', pool.generation, 0, 'boom', 1_000, 10_000);
    expect(await pools.noteFailure('bo2', pool.generation - 1, 1, 'old', 1_000, 10_000)).toBeNull();
    expect(await pools.clearFailures('bo2', pool.generation - 1)).toBe(false);
    expect((await pools.get('bo2'))!.failures).toBe(1);
    expect(await pools.clearFailures('bo2', pool.generation)).toBe(true);
    expect(await pools.get('bo2')).toMatchObject({ failures: 0, retryAtMs: 0, lastError: '' });
    expect(await pools.clearFailures('bo2', pool.generation)).toBe(false);
    expect(await pools.noteFailure('gone', 1, 0, 'x', 1_000, 10_000)).toBeNull();
  });

  it('counts a round once: refills that read the pool before the first of them recorded its failure add nothing', async () => {
    const pools = store();
    const pool = await pools.set('bo4', 2, template);
    // Two refills read the pool (no failures yet), both launched members, both failed.
    expect(await pools.noteFailure('bo4', pool.generation, 0, 'first refill', 1_000, 10_000)).toBe(1_000);
    const recorded = (await pools.get('bo4'))!;
    expect(await pools.noteFailure('bo4', pool.generation, 0, 'second refill', 1_000, 10_000)).toBeNull();
    expect(await pools.get('bo4')).toMatchObject({ failures: 1, lastError: 'first refill', retryAtMs: recorded.retryAtMs });
    // The next round's refill read the count the first one left: its failure counts, and doubles the wait.
    expect(await pools.noteFailure('bo4', pool.generation, 1, 'next round', 1_000, 10_000)).toBe(2_000);
    expect((await pools.get('bo4'))!.failures).toBe(2);
    // A member got Ready (the failures cleared): the failure of a refill that read the count before
    // that does not count; the next round's counts from one.
    expect(await pools.clearFailures('bo4', pool.generation)).toBe(true);
    expect(await pools.noteFailure('bo4', pool.generation, 2, 'read before the clear', 1_000, 10_000)).toBeNull();
    expect(await pools.noteFailure('bo4', pool.generation, 0, 'after the clear', 1_000, 10_000)).toBe(1_000);
  });

  it('a new size keeps the back-off; a new template starts afresh', async () => {
    const pools = store();
    const pool = await pools.set('bo3', 1, template);
    await pools.noteFailure('bo3', pool.generation, 0, 'boom', 60_000, 600_000);
    const resized = await pools.set('bo3', 3, template);
    expect(resized).toMatchObject({ generation: pool.generation, failures: 1, lastError: 'boom' });
    const fixed = await pools.set('bo3', 3, { ...template, image: '' });
    expect(fixed).toMatchObject({ generation: pool.generation + 1, failures: 0, retryAtMs: 0, lastError: '' });
  });
});

describe('warm pools: the auto-match flag', () => {
  it('is stored, listed, and each set states it afresh (left out: off) without a new generation', async () => {
    const pools = store();
    const on = await pools.set('am1', 1, template, true);
    expect(on.autoMatch).toBe(true);
    expect((await pools.list()).find((p) => p.name === 'am1')?.autoMatch).toBe(true);
    const off = await pools.set('am1', 1, template);
    expect(off).toMatchObject({ autoMatch: false, generation: on.generation });
  });
});
