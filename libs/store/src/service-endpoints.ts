// Exposed-service endpoints in Redis (openshell-v1-more.md §7.2). A sandbox's endpoints live in one
// hash keyed by the sandbox id, so deleting the sandbox (remove-sandbox-record-n) takes them in the same
// call; a sorted set per workspace lists the keys oldest first, then by name (ZRANGE's order for
// equal scores). Writes are Lua: the upsert is a compare-and-set on the record's resource_version.
import { readAll, type RedisClient } from './client.ts';
import { codec, type ServiceEndpoint } from '@sandgate/protocols';
import { GatewayError, Code } from '@sandgate/core';
import { keysFor, type KeySchema } from './keys.ts';
import { luaScript } from './lua.ts';

const endpointCodec = codec<ServiceEndpoint>('openshell.v1.ServiceEndpoint');

const LIST = luaScript('list-service');
const EXPOSE = luaScript('expose-service');

/** What list-service-2 and expose-service-2 answer when it did not write (otherwise the new resource_version, >= 1). */
const ExposeResult = { sandboxGone: -1, createdMeanwhile: -2, changedMeanwhile: -3, workspaceTerminating: -4 } as const;

const pbField = (key: string) => `pb:${key}`;
const rvField = (key: string) => `rv:${key}`;

function decode(bytes: Buffer, rv: string | Buffer | undefined): ServiceEndpoint {
  const endpoint = endpointCodec.decode(bytes);
  // Reads fill resource_version from the store (the `rv:` field is the truth).
  endpoint.metadata = { ...endpoint.metadata!, resource_version: Number(rv?.toString() ?? endpoint.metadata?.resource_version ?? 0) };
  return endpoint;
}

/** A listing entry this old whose endpoint was never written is left over by a failed ExposeService. */
const UNWRITTEN_LISTING_MS = 60_000;

export class ServiceEndpointStore {
  private readonly redis: RedisClient;
  private readonly keys: KeySchema;
  constructor(redis: RedisClient) {
    this.redis = redis;
    this.keys = keysFor(redis);
  }

  /** One endpoint of a sandbox by key, or null. */
  async get(sandboxId: string, key: string): Promise<ServiceEndpoint | null> {
    const [pb, rv] = await this.redis.hmgetBuffer(this.keys.sandboxServices(sandboxId), pbField(key), rvField(key));
    return pb ? decode(pb, rv ?? undefined) : null;
  }

  /**
   * Creates (`expectedVersion` 0) or replaces the endpoint. `endpoint.metadata.resource_version`
   * is set here to the version written. Refused: the sandbox is gone (NOT_FOUND "sandbox not
   * found"), the workspace is being deleted, another create won (INTERNAL, as upstream's unique
   * violation) or another write changed it (ABORTED with the current version).
   */
  async upsert(endpoint: ServiceEndpoint, expectedVersion: number): Promise<ServiceEndpoint> {
    const meta = endpoint.metadata!;
    const key = meta.name!;
    const sandboxId = endpoint.sandbox_id!;
    const next: ServiceEndpoint = { ...endpoint, metadata: { ...meta, resource_version: expectedVersion + 1 } };
    // Listed first (the workspace's slot), written second (the sandbox's): a listed key without an
    // endpoint is never shown, so no listing ever shows an endpoint that is not there.
    const listing = this.keys.workspaceServices(meta.workspace!);
    const listed = (await LIST.run(this.redis, [this.keys.workspace(meta.workspace!), listing], [key, meta.created_at_ms ?? 0])) as number;
    const rv = listed === ExposeResult.workspaceTerminating
      ? listed
      : ((await EXPOSE.run(this.redis, [this.keys.sandbox(sandboxId), this.keys.sandboxServices(sandboxId)], [key, expectedVersion, endpointCodec.encode(next)])) as number);
    // The sandbox is gone (its delete may have unlisted its endpoints before this key was listed).
    if (rv === ExposeResult.sandboxGone) await this.redis.zrem(listing, key);
    switch (rv) {
      case ExposeResult.sandboxGone:
        throw new GatewayError(Code.NOT_FOUND, 'sandbox not found');
      case ExposeResult.workspaceTerminating:
        throw new GatewayError(Code.FAILED_PRECONDITION, `workspace '${meta.workspace}' is being deleted`);
      case ExposeResult.createdMeanwhile:
        throw new GatewayError(Code.INTERNAL, `expose service failed: service endpoint '${key}' was created concurrently`);
      case ExposeResult.changedMeanwhile: {
        const current = await this.get(sandboxId, key);
        throw new GatewayError(
          Code.ABORTED,
          `expose service failed due to concurrent modification (current resource_version: ${current?.metadata?.resource_version ?? 'gone'})`,
        );
      }
      default:
        return next;
    }
  }

  /** Deletes one endpoint (then its listing entry: two slots on a cluster); whether it was there. */
  async delete(sandboxId: string, workspace: string, key: string): Promise<boolean> {
    const removed = await this.redis.hdel(this.keys.sandboxServices(sandboxId), pbField(key), rvField(key));
    await this.redis.zrem(this.keys.workspaceServices(workspace), key);
    return removed > 0;
  }

  /** Every endpoint of one sandbox, oldest first, then by name. */
  async listBySandbox(sandboxId: string): Promise<ServiceEndpoint[]> {
    const hash = (await this.redis.hgetallBuffer(this.keys.sandboxServices(sandboxId))) as Record<string, Buffer>;
    const out: ServiceEndpoint[] = [];
    for (const [field, value] of Object.entries(hash)) {
      if (!field.startsWith('pb:')) continue;
      out.push(decode(value, hash[rvField(field.slice(3))]));
    }
    return out.sort(byCreationThenName);
  }

  /**
   * A page of a workspace's endpoints, oldest first, then by name. `sandboxIdOf` resolves the
   * sandbox name (the key's part before `--`) to the id holding the records.
   */
  async listWorkspace(workspace: string, offset: number, limit: number, sandboxIdOf: (name: string) => Promise<string | null>): Promise<ServiceEndpoint[]> {
    if (limit <= 0) return [];
    const listing = this.keys.workspaceServices(workspace);
    const withScores = await this.redis.zrange(listing, String(offset), String(offset + limit - 1), 'WITHSCORES');
    const members = withScores.filter((_, i) => i % 2 === 0);
    const listedAt = withScores.filter((_, i) => i % 2 === 1).map(Number);
    const ids = await Promise.all(members.map((key) => sandboxIdOf(key.split('--')[0]!)));
    const values = await readAll(
      this.redis,
      (p) => members.forEach((key, i) => p.hmgetBuffer(this.keys.sandboxServices(ids[i] ?? ''), pbField(key), rvField(key))),
      (c) => members.map((key, i) => c.hmgetBuffer(this.keys.sandboxServices(ids[i] ?? ''), pbField(key), rvField(key))),
    );
    const out: ServiceEndpoint[] = [];
    const stale: string[] = [];
    values.forEach((value, i) => {
      const [pb, rv] = (value ?? [null, null]) as [Buffer | null, Buffer | null];
      // Gone between the two reads (deleted meanwhile): left out, as a later listing would.
      if (ids[i] && pb) out.push(decode(pb, rv ?? undefined));
      // Listed without an endpoint: its sandbox is gone, or its ExposeService never wrote it (it
      // was refused, or its replica died between the two steps; a young one may still be
      // writing). Taken out of the listing.
      else if (value && (!ids[i] || Date.now() - listedAt[i]! > UNWRITTEN_LISTING_MS)) stale.push(members[i]!);
    });
    if (stale.length > 0) await this.redis.zrem(listing, ...stale);
    return out;
  }

  /** How many endpoints a workspace lists (all_workspaces paging). */
  async countWorkspace(workspace: string): Promise<number> {
    return this.redis.zcard(this.keys.workspaceServices(workspace));
  }
}

export function byCreationThenName(a: ServiceEndpoint, b: ServiceEndpoint): number {
  return (a.metadata?.created_at_ms ?? 0) - (b.metadata?.created_at_ms ?? 0) || (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? '');
}
