// OrphanQuarantine on a real redis-server: first sightings are kept across sweeps, and released
// when an id is no longer sighted (its compute went, or its record came back).
import { describe, expect, it } from 'vitest';
import type { RedisClient } from '@sandgate/store';
import { keys, OrphanQuarantine } from '@sandgate/store';
import { redisForFile } from '@sandgate/test-harness/redis-per-file';

let client: RedisClient;
redisForFile((server) => (client = server.client()));

describe('OrphanQuarantine', () => {
  it('keeps the first sighting across sweeps and releases what is no longer sighted', async () => {
    const q = new OrphanQuarantine(client);
    expect([...(await q.sight(['a', 'b'], 1000))]).toEqual([['a', 1000], ['b', 1000]]);
    // Seen again later: still first seen at 1000; a new one starts its own clock.
    expect([...(await q.sight(['a', 'b', 'c'], 5000))]).toEqual([['a', 1000], ['b', 1000], ['c', 5000]]);
    // b not sighted (deleted, or its record is back): released.
    expect([...(await q.sight(['a', 'c'], 9000))]).toEqual([['a', 1000], ['c', 5000]]);
    expect([...(await q.list())]).toEqual([['a', 1000], ['c', 5000]]);
    // b seen again: a fresh clock, not its old one.
    expect((await q.sight(['b'], 12000)).get('b')).toBe(12000);
    // A sweep with no orphans empties the quarantine (and leaves no key).
    expect((await q.sight([], 13000)).size).toBe(0);
    expect(await client.exists(keys.orphans())).toBe(0);
  });
});
