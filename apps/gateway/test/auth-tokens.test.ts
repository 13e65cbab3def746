// API token verification on a real Redis, with the clock in the test's hand: a verified token is
// remembered for at most POSITIVE_CACHE_MS (so a revocation reaches every replica within it),
// refusals are never remembered (a new token works at once), and expiry is honoured even from the
// cache.
import { describe, expect, it } from 'vitest';
import type { RedisClient } from '@sandgate/store';
import { Code, GatewayError } from '@sandgate/core';
import { TokenStore } from '@sandgate/store';
import { redisForFile } from '@sandgate/test-harness/redis-per-file';
import { ApiTokenAuthenticator, POSITIVE_CACHE_MS } from '../src/auth/api-tokens.ts';

let redis: RedisClient;
redisForFile((server) => (redis = server.client()));

async function refused(p: Promise<unknown>): Promise<string> {
  const err = await p.then(() => null, (e: unknown) => e);
  expect(err).toBeInstanceOf(GatewayError);
  expect((err as GatewayError).code).toBe(Code.UNAUTHENTICATED);
  return (err as GatewayError).message;
}

describe('API token verification', () => {
  it('a revoked token is refused once the positive cache entry is older than POSITIVE_CACHE_MS', async () => {
    expect(POSITIVE_CACHE_MS).toBeLessThanOrEqual(500);
    let now = Date.now();
    const store = new TokenStore(redis);
    const auth = new ApiTokenAuthenticator(store, () => now);
    const { token, record } = await store.create({ workspace: 'w', role: 'admin', name: 'n' });
    expect(await auth.verify(token)).toMatchObject({ subject: `token:${record.id}`, admin: true, workspace: 'w', provider: 'api_token' });
    expect(await store.revoke(record.id)).toBe(true);
    now += POSITIVE_CACHE_MS + 1;
    expect(await refused(auth.verify(token))).toMatch(/^invalid token: /);
  });

  it('never remembers a refusal: a token works as soon as it exists', async () => {
    const store = new TokenStore(redis);
    const auth = new ApiTokenAuthenticator(store);
    await refused(auth.verify('sgt_unknown'));
    const { token } = await store.create({ workspace: 'w', role: 'member' });
    expect(await auth.verify(token)).toMatchObject({ admin: false, roles: ['member'] });
  });

  it('an expired token is refused even while cached', async () => {
    let now = Date.now();
    const store = new TokenStore(redis);
    const auth = new ApiTokenAuthenticator(store, () => now);
    const { token } = await store.create({ workspace: 'w', role: 'member', ttlMs: 100 }, now);
    await auth.verify(token);
    now += 101;
    expect(await refused(auth.verify(token))).toMatch(/^invalid token: /);
  });
});
