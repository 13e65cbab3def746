// Flag/env/default merging for `sandgate gateway` and `sandgate up`. Pure: the host facts used for
// defaults (hostname, pid, randomness, home directory) are injected.
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
// The gateway's config module has no imports, so this keeps `@sandgate/gateway` (and its Redis,
// gRPC and driver modules) unloaded until a command actually starts a replica.
import { CONFIG_DEFAULTS, type ReplicaConfig } from '@sandgate/gateway/config';
import { DebugBreakError, parseDebugBreaks, type DebugBreak } from '@sandgate/core';
import { UsageError, parseCommand, parsePort, type Env } from './args.ts';

export interface HostFacts {
  hostname: string;
  pid: number;
  homedir: string;
  /** Four random hex characters for the default replica id. */
  randomHex(): string;
}

export function hostFacts(): HostFacts {
  return { hostname: os.hostname(), pid: process.pid, homedir: os.homedir(), randomHex: () => randomBytes(2).toString('hex') };
}

export const GATEWAY_OPTIONS = {
  host: { type: 'string' },
  'grpc-port': { type: 'string' },
  'http-port': { type: 'string' },
  'peer-port': { type: 'string' },
  redis: { type: 'string' },
  'replica-id': { type: 'string' },
  driver: { type: 'string' },
  'state-dir': { type: 'string' },
  'supervisor-endpoint': { type: 'string' },
  'advertise-host': { type: 'string' },
  'no-workers': { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

export const UP_OPTIONS = {
  redis: { type: 'string' },
  'grpc-port': { type: 'string' },
  'http-port': { type: 'string' },
  'state-dir': { type: 'string' },
  driver: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** The flag values that feed a ReplicaConfig (any subset may be present). */
export interface ReplicaFlags {
  host?: string;
  'grpc-port'?: string;
  'http-port'?: string;
  'peer-port'?: string;
  redis?: string;
  'replica-id'?: string;
  driver?: string;
  'state-dir'?: string;
  'supervisor-endpoint'?: string;
  'advertise-host'?: string;
  'no-workers'?: boolean;
}

const DRIVERS = ['local', 'docker'] as const;

/** Parses `sandgate gateway` flags and merges them with SANDGATE_* variables and the defaults. */
export function resolveReplicaConfig(argv: string[], env: Env, facts: HostFacts = hostFacts()): ReplicaConfig {
  const { values, positionals } = parseCommand(argv, GATEWAY_OPTIONS, 'gateway');
  if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`, 'gateway');
  return mergeReplicaConfig(values, env, facts);
}

export interface UpConfig {
  config: ReplicaConfig;
  /** True when neither --redis nor SANDGATE_REDIS_URL was given: `up` runs its own redis-server. */
  privateRedis: boolean;
}

/** `sandgate up`: the same merging over its smaller flag set; workers always run. */
export function resolveUpConfig(argv: string[], env: Env, facts: HostFacts = hostFacts()): UpConfig {
  const { values, positionals } = parseCommand(argv, UP_OPTIONS, 'up');
  if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`, 'up');
  const privateRedis = values.redis === undefined && !nonEmpty(env.SANDGATE_REDIS_URL);
  const config = mergeReplicaConfig(values, { ...env, SANDGATE_WORKERS: undefined }, facts);
  return { config: { ...config, workers: true }, privateRedis };
}

function nonEmpty(value: string | undefined): value is string {
  return value !== undefined && value !== '';
}

/** Flag > environment variable (when set and non-empty) > default. */
export function mergeReplicaConfig(flags: ReplicaFlags, env: Env, facts: HostFacts): ReplicaConfig {
  const pick = (flag: string | undefined, variable: string): { value: string; what: string } | undefined => {
    if (flag !== undefined) return { value: flag, what: `--${flagName(variable)}` };
    const fromEnv = env[variable];
    return nonEmpty(fromEnv) ? { value: fromEnv, what: variable } : undefined;
  };
  const str = (flag: string | undefined, variable: string, fallback: string): string => {
    const v = pick(flag, variable);
    if (!v) return fallback;
    if (v.value.trim() === '') throw new UsageError(`${v.what} must not be empty`);
    return v.value;
  };
  const port = (flag: string | undefined, variable: string, fallback: number): number => {
    const v = pick(flag, variable);
    return v ? parsePort(v.value, v.what) : fallback;
  };

  const host = str(flags.host, 'SANDGATE_HOST', CONFIG_DEFAULTS.host);
  const driverPick = pick(flags.driver, 'SANDGATE_DRIVER');
  const driver = driverPick?.value ?? CONFIG_DEFAULTS.driver;
  if (!(DRIVERS as readonly string[]).includes(driver)) {
    throw new UsageError(`${driverPick?.what ?? 'driver'} must be one of ${DRIVERS.join(', ')}, got '${driver}'`);
  }
  const replicaId = str(flags['replica-id'], 'SANDGATE_REPLICA_ID', `${facts.hostname}-${facts.pid}-${facts.randomHex()}`);
  if (/\s/.test(replicaId)) throw new UsageError(`replica id '${replicaId}' must not contain whitespace`);

  let workers: boolean = CONFIG_DEFAULTS.workers;
  if (flags['no-workers']) workers = false;
  else if (nonEmpty(env.SANDGATE_WORKERS)) workers = parseBooleanEnv(env.SANDGATE_WORKERS, 'SANDGATE_WORKERS');

  return {
    host,
    grpcPort: port(flags['grpc-port'], 'SANDGATE_GRPC_PORT', CONFIG_DEFAULTS.grpcPort),
    httpPort: port(flags['http-port'], 'SANDGATE_HTTP_PORT', CONFIG_DEFAULTS.httpPort),
    peerPort: port(flags['peer-port'], 'SANDGATE_PEER_PORT', CONFIG_DEFAULTS.peerPort),
    redisUrl: str(flags.redis, 'SANDGATE_REDIS_URL', CONFIG_DEFAULTS.redisUrl),
    replicaId,
    driver: driver as ReplicaConfig['driver'],
    stateDir: path.resolve(str(flags['state-dir'], 'SANDGATE_STATE_DIR', path.join(facts.homedir, '.local', 'state', 'sandgate'))),
    // Empty: the replica uses its own gRPC address.
    supervisorEndpoint: pick(flags['supervisor-endpoint'], 'SANDGATE_SUPERVISOR_ENDPOINT')?.value.trim() ?? '',
    advertiseHost: str(flags['advertise-host'], 'SANDGATE_ADVERTISE_HOST', host),
    // Tuning knobs without flags: environment only.
    heartbeatIntervalMs: positiveIntEnv(env, 'SANDGATE_HEARTBEAT_INTERVAL_MS', CONFIG_DEFAULTS.heartbeatIntervalMs),
    heartbeatMisses: positiveIntEnv(env, 'SANDGATE_HEARTBEAT_MISSES', CONFIG_DEFAULTS.heartbeatMisses),
    ownerTtlMs: positiveIntEnv(env, 'SANDGATE_OWNER_TTL_MS', CONFIG_DEFAULTS.ownerTtlMs),
    maxExecsPerSandbox: positiveIntEnv(env, 'SANDGATE_MAX_EXECS_PER_SANDBOX', CONFIG_DEFAULTS.maxExecsPerSandbox),
    provisionTimeoutMs: positiveIntEnv(env, 'SANDGATE_PROVISION_DEADLINE_SECONDS', CONFIG_DEFAULTS.provisionTimeoutMs / 1000) * 1000,
    workers,
    ...debugBreaksFrom(env),
  };
}

// PLUMBING (chaos branch; the config engineer owns the final form): debug faults parsed once, here.
function debugBreaksFrom(env: Env): { debugBreaks?: ReadonlySet<DebugBreak> } {
  try {
    const breaks = parseDebugBreaks(env);
    return breaks.size > 0 ? { debugBreaks: breaks } : {};
  } catch (err) {
    if (err instanceof DebugBreakError) throw new UsageError(err.message);
    throw err;
  }
}

function positiveIntEnv(env: Env, variable: string, fallback: number): number {
  const raw = env[variable];
  if (!nonEmpty(raw)) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n <= 0) throw new UsageError(`${variable} must be a positive integer, got '${raw}'`);
  return n;
}

const FLAG_FOR_VARIABLE: Record<string, string> = {
  SANDGATE_HOST: 'host',
  SANDGATE_GRPC_PORT: 'grpc-port',
  SANDGATE_HTTP_PORT: 'http-port',
  SANDGATE_PEER_PORT: 'peer-port',
  SANDGATE_REDIS_URL: 'redis',
  SANDGATE_REPLICA_ID: 'replica-id',
  SANDGATE_DRIVER: 'driver',
  SANDGATE_STATE_DIR: 'state-dir',
  SANDGATE_SUPERVISOR_ENDPOINT: 'supervisor-endpoint',
  SANDGATE_ADVERTISE_HOST: 'advertise-host',
};

function flagName(variable: string): string {
  return FLAG_FOR_VARIABLE[variable] ?? variable;
}

function parseBooleanEnv(raw: string, what: string): boolean {
  const v = raw.trim().toLowerCase();
  if (v === '1' || v === 'true') return true;
  if (v === '0' || v === 'false') return false;
  throw new UsageError(`${what} must be 0 or 1, got '${raw}'`);
}
