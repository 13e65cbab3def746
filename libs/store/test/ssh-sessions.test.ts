// Against a real redis-server: SSH session tokens and the cross-replica connection caps.
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { RedisClient } from '@sandgate/store';
import { SshSessionStore, keys, tokenDigest } from '@sandgate/store';
import { redisForFile } from '@sandgate/test-harness/redis-per-file';
import { sleep } from '@sandgate/test-harness/wait';

let client: RedisClient;
redisForFile((server) => (client = server.client()));
afterEach(() => vi.restoreAllMocks());

describe('SshSessionStore', () => {
  it('stores a session under the token digest, reads it back, and revokes it', async () => {
    const store = new SshSessionStore(client);
    await client.hset(keys.sandbox('sbx'), 'rv', '0'); // a session is stored only while its sandbox's record exists
    const expiresAtMs = Date.now() + 60_000;
    await store.create('tok-1', { sandboxId: 'sbx', runStartedAtMs: 42, expiresAtMs, revoked: false, createdAtMs: 1 });
    expect(keys.sshSession(tokenDigest('tok-1'))).toBe(`sg:ssh:${tokenDigest('tok-1')}`);
    expect(await client.exists('sg:ssh:tok-1')).toBe(0); // the token itself never names a key
    expect(await store.get('tok-1')).toEqual({ sandboxId: 'sbx', runStartedAtMs: 42, expiresAtMs, revoked: false, createdAtMs: 1 });
    expect(await client.pttl(keys.sshSession(tokenDigest('tok-1')))).toBeGreaterThan(60_000);
    expect(await store.revoke('tok-1')).toBe(true);
    expect((await store.get('tok-1'))?.revoked).toBe(true);
    expect(await store.revoke('unknown')).toBe(false);
    expect(await store.get('unknown')).toBeNull();
  });

  it('a session that never expires has no key TTL', async () => {
    const store = new SshSessionStore(client);
    await client.hset(keys.sandbox('sbx'), 'rv', '0');
    await store.create('tok-forever', { sandboxId: 'sbx', runStartedAtMs: 1, expiresAtMs: 0, revoked: false, createdAtMs: 1 });
    expect(await client.pttl(keys.sshSession(tokenDigest('tok-forever')))).toBe(-1);
  });

  it('caps forwards per token and per sandbox, counting across stores (replicas)', async () => {
    const a = new SshSessionStore(client);
    const b = new SshSessionStore(client);
    const limits = { perToken: 3, perSandbox: 4 };
    const slot = (token: string, n: number) => ({ token, sandboxId: 'capped', forwardId: `${token}-${n}` });
    expect(await a.acquireForward(slot('t1', 1), limits)).toBe('ok');
    expect(await b.acquireForward(slot('t1', 2), limits)).toBe('ok');
    expect(await a.acquireForward(slot('t1', 3), limits)).toBe('ok');
    expect(await b.acquireForward(slot('t1', 4), limits)).toBe('token-limit');
    expect(await a.acquireForward(slot('t2', 1), limits)).toBe('ok');
    expect(await b.acquireForward(slot('t2', 2), limits)).toBe('sandbox-limit');
    expect(await a.liveForwards('capped')).toBe(4);
    await a.releaseForward(slot('t1', 1));
    expect(await b.acquireForward(slot('t2', 2), limits)).toBe('ok');
  });

  it('forgets forwards whose replica stopped heartbeating them (crash safety)', async () => {
    const store = new SshSessionStore(client, { staleMs: 1000 });
    const limits = { perToken: 1, perSandbox: 1 };
    const old = { token: 'crashed', sandboxId: 'stale', forwardId: 'f-old' };
    const other = { token: 'other', sandboxId: 'stale', forwardId: 'f-new' };
    expect(await store.acquireForward(old, limits)).toBe('ok');
    await sleep(600);
    // Refreshed: still counted.
    await store.heartbeatForwards([old]);
    await sleep(600);
    expect(await store.acquireForward(other, limits)).toBe('sandbox-limit');
    expect(await store.liveForwards('stale')).toBe(1);
    // Not refreshed for longer than staleMs: pruned and no longer counted.
    await sleep(1100);
    expect(await store.liveForwards('stale')).toBe(0);
    expect(await store.acquireForward(other, limits)).toBe('ok');
    // A heartbeat never resurrects a released (or pruned) forward.
    await store.heartbeatForwards([old]);
    expect(await client.zscore(keys.forwardsBySandbox('stale'), 'f-old')).toBeNull();
  });

  it("scores heartbeats on Redis' clock: a replica whose clock is behind still counts", async () => {
    const behind = new SshSessionStore(client, { staleMs: 5000 });
    const onTime = new SshSessionStore(client, { staleMs: 5000 });
    const limits = { perToken: 1, perSandbox: 10 };
    const realNow = Date.now();
    // The first replica's clock is a minute behind: its forwards must not look stale to the others.
    vi.spyOn(Date, 'now').mockReturnValue(realNow - 60_000);
    const slot = { token: 'skew', sandboxId: 'skewed', forwardId: 'f-behind' };
    expect(await behind.acquireForward(slot, limits)).toBe('ok');
    await behind.heartbeatForwards([slot]);
    vi.restoreAllMocks();
    expect(await onTime.acquireForward({ token: 'skew', sandboxId: 'skewed', forwardId: 'f-on-time' }, limits)).toBe('token-limit');
    expect(await onTime.liveForwards('skewed')).toBe(1);
  });
});
