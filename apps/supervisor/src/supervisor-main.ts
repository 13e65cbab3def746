// The in-sandbox supervisor's process: configuration, logging, signals, then the Supervisor.
// Started by main.ts (the entry point), which loads it through the compile cache first.
import { ConfigError, loadProcessConfig } from './config.ts';
import { createLineLogger } from '@sandgate/telemetry/line-log';
import { Supervisor } from './supervisor.ts';
import { startIdleTrim } from './memory-trim.ts';
// Not an ES import of node:tls: see gateway-client.ts.
const { setDefaultCACertificates } = process.getBuiltinModule('node:tls');

const SHUTDOWN_DEADLINE_MS = 10_000;

export function runSupervisor(): void {
  // Losing our stdout/stderr (EPIPE) must not turn into an uncaught 'error' event.
  process.stdout.on('error', () => {});
  process.stderr.on('error', () => {});

  let config;
  try {
    config = loadProcessConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      createLineLogger({ sandbox_id: err.sandboxId }, err.logLevel).error('invalid configuration', { err: err.message });
      process.exit(2);
    }
    throw err;
  }
  // Every line names the sandbox: the driver sends our stderr to the sandbox log, and those logs are
  // aggregated across sandboxes.
  const log = createLineLogger({ sandbox_id: config.sandboxId }, config.logLevel);
  // The only TLS peer a supervisor has is the gateway, and it dials it with the gateway's CA
  // (gateway-client.ts). Node still builds a process-wide store of default roots at the first TLS
  // connection: under --use-openssl-ca (SUPERVISOR_NODE_FLAGS) from the system's bundle, about
  // 0.7 MiB kept for the supervisor's life. Made the gateway's CA alone, that store costs nothing
  // and trusts nothing else (BENCHMARKS.md, "The compile cache's entries and the bundled root
  // certificates").
  if (config.gatewayTls) setDefaultCACertificates([config.gatewayTls.ca]);

  process.on('uncaughtException', (err) => log.error('uncaught exception (continuing)', { err }));
  process.on('unhandledRejection', (err) => log.error('unhandled rejection (continuing)', { err }));
  // A hangup of whatever started us is not a reason to stop serving the sandbox.
  process.on('SIGHUP', () => log.warn('SIGHUP ignored'));

  const supervisor = new Supervisor(config, log, {
    onFatal: (reason) => {
      log.error('supervisor cannot go on', { reason });
      setTimeout(() => process.exit(1), SHUTDOWN_DEADLINE_MS).unref();
      void supervisor.shutdown(reason).finally(() => process.exit(1));
    },
  });

  const onSignal = (signal: NodeJS.Signals) => {
    log.info('signal received', { signal });
    setTimeout(() => {
      log.error('shutdown took too long, exiting anyway');
      process.exit(1);
    }, SHUTDOWN_DEADLINE_MS).unref();
    supervisor
      .shutdown(signal)
      .catch((err: unknown) => log.error('shutdown failed', { err }))
      .finally(() => {
        log.info('supervisor stopped');
        process.exit(0);
      });
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);

  supervisor.start().catch((err: unknown) => {
    // Without its confinement the workload must not run at all.
    log.error('cannot confine the workload', { err });
    process.exit(2);
  });
  startIdleTrim({ log, collectNow: () => !supervisor.awaitingClaim });
}

