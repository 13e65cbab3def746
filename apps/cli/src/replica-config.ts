// `sandgate gateway` and `sandgate up` flags: built from the gateway's option table
// (REPLICA_OPTIONS), so a flag exists exactly where the table says; values are then resolved by
// the gateway's parseReplicaConfig. The host facts behind the computed defaults are injected.
import { randomBytes } from 'node:crypto';
import os from 'node:os';
// The config module imports only pure libraries: `@sandgate/gateway` (Redis, gRPC, drivers) stays
// unloaded until a command actually starts a replica.
import { ConfigError, parseReplicaConfig, readOption, resolveOption, REPLICA_OPTIONS, WORKER_ID_OPTION, WORKER_METRICS_PORT_OPTION, type HostFacts, type ReplicaConfig } from '@sandgate/gateway/config';
import type { WorkerConfig } from '@sandgate/gateway';
import { UsageError, parseCommand, type Env } from './args.ts';

export type { HostFacts };

export function hostFacts(): HostFacts {
  return { hostname: os.hostname(), pid: process.pid, homedir: os.homedir(), randomHex: () => randomBytes(2).toString('hex') };
}

/** Single-valued flags only: every value is a string or, for a switch, a boolean. */
type FlagOptions = Record<string, { type: 'string' | 'boolean'; short?: string }>;

type Command = 'gateway' | 'up' | 'worker';

function flagOptions(command: Command): FlagOptions {
  const options: FlagOptions = { help: { type: 'boolean', short: 'h' } };
  for (const spec of Object.values(REPLICA_OPTIONS)) {
    if (spec.flag === undefined || (command === 'up' && !spec.up) || (command === 'worker' && !spec.worker)) continue;
    options[spec.flag] = { type: spec.flagSets === undefined ? 'string' : 'boolean' };
  }
  if (command === 'worker') {
    options[WORKER_ID_OPTION.flag!] = { type: 'string' };
    options[WORKER_METRICS_PORT_OPTION.flag!] = { type: 'string' };
  }
  return options;
}

function parseFlags(argv: string[], env: Env, facts: HostFacts, command: Command) {
  const { values, positionals } = parseCommand(argv, flagOptions(command), command);
  if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`, command);
  try {
    const config = parseReplicaConfig(values, env, facts);
    const workerId = command === 'worker' ? resolveOption(WORKER_ID_OPTION, values[WORKER_ID_OPTION.flag!], env, config, facts) : '';
    const metricsPort = command === 'worker' ? resolveOption(WORKER_METRICS_PORT_OPTION, values[WORKER_METRICS_PORT_OPTION.flag!], env, config, facts) : null;
    return { values, config, workerId, metricsPort };
  } catch (err) {
    if (err instanceof ConfigError) throw new UsageError(err.message, command);
    throw err;
  }
}

/** `sandgate gateway`: its flags over SANDGATE_* variables over the defaults. */
export function resolveReplicaConfig(argv: string[], env: Env, facts: HostFacts = hostFacts()): ReplicaConfig {
  return parseFlags(argv, env, facts, 'gateway').config;
}

export interface UpConfig {
  config: ReplicaConfig;
  /** True when neither --redis nor SANDGATE_REDIS_URL was given: `up` runs its own redis-server. */
  privateRedis: boolean;
  /** True when neither --driver nor SANDGATE_DRIVER was given: `up` picks what the machine has. */
  pickDriver: boolean;
}

/** `sandgate up`: the same resolution over its smaller flag set; workers always run. */
export function resolveUpConfig(argv: string[], env: Env, facts: HostFacts = hostFacts()): UpConfig {
  const { values, config } = parseFlags(argv, { ...env, [REPLICA_OPTIONS.workers.env]: undefined }, facts, 'up');
  const privateRedis = readOption(REPLICA_OPTIONS.redisUrl, values.redis, env) === undefined;
  const pickDriver = readOption(REPLICA_OPTIONS.driver, values.driver, env) === undefined;
  return { config: { ...config, workers: true }, privateRedis, pickDriver };
}

/** `sandgate worker`: the replica options it shares (same flags, variables and precedence) and its id. */
export function resolveWorkerConfig(argv: string[], env: Env, facts: HostFacts = hostFacts()): WorkerConfig {
  const { config, workerId, metricsPort } = parseFlags(argv, env, facts, 'worker');
  if (config.supervisorEndpoint === '') {
    throw new UsageError(
      '--supervisor-endpoint (or SANDGATE_SUPERVISOR_ENDPOINT) is required: the supervisors of restarted sandboxes dial it (the load balancer)',
      'worker',
    );
  }
  return { ...config, workerId, metricsPort, jobsEnabled: !config.debugBreaks.has('jobs') };
}
