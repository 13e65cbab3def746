// API tokens (`sandgate token create|list|revoke`): bearer secrets that authenticate a caller as a
// member or admin of one workspace. Only the token's SHA-256 is stored, so nothing in Redis can be
// replayed as a token; the token is shown once, when created.
import { randomBytes, randomUUID } from 'node:crypto';
import type { RedisClient } from './client.ts';
import type { WorkspaceRole } from '@sandgate/core';
import { keysFor, type KeySchema, tokenDigest } from './keys.ts';
import { luaScript } from './lua.ts';

/** Every API token starts with this, so a token is recognisable in a config file or a leak scanner. */
export const API_TOKEN_PREFIX = 'sgt_';

export interface ApiTokenRecord {
  id: string;
  name: string;
  workspace: string;
  role: WorkspaceRole;
  createdAtMs: number;
  /** 0 = never expires. */
  expiresAtMs: number;
}

export interface CreateTokenInput {
  workspace: string;
  role: WorkspaceRole;
  name?: string;
  /** Lifetime; 0 or absent = never expires. */
  ttlMs?: number;
}

const createScript = luaScript('create-token');
const revokeScript = luaScript('revoke-token');

function recordFrom(h: Record<string, string>): ApiTokenRecord | null {
  if (!h.id) return null;
  return {
    id: h.id,
    name: h.name ?? '',
    workspace: h.ws ?? '',
    role: h.role === 'admin' ? 'admin' : 'member',
    createdAtMs: Number(h.created ?? 0),
    expiresAtMs: Number(h.exp ?? 0),
  };
}

export class TokenStore {
  private readonly redis: RedisClient;
  private readonly keys: KeySchema;
  constructor(redis: RedisClient) {
    this.redis = redis;
    this.keys = keysFor(redis);
  }

  /** A new token: returned once, stored only as its digest. */
  async create(input: CreateTokenInput, nowMs = Date.now()): Promise<{ token: string; record: ApiTokenRecord }> {
    for (;;) {
      const token = API_TOKEN_PREFIX + randomBytes(32).toString('base64url');
      const record: ApiTokenRecord = {
        id: randomUUID(),
        name: input.name ?? '',
        workspace: input.workspace,
        role: input.role,
        createdAtMs: nowMs,
        expiresAtMs: input.ttlMs ? nowMs + input.ttlMs : 0,
      };
      const digest = tokenDigest(token);
      const created = await createScript.run(this.redis, [this.keys.apiToken(digest), this.keys.apiTokenIndex()], [
        record.id, digest, record.name, record.workspace, record.role, record.createdAtMs, record.expiresAtMs,
      ]);
      if (created === 1) return { token, record };
    }
  }

  /** The record of a presented token, or null if it is unknown, revoked or expired. */
  async verify(token: string, nowMs = Date.now()): Promise<ApiTokenRecord | null> {
    if (!token.startsWith(API_TOKEN_PREFIX)) return null;
    const record = recordFrom(await this.redis.hgetall(this.keys.apiToken(tokenDigest(token))));
    if (!record) return null;
    if (record.expiresAtMs > 0 && record.expiresAtMs <= nowMs) return null;
    return record;
  }

  /** Every live token's record (never the tokens), oldest first. */
  async list(nowMs = Date.now()): Promise<ApiTokenRecord[]> {
    const index = await this.redis.hgetall(this.keys.apiTokenIndex());
    const out: ApiTokenRecord[] = [];
    for (const [id, digest] of Object.entries(index)) {
      const record = recordFrom(await this.redis.hgetall(this.keys.apiToken(digest)));
      // Expired tokens vanish from Redis on their own; their index entry is dropped here.
      if (!record) await this.redis.hdel(this.keys.apiTokenIndex(), id);
      else if (record.expiresAtMs === 0 || record.expiresAtMs > nowMs) out.push(record);
    }
    return out.sort((a, b) => a.createdAtMs - b.createdAtMs || a.id.localeCompare(b.id));
  }

  /** Revokes by id, or by the token itself; true if there was such a token. */
  async revoke(idOrToken: string): Promise<boolean> {
    let id = idOrToken;
    let digest: string | null;
    if (idOrToken.startsWith(API_TOKEN_PREFIX)) {
      digest = tokenDigest(idOrToken);
      const record = recordFrom(await this.redis.hgetall(this.keys.apiToken(digest)));
      if (!record) return false;
      id = record.id;
    } else {
      digest = await this.redis.hget(this.keys.apiTokenIndex(), id);
      if (!digest) return false;
    }
    return (await revokeScript.run(this.redis, [this.keys.apiToken(digest), this.keys.apiTokenIndex()], [id, digest])) === 1;
  }
}
