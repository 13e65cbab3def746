// Against a real redis-server: the CAS record store, the fenced ownership scripts, watching a
// sandbox (start + follow), and the cluster-wide facts.
import { describe, expect, it } from 'vitest';
import type { RedisClient } from '@sandgate/store';
import {
  ClusterCounter,
  ClusterCounters,
  OwnershipStore,
  ReplicaRegistry,
  SandboxFeed,
  SandboxLogStore,
  SandboxStore,
  keys,
  deleteLeftoverPeerSecret,
  derivePeerSecret,
  NO_PEER_SECRET,
  resolvePeerSecret,
  type FollowedEntry,
  type StreamFollower,
} from '@sandgate/store';
import { Code, GatewayError } from '@sandgate/core';
import type { Sandbox } from '@sandgate/protocols';
import { redisForFile } from '@sandgate/test-harness/redis-per-file';
import { sleep } from '@sandgate/test-harness/wait';

let client: RedisClient;
redisForFile((server) => (client = server.client()));

const sandbox = (id: string, name: string): Sandbox => ({
  metadata: { id, name, workspace: 'default', labels: { app: 'x' }, annotations: {}, created_at_ms: Date.now() },
  spec: { environment: {}, providers: [], command: ['sleep', '1'] },
  status: { conditions: [], phase: 1 },
});

describe('SandboxStore', () => {
  it('creates, reads back and enforces unique names', async () => {
    const store = new SandboxStore(client);
    await store.create(sandbox('id-1', 'one'), 'hash');
    const rec = await store.getByName('default', 'one');
    expect(rec?.sandbox.metadata?.id).toBe('id-1');
    expect(rec?.resourceVersion).toBe(0);
    expect(rec?.credentialHash).toBe('hash');
    await expect(store.create(sandbox('id-2', 'one'), 'h')).rejects.toMatchObject({ code: Code.ALREADY_EXISTS, message: "sandbox 'one' already exists" });
  });

  it('lets exactly one of many concurrent creates with one name win', async () => {
    const store = new SandboxStore(client);
    const results = await Promise.allSettled(Array.from({ length: 20 }, (_, i) => store.create(sandbox(`race-${i}`, 'race'), 'h')));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    expect((await store.list()).filter((r) => r.sandbox.metadata?.name === 'race')).toHaveLength(1);
  });

  it('bumps resource_version on every write and survives concurrent writers', async () => {
    const store = new SandboxStore(client);
    await store.create(sandbox('cas', 'cas'), 'h');
    await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        store.mutate('cas', (cur) => {
          cur.sandbox.metadata!.labels = { ...cur.sandbox.metadata!.labels, [`k${i}`]: 'v' };
          return { sandbox: cur.sandbox };
        }, 50),
      ),
    );
    const rec = await store.get('cas');
    expect(rec?.resourceVersion).toBe(10);
    expect(Object.keys(rec!.sandbox.metadata!.labels).filter((k) => k.startsWith('k'))).toHaveLength(10);
  });

  it('pages() yields every record in pages (for sweeps), the same set as list()', async () => {
    const store = new SandboxStore(client);
    for (let i = 0; i < 130; i++) await store.create(sandbox(`page-${i}`, `page-${i}`), 'h');
    const seen = new Set<string>();
    let pages = 0;
    for await (const page of store.pages(25)) {
      pages++;
      for (const rec of page) seen.add(rec.sandbox.metadata!.id!);
    }
    expect(pages).toBeGreaterThan(1);
    expect(seen).toEqual(new Set((await store.list()).map((r) => r.sandbox.metadata!.id!)));
    expect([...seen].filter((id) => id.startsWith('page-'))).toHaveLength(130);
  });

  it('returns the internal fields it wrote', async () => {
    const store = new SandboxStore(client);
    await store.create(sandbox('extra', 'extra'), 'h');
    const rec = await store.mutate('extra', (cur) => ({ sandbox: cur.sandbox, extra: { termfinal: 'inst-1', runstart: '42', compute: '{"pid":7}' } }));
    expect(rec).toMatchObject({ terminalFinal: 'inst-1', runStartedAtMs: 42, compute: { pid: 7 } });
    expect(await store.get('extra')).toMatchObject({ terminalFinal: 'inst-1', runStartedAtMs: 42, compute: { pid: 7 } });
  });

  it('appends every change of the sandbox to its event stream, and ends it on removal', async () => {
    const store = new SandboxStore(client);
    await store.create(sandbox('ev', 'ev'), 'h');
    await store.mutate('ev', (cur) => ({ sandbox: { ...cur.sandbox, status: { conditions: [], phase: 2 } } }));
    await store.mutate('ev', (cur) => ({ sandbox: cur.sandbox, extra: { runstart: '1' } })); // internal only: no event
    await store.remove('ev', 'default', 'ev');
    const entries = (await client.xrange(keys.events('ev'), '-', '+')) as [string, string[]][];
    expect(entries.map(([, f]) => (f[0] === 'deleted' ? 'deleted' : `rv${f[1]}`))).toEqual(['rv0', 'rv1', 'deleted']);
    expect(await client.pttl(keys.events('ev'))).toBeGreaterThan(0);
  });

  it('publishes an in-place edit by the mutator as an event', async () => {
    const store = new SandboxStore(client);
    await store.create(sandbox('inplace', 'inplace'), 'h');
    const rec = await store.mutate('inplace', (cur) => {
      cur.sandbox.status!.phase = 2;
      return { sandbox: cur.sandbox };
    });
    expect(rec?.resourceVersion).toBe(1);
    const entries = (await client.xrange(keys.events('inplace'), '-', '+')) as [string, string[]][];
    expect(entries.map(([, f]) => f[1])).toEqual(['0', '1']);
  });

  it('removes the record, its name and its owner keys', async () => {
    const store = new SandboxStore(client);
    await store.create(sandbox('gone', 'gone'), 'h');
    await new OwnershipStore(client, 5000).claim('gone', 'r1', 's1', 'i1');
    expect(await store.remove('gone', 'default', 'gone')).toBe(true);
    expect(await store.remove('gone', 'default', 'gone')).toBe(false);
    expect(await client.exists(keys.sandbox('gone'), keys.sandboxName('default', 'gone'), keys.owner('gone'), keys.fence('gone'))).toBe(0);
  });
});

describe('OwnershipStore', () => {
  it('fences: a replica that lost ownership can neither renew nor release the new owner record', async () => {
    const own = new OwnershipStore(client, 5000);
    const fenceA = await own.claim('sbx', 'replica-a', 'session-a', 'inst');
    const fenceB = await own.claim('sbx', 'replica-b', 'session-b', 'inst');
    expect(fenceB).toBeGreaterThan(fenceA);
    const holder = { replica: 'replica-a', session: 'session-a', instance: 'inst' };
    expect(await own.renew('sbx', fenceA, holder)).toBe(false);
    expect(await own.release('sbx', fenceA)).toBe(false);
    expect((await own.get('sbx'))?.replica).toBe('replica-b');
    expect(await own.renew('sbx', fenceB, { ...holder, replica: 'replica-b' })).toBe(true);
    expect(await own.release('sbx', fenceB)).toBe(true);
    expect(await own.get('sbx')).toBeNull();
  });

  it('a late renewal re-creates an expired record only if nobody claimed since', async () => {
    const own = new OwnershipStore(client, 150);
    const holder = { replica: 'r1', session: 's1', instance: 'i1' };
    const fence = await own.claim('late', 'r1', 's1', 'i1');
    await sleep(300); // starved past the TTL
    expect(await own.get('late')).toBeNull();
    expect(await own.renew('late', fence, holder)).toBe(true);
    expect(await own.get('late')).toMatchObject({ replica: 'r1', fence });
    // Expired and claimed by someone else meanwhile: superseded, and the new record stays.
    await sleep(300);
    const newer = await own.claim('late', 'r2', 's2', 'i1');
    expect(await own.renew('late', fence, holder)).toBe(false);
    expect(await own.get('late')).toMatchObject({ replica: 'r2', fence: newer });
    // Revoked (a new fence, no owner): not re-created.
    const again = await own.claim('late', 'r1', 's3', 'i1');
    await own.revoke('late');
    expect(await own.renew('late', again, holder)).toBe(false);
    expect(await own.get('late')).toBeNull();
  });

  it('renewMany: the same fenced rules for a whole replica at once, in chunks', async () => {
    const own = new OwnershipStore(client, 150);
    const entries: Parameters<OwnershipStore['renewMany']>[0] = [];
    for (let i = 0; i < 1203; i++) {
      const id = `many-${i}`;
      entries.push({ sandboxId: id, fence: await own.claim(id, 'r1', `s${i}`, 'i'), holder: { replica: 'r1', session: `s${i}`, instance: 'i' } });
    }
    await own.claim('many-7', 'r2', 'newer', 'i'); // superseded
    await own.revoke('many-1000'); // revoked
    await sleep(300); // every record of r1 expired (the replica was starved)
    const results = await own.renewMany(entries);
    expect(results).toHaveLength(1203);
    expect(results.filter((ok) => !ok)).toHaveLength(2);
    expect(results[7]).toBe(false);
    expect(results[1000]).toBe(false);
    expect(await own.get('many-0')).toMatchObject({ replica: 'r1', session: 's0' }); // re-created
    expect(await own.get('many-1202')).toMatchObject({ replica: 'r1' });
    expect(await own.get('many-1000')).toBeNull();
  });

  it('expires when not renewed', async () => {
    const own = new OwnershipStore(client, 200);
    await own.claim('short', 'r', 's', 'i');
    await sleep(400);
    expect(await own.get('short')).toBeNull();
  });

  it('replica liveness keys expire', async () => {
    const reg = new ReplicaRegistry(client, 200);
    await reg.heartbeat({ replicaId: 'r9', peerAddress: '127.0.0.1:1', grpcAddress: '127.0.0.1:2', pid: 1, startedAtMs: 0 });
    expect((await reg.get('r9'))?.peerAddress).toBe('127.0.0.1:1');
    await sleep(400);
    expect(await reg.get('r9')).toBeNull();
  });

  it('uses EVAL when the script cache was flushed (Redis restarted)', async () => {
    await client.script('FLUSH');
    const own = new OwnershipStore(client, 5000);
    expect(await own.claim('flushed', 'r', 's', 'i')).toBeGreaterThan(0);
  });
});

const line = (message: string) => ({ timestamp_ms: 1, level: 'INFO', target: 't', source: 'sandbox', message });
const describeEntry = (e: FollowedEntry) => (e.kind === 'log' ? `log:${e.line.message}` : e.event.kind === 'deleted' ? 'deleted' : `rv${e.event.rv}`);

/** Reads until `n` entries came (a blocking read may return them in more than one batch). */
async function take(follower: StreamFollower, n: number): Promise<string[]> {
  const out: string[] = [];
  while (out.length < n) {
    const batch = await follower.next(2000);
    if (batch.length === 0) throw new Error(`only ${out.length} of ${n} entries came: ${out.join(', ')}`);
    out.push(...batch.map(describeEntry));
  }
  return out;
}

describe('SandboxFeed', () => {
  it('starts with the snapshot and log tail, then follows what comes after, to the end', async () => {
    const store = new SandboxStore(client);
    const logs = new SandboxLogStore(client);
    const feed = new SandboxFeed(client);
    expect(await feed.start('nope', 10)).toBeNull();
    await store.create(sandbox('fd', 'fd'), 'h');
    for (const m of ['a', 'b', 'c']) await logs.append('fd', line(m));
    const start = (await feed.start('fd', 2))!;
    expect(start.record.resourceVersion).toBe(0);
    expect(start.logTail.map((l) => l.message)).toEqual(['b', 'c']);

    const follower = feed.follow('fd', start.from, { logs: true });
    const statusOnly = feed.follow('fd', start.from, { logs: false });
    try {
      await store.mutate('fd', (cur) => ({ sandbox: { ...cur.sandbox, status: { conditions: [], phase: 2 } } }));
      await logs.append('fd', line('d'));
      expect((await take(follower, 2)).sort()).toEqual(['log:d', 'rv1']);
      await store.remove('fd', 'default', 'fd');
      expect(await take(follower, 1)).toEqual(['deleted']);
      expect(await take(statusOnly, 2)).toEqual(['rv1', 'deleted']);
    } finally {
      follower.close();
      statusOnly.close();
    }
  });

  it('follows an empty log from its start', async () => {
    const feed = new SandboxFeed(client);
    await new SandboxStore(client).create(sandbox('quiet', 'quiet'), 'h');
    const start = (await feed.start('quiet', 10))!;
    expect(start.logTail).toEqual([]);
    const follower = feed.follow('quiet', start.from, { logs: true });
    try {
      await new SandboxLogStore(client).append('quiet', line('first'));
      expect(await take(follower, 1)).toEqual(['log:first']);
    } finally {
      follower.close();
    }
  });

  it('a tail of 0 lines is empty, and following starts after the last line', async () => {
    const feed = new SandboxFeed(client);
    await new SandboxStore(client).create(sandbox('no-tail', 'no-tail'), 'h');
    await new SandboxLogStore(client).append('no-tail', line('old'));
    expect(await new SandboxLogStore(client).tail('no-tail', 0)).toEqual({ lines: [], total: 1 });
    const start = (await feed.start('no-tail', 0))!;
    expect(start.logTail).toEqual([]);
    const follower = feed.follow('no-tail', start.from, { logs: true });
    try {
      await new SandboxLogStore(client).append('no-tail', line('new'));
      expect(await take(follower, 1)).toEqual(['log:new']);
    } finally {
      follower.close();
    }
  });

  it('close() ends a pending blocking read', async () => {
    const feed = new SandboxFeed(client);
    const follower = feed.follow('idle', { events: '0-0', logs: '0-0' }, { logs: true });
    const pending = follower.next(30_000);
    setTimeout(() => follower.close(), 100);
    await expect(pending).rejects.toThrow();
  });
});

describe('cluster-wide facts', () => {
  it('counts across callers', async () => {
    const counters = new ClusterCounters(client);
    expect(await counters.get(ClusterCounter.execBackstopKills)).toBe(0);
    await counters.incr(ClusterCounter.execBackstopKills, 3);
    await new ClusterCounters(client).incr(ClusterCounter.execBackstopKills);
    expect(await counters.get(ClusterCounter.execBackstopKills)).toBe(4);
    expect(await client.get('sg:metrics:exec_backstop_kills')).toBe('4');
  });

  it('a peer secret an older version left in Redis (in clear) is deleted', async () => {
    await client.set('sg:peer-secret', 'left-by-an-older-version');
    expect(await deleteLeftoverPeerSecret(client)).toBe(true);
    expect(await client.exists('sg:peer-secret')).toBe(0);
    expect(await deleteLeftoverPeerSecret(client)).toBe(false);
  });
});

describe('peer secret', () => {
  it('is the configured one, else derived from the Redis password, never from Redis', () => {
    expect(resolvePeerSecret('configured', 'redis://sandgate:pw@127.0.0.1:6379')).toBe('configured');
    const derived = resolvePeerSecret('', 'redis://sandgate:pw@127.0.0.1:6379');
    // Same password, same secret (replicas share the URL); user, host and scheme do not matter.
    expect(resolvePeerSecret('', 'rediss://other:pw@10.0.0.1:6380/2')).toBe(derived);
    expect(derived).toBe(derivePeerSecret('pw'));
    expect(derived).not.toContain('pw');
    expect(Buffer.from(derived, 'base64url')).toHaveLength(32);
    expect(resolvePeerSecret('', 'redis://:p%40ss@h:1')).toBe(derivePeerSecret('p@ss'));
    expect(resolvePeerSecret('', 'redis://sandgate:pw2@127.0.0.1:6379')).not.toBe(derived);
    // Behind Sentinels: the data nodes' password, never the Sentinels' own.
    expect(resolvePeerSecret('', 'redis+sentinel://sandgate:pw@s1:26379,s2:26379/mymaster?sentinelPassword=other')).toBe(derived);
  });

  it('refuses to exist without a secret or a Redis password, saying what to set', () => {
    for (const url of ['redis://127.0.0.1:6379', 'redis://sandgate@127.0.0.1:6379', 'not a url']) {
      expect(() => resolvePeerSecret('', url)).toThrow(NO_PEER_SECRET);
    }
    expect(NO_PEER_SECRET).toMatch(/SANDGATE_PEER_SECRET/);
    expect(NO_PEER_SECRET).toMatch(/password/);
  });
});

describe('errors', () => {
  it('GatewayError carries a code', () => expect(new GatewayError(Code.NOT_FOUND, 'x').code).toBe(5));
});
