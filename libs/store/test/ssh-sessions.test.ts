// Against a real redis-server: SSH session tokens and the cross-replica connection caps.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { SshSessionStore, sshKeys, tokenDigest } from '@sandgate/store';
import { startRedis, type TestRedis } from '@sandgate/test-harness/redis';

let redis: TestRedis;
let client: Redis;

beforeAll(async () => {
  redis = await startRedis();
  client = redis.client();
});
afterAll(async () => redis.stop());

describe('SshSessionStore', () => {
  it('stores a session under the token digest, reads it back, and revokes it', async () => {
    const store = new SshSessionStore(client);
    const expiresAtMs = Date.now() + 60_000;
    await store.create('tok-1', { sandboxId: 'sbx', runStartedAtMs: 42, expiresAtMs, revoked: false, createdAtMs: 1 });
    expect(sshKeys.session('tok-1')).toBe(`sg:ssh:${tokenDigest('tok-1')}`);
    expect(await client.exists('sg:ssh:tok-1')).toBe(0); // the token itself never names a key
    expect(await store.get('tok-1')).toEqual({ sandboxId: 'sbx', runStartedAtMs: 42, expiresAtMs, revoked: false, createdAtMs: 1 });
    expect(await client.pttl(sshKeys.session('tok-1'))).toBeGreaterThan(60_000);
    expect(await store.revoke('tok-1')).toBe(true);
    expect((await store.get('tok-1'))?.revoked).toBe(true);
    expect(await store.revoke('unknown')).toBe(false);
    expect(await store.get('unknown')).toBeNull();
  });

  it('a session that never expires has no key TTL', async () => {
    const store = new SshSessionStore(client);
    await store.create('tok-forever', { sandboxId: 'sbx', runStartedAtMs: 1, expiresAtMs: 0, revoked: false, createdAtMs: 1 });
    expect(await client.pttl(sshKeys.session('tok-forever'))).toBe(-1);
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
    const t0 = Date.now();
    expect(await store.acquireForward(old, limits, t0)).toBe('ok');
    // Refreshed: still counted.
    await store.heartbeatForwards([old], t0 + 900);
    expect(await store.acquireForward({ token: 'other', sandboxId: 'stale', forwardId: 'f-new' }, limits, t0 + 1500)).toBe('sandbox-limit');
    // Not refreshed for longer than staleMs: pruned and no longer counted.
    expect(await store.acquireForward({ token: 'other', sandboxId: 'stale', forwardId: 'f-new' }, limits, t0 + 2000)).toBe('ok');
    // A heartbeat never resurrects a released (or pruned) forward.
    await store.heartbeatForwards([old], t0 + 2100);
    expect(await client.zscore(sshKeys.forwardsBySandbox('stale'), 'f-old')).toBeNull();
  });
});
