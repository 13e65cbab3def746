// sandgate worker [flags]: runs only the durable job workers until SIGTERM/SIGINT, next to
// replicas started with --no-workers. It listens on nothing.
import { parseDebugBreaks, DebugBreakError } from '@sandgate/core';
import type { RunningStandaloneWorker, WorkerConfig } from '@sandgate/gateway';
import { UsageError, parseCommand, type Env } from '../args.ts';
import type { CommandContext } from '../context.ts';
import { ExitError } from '../errors.ts';
import { hostFacts, mergeReplicaConfig, type HostFacts } from '../replica-config.ts';
import { waitForShutdownSignal } from '../signals.ts';

export const WORKER_OPTIONS = {
  redis: { type: 'string' },
  'worker-id': { type: 'string' },
  driver: { type: 'string' },
  'state-dir': { type: 'string' },
  'supervisor-endpoint': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** Flags and SANDGATE_* variables as for `sandgate gateway` (same names, same precedence). */
export function resolveWorkerConfig(argv: string[], env: Env, facts: HostFacts = hostFacts()): WorkerConfig {
  const { values, positionals } = parseCommand(argv, WORKER_OPTIONS, 'worker');
  if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`, 'worker');
  const replica = mergeReplicaConfig(values, env, facts);
  if (replica.supervisorEndpoint === '') {
    throw new UsageError(
      '--supervisor-endpoint (or SANDGATE_SUPERVISOR_ENDPOINT) is required: the supervisors of restarted sandboxes dial it (the load balancer)',
      'worker',
    );
  }
  const workerId = values['worker-id'] ?? (env.SANDGATE_WORKER_ID || `worker-${facts.hostname}-${facts.pid}-${facts.randomHex()}`);
  if (workerId.trim() === '' || /\s/.test(workerId)) throw new UsageError(`worker id '${workerId}' must be non-empty without whitespace`, 'worker');
  let breaks;
  try {
    breaks = parseDebugBreaks(env);
  } catch (err) {
    if (err instanceof DebugBreakError) throw new UsageError(err.message, 'worker');
    throw err;
  }
  return {
    workerId,
    redisUrl: replica.redisUrl,
    driver: replica.driver,
    stateDir: replica.stateDir,
    supervisorEndpoint: replica.supervisorEndpoint,
    ownerTtlMs: replica.ownerTtlMs,
    provisionTimeoutMs: replica.provisionTimeoutMs,
    peerSecret: env.SANDGATE_PEER_SECRET || undefined,
    jobsEnabled: !breaks.has('jobs'),
  };
}

export async function run(argv: string[], ctx: CommandContext): Promise<number> {
  const config = resolveWorkerConfig(argv, ctx.env);
  // Listen for signals from the start: one arriving during startup stops the worker once it is up.
  const shutdown = waitForShutdownSignal();
  let worker: RunningStandaloneWorker;
  try {
    const { startWorker } = await import('@sandgate/gateway');
    worker = await startWorker(config);
  } catch (err) {
    process.stderr.write(`error: ${err instanceof Error ? err.message : String(err)}\n`);
    throw new ExitError(1);
  }
  process.stdout.write(`sandgate worker ${worker.workerId} driver=${config.driver}\n`);
  const signal = await shutdown;
  process.stderr.write(`received ${signal}: draining (running jobs finish first)\n`);
  await worker.close();
  return 0;
}
