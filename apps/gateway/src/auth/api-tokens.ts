// API tokens (`sandgate token create`): verified against Redis, where only their digests live.
// Verified answers are remembered for at most POSITIVE_CACHE_MS, which bounds how long a revoked
// or expired token keeps working at any replica (the bound is 1 s); refusals are never
// cached, so a token works the moment it is created.
import { Code, GatewayError, type Principal } from '@sandgate/core';
import type { ApiTokenRecord, TokenStore } from '@sandgate/store';

export const POSITIVE_CACHE_MS = 500;
/** Enough for every live token of a busy gateway; past it the cache starts over. */
const MAX_CACHED = 10_000;

export function tokenPrincipal(record: ApiTokenRecord): Principal {
  return {
    subject: `token:${record.id}`,
    displayName: record.name || `token ${record.id}`,
    provider: 'api_token',
    admin: record.role === 'admin',
    workspace: record.workspace,
    roles: [record.role],
    scopes: [],
  };
}

export class ApiTokenAuthenticator {
  private readonly store: TokenStore;
  private readonly now: () => number;
  private readonly cache = new Map<string, { principal: Principal; until: number; expiresAtMs: number }>();

  constructor(store: TokenStore, now: () => number = Date.now) {
    this.store = store;
    this.now = now;
  }

  async verify(token: string): Promise<Principal> {
    const now = this.now();
    const hit = this.cache.get(token);
    if (hit && hit.until > now && (hit.expiresAtMs === 0 || hit.expiresAtMs > now)) return hit.principal;
    if (hit) this.cache.delete(token);
    let record: ApiTokenRecord | null;
    try {
      record = await this.store.verify(token, now);
    } catch (err) {
      throw new GatewayError(Code.UNAVAILABLE, `cannot verify the API token: Redis is unavailable (${(err as Error).message})`);
    }
    if (!record) throw new GatewayError(Code.UNAUTHENTICATED, 'invalid token: unknown, revoked or expired API token');
    const principal = tokenPrincipal(record);
    if (this.cache.size >= MAX_CACHED) this.cache.clear();
    this.cache.set(token, { principal, until: now + POSITIVE_CACHE_MS, expiresAtMs: record.expiresAtMs });
    return principal;
  }
}
