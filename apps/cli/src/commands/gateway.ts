// sandgate gateway [flags]: runs one replica until SIGTERM/SIGINT.
import type { RunningReplica } from '@sandgate/gateway';
import type { CommandContext } from '../context.ts';
import { cliLogger } from '../diagnostics.ts';
import { ExitError } from '../errors.ts';
import { resolveReplicaConfig } from '../replica-config.ts';
import { waitForShutdownSignal } from '../signals.ts';
import { startProcessTracing } from '../tracing.ts';

export async function run(argv: string[], ctx: CommandContext): Promise<number> {
  const config = resolveReplicaConfig(argv, ctx.env);
  // Listen for signals from the start: one arriving during startup stops the replica once it is up.
  const shutdown = waitForShutdownSignal();
  const log = await cliLogger(ctx.env, 'gateway', config.logLevel);
  let replica: RunningReplica;
  let tracing: Awaited<ReturnType<typeof startProcessTracing>> = null;
  try {
    // Before the gateway (and ioredis with it) is imported: see libs/telemetry/src/otel.ts.
    tracing = await startProcessTracing('sandgate-gateway', config.replicaId, ctx.env);
    const { startReplica } = await import('@sandgate/gateway');
    replica = await startReplica(config);
  } catch (err) {
    log.debug('replica failed to start', { err });
    process.stderr.write(`error: ${err instanceof Error ? err.message : String(err)}\n`);
    throw new ExitError(1);
  }
  process.stdout.write(`sandgate replica ${replica.replicaId} grpc=${replica.grpcAddress} http=${replica.httpUrl} peer=${replica.peerAddress}\n`);
  const signal = await shutdown;
  log.info('signal received: stopping the replica', { signal, replica: replica.replicaId });
  await replica.close();
  await tracing?.shutdown();
  return 0;
}
