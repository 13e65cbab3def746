// Exposed-service endpoints in Redis (openshell-v1-more.md §7.2). A sandbox's endpoints live in one
// hash keyed by the sandbox id, so deleting the sandbox (remove-sandbox-n) takes them in the same
// call; a sorted set per workspace lists the keys oldest first, then by name (ZRANGE's order for
// equal scores). Writes are Lua: the upsert is a compare-and-set on the record's resource_version.
import type { Redis } from 'ioredis';
import { codec, type ServiceEndpoint } from '@sandgate/protocols';
import { GatewayError, Code } from '@sandgate/core';
import { keys } from './keys.ts';
import { luaScript } from './lua.ts';

const endpointCodec = codec<ServiceEndpoint>('openshell.v1.ServiceEndpoint');

const EXPOSE = luaScript('expose-service');
const DELETE = luaScript('delete-service');

/** What expose-service-4 answers when it did not write (otherwise the new resource_version, >= 1). */
const ExposeResult = { sandboxGone: -1, createdMeanwhile: -2, changedMeanwhile: -3, workspaceTerminating: -4 } as const;

const pbField = (key: string) => `pb:${key}`;
const rvField = (key: string) => `rv:${key}`;

function decode(bytes: Buffer, rv: string | Buffer | undefined): ServiceEndpoint {
  const endpoint = endpointCodec.decode(bytes);
  // Reads fill resource_version from the store (the `rv:` field is the truth).
  endpoint.metadata = { ...endpoint.metadata!, resource_version: Number(rv?.toString() ?? endpoint.metadata?.resource_version ?? 0) };
  return endpoint;
}

export class ServiceEndpointStore {
  private readonly redis: Redis;
  constructor(redis: Redis) {
    this.redis = redis;
  }

  /** One endpoint of a sandbox by key, or null. */
  async get(sandboxId: string, key: string): Promise<ServiceEndpoint | null> {
    const [pb, rv] = await this.redis.hmgetBuffer(keys.sandboxServices(sandboxId), pbField(key), rvField(key));
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
    const rv = (await EXPOSE.run(
      this.redis,
      [keys.sandbox(sandboxId), keys.sandboxServices(sandboxId), keys.workspaceServices(meta.workspace!), keys.workspace(meta.workspace!)],
      [key, expectedVersion, endpointCodec.encode(next), meta.created_at_ms ?? 0],
    )) as number;
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

  /** Deletes one endpoint; whether it was there. */
  async delete(sandboxId: string, workspace: string, key: string): Promise<boolean> {
    return (await DELETE.run(this.redis, [keys.sandboxServices(sandboxId), keys.workspaceServices(workspace)], [key])) === 1;
  }

  /** Every endpoint of one sandbox, oldest first, then by name. */
  async listBySandbox(sandboxId: string): Promise<ServiceEndpoint[]> {
    const hash = (await this.redis.hgetallBuffer(keys.sandboxServices(sandboxId))) as Record<string, Buffer>;
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
    const members = await this.redis.zrange(keys.workspaceServices(workspace), String(offset), String(offset + limit - 1));
    const ids = await Promise.all(members.map((key) => sandboxIdOf(key.split('--')[0]!)));
    const pipeline = this.redis.pipeline();
    members.forEach((key, i) => pipeline.hmgetBuffer(keys.sandboxServices(ids[i] ?? ''), pbField(key), rvField(key)));
    const results = (await pipeline.exec()) ?? [];
    const out: ServiceEndpoint[] = [];
    results.forEach(([err, value], i) => {
      if (err || !ids[i]) return;
      const [pb, rv] = value as [Buffer | null, Buffer | null];
      // Gone between the two reads (deleted meanwhile): left out, as a later listing would.
      if (pb) out.push(decode(pb, rv ?? undefined));
    });
    return out;
  }

  /** How many endpoints a workspace lists (all_workspaces paging). */
  async countWorkspace(workspace: string): Promise<number> {
    return this.redis.zcard(keys.workspaceServices(workspace));
  }
}

export function byCreationThenName(a: ServiceEndpoint, b: ServiceEndpoint): number {
  return (a.metadata?.created_at_ms ?? 0) - (b.metadata?.created_at_ms ?? 0) || (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? '');
}
