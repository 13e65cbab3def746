// sandgate worker [flags]: runs only the durable job workers until SIGTERM/SIGINT, next to
// replicas started with --no-workers. It listens on nothing, unless --metrics-port asks for its /metrics.
import type { RunningStandaloneWorker } from '@sandgate/gateway';
import type { CommandContext } from '../context.ts';
import { cliLogger } from '../diagnostics.ts';
import { ExitError } from '../errors.ts';
import { resolveWorkerConfig } from '../replica-config.ts';
import { waitForShutdownSignal } from '../signals.ts';
import { startProcessTracing } from '../tracing.ts';

export { resolveWorkerConfig } from '../replica-config.ts';

export async function run(argv: string[], ctx: CommandContext): Promise<number> {
  const config = resolveWorkerConfig(argv, ctx.env);
  // Listen for signals from the start: one arriving during startup stops the worker once it is up.
  const shutdown = waitForShutdownSignal();
  const log = await cliLogger(ctx.env, 'worker', config.logLevel);
  let worker: RunningStandaloneWorker;
  let tracing: Awaited<ReturnType<typeof startProcessTracing>> = null;
  try {
    // Before the gateway (and ioredis with it) is imported: see libs/telemetry/src/otel.ts.
    tracing = await startProcessTracing('sandgate-worker', config.workerId, ctx.env);
    const { startWorker } = await import('@sandgate/gateway');
    worker = await startWorker(config);
  } catch (err) {
    log.debug('worker failed to start', { err });
    process.stderr.write(`error: ${err instanceof Error ? err.message : String(err)}\n`);
    throw new ExitError(1);
  }
  process.stdout.write(`sandgate worker ${worker.workerId} driver=${config.driver}${worker.metricsAddress ? ` metrics=${worker.metricsAddress}` : ''}\n`);
  const signal = await shutdown;
  log.info('signal received: draining (running jobs finish first)', { signal, worker: worker.workerId });
  await worker.close();
  await tracing?.shutdown();
  return 0;
}
