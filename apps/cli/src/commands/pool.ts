// sandgate pool set|list|delete: warm pools (sandgate.v1.Sandgate SetPool, ListPools, DeletePool;
// gateway admins only). A pool keeps SIZE sandboxes of one template (image, resources, policy)
// started and Ready; `sandbox create --pool NAME` claims one (ARCHITECTURE.md "Warm pools").
// Output: a table, or `-o json` (the Pool's proto3 JSON, as `sandbox get -o json` prints a Sandbox).
import { decodePolicy, formatCpu, formatMemory, MAX_POOL_SIZE, parseResources } from '@sandgate/core';
import { decodeStruct, toProto3Json, type Pool, type SetPoolRequest } from '@sandgate/protocols';
import { UsageError, parseCommand, parseOutput } from '../args.ts';
import type { ConnectionFlags } from '../client-config.ts';
import type { CommandContext } from '../context.ts';
import { formatJson, formatTable } from '../output.ts';
import { readPolicyFile } from '../policy-file.ts';
import { connectionFlags, GATEWAY_OPTION, withClient, write } from './common.ts';
import { resourcesStruct } from './sandbox-create.ts';

/** The flags each command accepts (the usage test checks each is documented). */
export const SET_OPTIONS = {
  ...GATEWAY_OPTION,
  size: { type: 'string' },
  image: { type: 'string' },
  cpu: { type: 'string' },
  memory: { type: 'string' },
  policy: { type: 'string' },
  'auto-match': { type: 'boolean' },
  output: { type: 'string', short: 'o' },
} as const;
export const LIST_OPTIONS = { ...GATEWAY_OPTION, output: { type: 'string', short: 'o' } } as const;
export const DELETE_OPTIONS = GATEWAY_OPTION;

/**
 * A Pool as the gateway answers it (decoded with defaults omitted: a zero count or an empty
 * string may be absent, whatever the Pool type says).
 */
type WirePool = Partial<Pool>;

export interface SetArgs {
  request: SetPoolRequest;
  json: boolean;
  /** --gateway and the TLS/token flags given to the command. */
  connection: ConnectionFlags;
}

/** `--size N`: required, a whole number from 0 (keeps the pool, retires its members) to MAX_POOL_SIZE. */
export function parsePoolSize(raw: string | undefined): number {
  const command = 'pool set';
  if (raw === undefined) throw new UsageError(`--size is required: how many members the pool keeps started (0 to ${MAX_POOL_SIZE})`, command);
  const text = raw.trim();
  if (!/^\d+$/.test(text)) throw new UsageError(`--size must be a non-negative integer (0 to ${MAX_POOL_SIZE}), got '${raw}'`, command);
  const size = Number(text);
  if (size > MAX_POOL_SIZE) throw new UsageError(`--size must be at most ${MAX_POOL_SIZE}, got '${raw}'`, command);
  return size;
}

/**
 * Parses `pool set`'s flags into a SetPool request (pure but for reading --policy FILE). The
 * resources are exactly what `sandbox create --cpu/--memory` sends (resourcesStruct), so a create
 * asking for the same limits matches the pool's; a pool has no --disk (the gateway refuses one).
 */
export function parseSetArgs(argv: string[]): SetArgs {
  const command = 'pool set';
  const { values, positionals } = parseCommand(argv, SET_OPTIONS, command);
  if (positionals.length !== 1) throw new UsageError(positionals.length === 0 ? 'a pool NAME is required' : `unexpected argument '${positionals[1]}'`, command);
  const size = parsePoolSize(values.size);
  const json = parseOutput(values.output);
  const resources = resourcesStruct(values.cpu, values.memory, undefined, command);
  const request: SetPoolRequest = {
    name: positionals[0]!,
    size,
    ...(values.image !== undefined ? { image: values.image } : {}),
    ...(resources ? { resources } : {}),
    ...(values.policy !== undefined ? { policy: readPolicyFile(values.policy, undefined, command) } : {}),
    ...(values['auto-match'] ? { auto_match: true } : {}),
  };
  return { request, json, connection: connectionFlags(values) };
}

/**
 * The Pool's fields in .proto order, and the value proto3 JSON would leave out for each scalar:
 * printed anyway (proto3 JSON's "emit defaults" option), so `.ready` of a pool with none ready
 * is 0, not absent. resources and policy are left out when empty, as in sandboxJson.
 */
const POOL_JSON_FIELDS = {
  name: '',
  size: 0,
  image: '',
  resources: undefined,
  policy: undefined,
  generation: '0',
  ready: 0,
  starting: 0,
  createdAtMs: '0',
  consecutiveFailures: 0,
  retryAtMs: '0',
  lastError: '',
  autoMatch: false,
} as const;

/**
 * A Pool as proto3 JSON (lowerCamelCase names, 64-bit integers as strings; an object ready for
 * JSON.stringify). Bytes are shown as sandboxJson shows a Sandbox's (the other commands' -o json):
 * as what they are, `resources` as the decoded Struct (`{limits: {cpu, memory}}`) and `policy` as
 * the SandboxPolicy's proto3 JSON; bytes that do not decode stay base64 (proto3 JSON of bytes).
 */
export function poolJson(pool: WirePool): unknown {
  const json: Record<string, unknown> = { ...POOL_JSON_FIELDS, ...(toProto3Json('sandgate.v1.Pool', pool) as Record<string, unknown>) };
  if (pool.resources && pool.resources.byteLength > 0) {
    try {
      json.resources = decodeStruct(pool.resources);
    } catch {
      // Not a Struct (written by something else): left as base64.
    }
  }
  if (pool.policy && pool.policy.byteLength > 0) {
    try {
      json.policy = toProto3Json('openshell.sandbox.v1.SandboxPolicy', decodePolicy(pool.policy));
    } catch {
      // as above
    }
  }
  for (const [key, value] of Object.entries(json)) if (value === undefined) delete json[key];
  return json;
}

/** The CPU and MEMORY cells from the resources Struct: '-' for a limit it does not set. */
function limitCells(bytes: Uint8Array | undefined): [string, string] {
  try {
    const l = parseResources(bytes);
    return [l.cpuMillis !== undefined ? formatCpu(l.cpuMillis) : '-', l.memoryBytes !== undefined ? formatMemory(l.memoryBytes) : '-'];
  } catch {
    return ['<unreadable>', '<unreadable>'];
  }
}

export function formatPoolTable(pools: WirePool[]): string {
  const table = formatTable(
    ['NAME', 'SIZE', 'READY', 'STARTING', 'IMAGE', 'CPU', 'MEMORY', 'GENERATION', 'AUTO-MATCH', 'FAILURES'],
    pools.map((p) => [
      p.name ?? '',
      String(p.size ?? 0),
      String(p.ready ?? 0),
      String(p.starting ?? 0),
      p.image || '-',
      ...limitCells(p.resources),
      String(p.generation ?? 0),
      p.auto_match ? 'yes' : 'no',
      String(p.consecutive_failures ?? 0),
    ]),
  );
  // A failing pool says why and when it is tried next, under the table (the error is too long for a cell).
  const failing = pools
    .filter((p) => (p.consecutive_failures ?? 0) > 0)
    .map((p) => {
      const retry = Number(p.retry_at_ms ?? 0);
      return `pool ${p.name ?? ''}: members cannot start (${p.consecutive_failures} failures in a row)${retry ? `, next try ${new Date(retry).toISOString()}` : ''}: ${p.last_error || 'no error recorded'}\n`;
    });
  return table + failing.join('');
}

export async function runSet(argv: string[], ctx: CommandContext): Promise<number> {
  const args = parseSetArgs(argv);
  return withClient(ctx, args.connection, async (client) => {
    const pool = await client.unary<WirePool>('SetPool', args.request);
    write(args.json ? formatJson(poolJson(pool)) : formatPoolTable([pool]));
    return 0;
  });
}

export async function runList(argv: string[], ctx: CommandContext): Promise<number> {
  const command = 'pool list';
  const { values, positionals } = parseCommand(argv, LIST_OPTIONS, command);
  if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`, command);
  const json = parseOutput(values.output);
  return withClient(ctx, values, async (client) => {
    const res = await client.unary<{ pools?: WirePool[] }>('ListPools', {});
    const list = res.pools ?? [];
    if (json) write(formatJson({ pools: list.map(poolJson) }));
    else if (list.length === 0) write('No pools found.\n');
    else write(formatPoolTable(list));
    return 0;
  });
}

export async function runDelete(argv: string[], ctx: CommandContext): Promise<number> {
  const command = 'pool delete';
  const { values, positionals } = parseCommand(argv, DELETE_OPTIONS, command);
  if (positionals.length !== 1) throw new UsageError(positionals.length === 0 ? 'a pool NAME is required' : `unexpected argument '${positionals[1]}'`, command);
  const name = positionals[0]!;
  return withClient(ctx, values, async (client) => {
    // An unknown pool is NOT_FOUND ("pool 'x' not found"), reported as `error:` with exit 1.
    const res = await client.unary<{ deleted?: boolean }>('DeletePool', { name });
    if (!res.deleted) throw new Error(`pool '${name}' not found`);
    write(`pool ${name} deleted\n`);
    return 0;
  });
}
