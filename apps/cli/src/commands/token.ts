// sandgate token create|list|revoke: API tokens, managed straight in the Redis the replicas share
// (like `sandgate worker`, these talk to Redis, not to a gateway: the first admin token of a
// fresh gateway has to come from somewhere). A token is printed once, by `create`, and never again.
import { UsageError, parseCommand, parseOutput, type Env } from '../args.ts';
import type { CommandContext } from '../context.ts';
import { ConfigError, readOption, REPLICA_OPTIONS, type OptionSpec } from '@sandgate/gateway/config';
import { DEFAULT_WORKSPACE } from '@sandgate/core';
import { EXIT_FAILURE } from '../errors.ts';
import { formatJson, formatTable } from '../output.ts';
import { write } from './common.ts';

const REDIS_OPTION = { redis: { type: 'string' }, 'redis-ca': { type: 'string' } } as const;
export const CREATE_OPTIONS = {
  ...REDIS_OPTION,
  workspace: { type: 'string' },
  role: { type: 'string' },
  ttl: { type: 'string' },
  name: { type: 'string' },
} as const;
export const LIST_OPTIONS = { ...REDIS_OPTION, output: { type: 'string', short: 'o' } } as const;
export const REVOKE_OPTIONS = REDIS_OPTION;

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** `90s`, `15m`, `12h`, `30d`, `1h30m`: a positive duration in milliseconds. */
export function parseDuration(raw: string, what: string): number {
  const text = raw.trim();
  const parts = [...text.matchAll(/(\d+)(ms|s|m|h|d|w)/g)];
  if (text === '' || parts.map((p) => p[0]).join('') !== text) {
    throw new UsageError(`${what} must be a duration such as 30m, 12h, 7d or 1h30m (units ms, s, m, h, d, w), got '${raw}'`);
  }
  const ms = parts.reduce((sum, p) => sum + Number(p[1]) * UNITS[p[2]!]!, 0);
  if (ms <= 0 || !Number.isSafeInteger(ms)) throw new UsageError(`${what} must be longer than 0, got '${raw}'`);
  return ms;
}

function parseRole(raw: string | undefined): 'admin' | 'member' {
  if (raw === undefined) return 'member';
  const role = raw.trim().toLowerCase();
  if (role !== 'admin' && role !== 'member') throw new UsageError(`--role must be admin or member, got '${raw}'`);
  return role;
}

/** --redis, else SANDGATE_REDIS_URL, else the replica's default: the same Redis the replicas use. */
function redisUrl(flag: string | undefined, env: Env): string {
  const given = readOption(REPLICA_OPTIONS.redisUrl, flag, env);
  try {
    return REPLICA_OPTIONS.redisUrl.parse(given?.value ?? (REPLICA_OPTIONS.redisUrl.default as string), given?.what ?? 'default');
  } catch (err) {
    if (err instanceof ConfigError) throw new UsageError(err.message);
    throw err;
  }
}

/** --redis-ca, else SANDGATE_REDIS_CA: the CA of a rediss:// Redis (as the replicas take it). */
function redisCa(flag: string | undefined, env: Env): string {
  return readOption(REPLICA_OPTIONS.redisCa, flag, env)?.value.trim() ?? '';
}

type Stores = {
  tokens: import('@sandgate/store').TokenStore;
  workspaces: import('@sandgate/store').WorkspaceStore;
  /** Confirms a write reached SANDGATE_REDIS_MIN_REPLICAS replicas, as the replicas do. */
  replication: import('@sandgate/store').ReplicationGuard;
};

/** SANDGATE_REDIS_MIN_REPLICAS and SANDGATE_REDIS_WAIT_TIMEOUT_MS, as the replicas read them. */
function replicationPolicy(env: Env): { minReplicas: number; timeoutMs: number } {
  const read = <T>(spec: OptionSpec<T>): T => {
    const given = readOption(spec, undefined, env);
    try {
      return spec.parse(given?.value ?? (spec.default as string), given?.what ?? 'default');
    } catch (err) {
      if (err instanceof ConfigError) throw new UsageError(err.message);
      throw err;
    }
  };
  return { minReplicas: read(REPLICA_OPTIONS.redisMinReplicas), timeoutMs: read(REPLICA_OPTIONS.redisWaitTimeoutMs) };
}

async function withTokens<T>(url: string, ca: string, fn: (stores: Stores) => Promise<T>, env: Env = {}): Promise<T> {
  const { createRedisConnection, loadRedisCa, ReplicationGuard, TokenStore, WorkspaceStore } = await import('@sandgate/store');
  const { redactRedisUrl } = await import('./up.ts');
  const redis = createRedisConnection(url, 'commands', { lazyConnect: true, oneShot: true, connectionName: 'sandgate:token-cli', tlsCa: loadRedisCa(ca) });
  redis.on('error', () => undefined); // reported by the command that fails
  try {
    await redis.connect().catch((err: Error) => {
      // The URL carries the Redis password: never print it.
      throw new Error(`cannot reach Redis at ${redactRedisUrl(url)}: ${err.message}`);
    });
    return await fn({ tokens: new TokenStore(redis), workspaces: new WorkspaceStore(redis), replication: new ReplicationGuard(redis, replicationPolicy(env)) });
  } finally {
    redis.disconnect();
  }
}

const iso = (ms: number) => new Date(ms).toISOString();

export async function runCreate(argv: string[], ctx: CommandContext): Promise<number> {
  const { values, positionals } = parseCommand(argv, CREATE_OPTIONS, 'token create');
  if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`, 'token create');
  const workspace = values.workspace?.trim();
  if (!workspace) throw new UsageError('--workspace is required: the workspace the token belongs to (e.g. --workspace default)', 'token create');
  const role = parseRole(values.role);
  const ttlMs = values.ttl === undefined ? 0 : parseDuration(values.ttl, '--ttl');
  const url = redisUrl(values.redis, ctx.env);
  const { token, record } = await withTokens(url, redisCa(values['redis-ca'], ctx.env), async ({ tokens, workspaces, replication }) => {
    // A token for a workspace that does not exist would authenticate a caller who can do nothing
    // (every create there is refused): say so now. `default` exists once any replica has started.
    if (workspace !== DEFAULT_WORKSPACE && !(await workspaces.get(workspace))) {
      throw new UsageError(`workspace '${workspace}' not found: create it first (sandgate workspace create --name ${workspace})`, 'token create');
    }
    const made = await tokens.create({ workspace, role, name: values.name ?? '', ttlMs });
    await replication.confirm('the token');
    return made;
  }, ctx.env);
  // stdout: the token and only the token (`export SANDGATE_TOKEN=$(sandgate token create …)`).
  write(`${token}\n`);
  process.stderr.write(
    `created ${role} token ${record.id} for workspace '${workspace}'${record.expiresAtMs ? `, expires ${iso(record.expiresAtMs)}` : ''}; it is shown only this once\n`,
  );
  return 0;
}

export async function runList(argv: string[], ctx: CommandContext): Promise<number> {
  const { values, positionals } = parseCommand(argv, LIST_OPTIONS, 'token list');
  if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`, 'token list');
  const json = parseOutput(values.output);
  const records = await withTokens(redisUrl(values.redis, ctx.env), redisCa(values['redis-ca'], ctx.env), ({ tokens }) => tokens.list());
  // Never the tokens themselves: Redis holds only their digests.
  const rows = records.map((r) => ({
    id: r.id,
    name: r.name,
    workspace: r.workspace,
    role: r.role,
    created: iso(r.createdAtMs),
    expires: r.expiresAtMs ? iso(r.expiresAtMs) : null,
  }));
  if (json) write(formatJson({ tokens: rows }));
  else write(formatTable(['ID', 'NAME', 'WORKSPACE', 'ROLE', 'CREATED', 'EXPIRES'], rows.map((r) => [r.id, r.name, r.workspace, r.role, r.created, r.expires ?? 'never'])));
  return 0;
}

export async function runRevoke(argv: string[], ctx: CommandContext): Promise<number> {
  const { values, positionals } = parseCommand(argv, REVOKE_OPTIONS, 'token revoke');
  if (positionals.length !== 1) {
    throw new UsageError(positionals.length === 0 ? 'a token ID (from `sandgate token list`) or the token itself is required' : `unexpected argument '${positionals[1]}'`, 'token revoke');
  }
  const target = positionals[0]!;
  const revoked = await withTokens(
    redisUrl(values.redis, ctx.env),
    redisCa(values['redis-ca'], ctx.env),
    async ({ tokens, replication }) => {
      const done = await tokens.revoke(target);
      // A revoke a failover could undo would let the token back in.
      if (done) await replication.confirm('the revoke');
      return done;
    },
    ctx.env,
  );
  if (!revoked) {
    process.stderr.write(`error: no live token ${target.startsWith('sgt_') ? 'matches the token given' : `with id '${target}'`} (see 'sandgate token list')\n`);
    return EXIT_FAILURE;
  }
  process.stderr.write('revoked; every replica refuses it within a second\n');
  return 0;
}
