// The durable job workers wired to this package's services: the same code inside a replica
// (unless --no-workers) and in a standalone `sandgate worker` (worker.ts).
import { ClusterCounters, OrphanQuarantine, PhaseCounts, type SandboxStore, type RedisClient } from '@sandgate/store';
import type { ComputeDriver } from '@sandgate/compute';
import type { Logger, Metrics } from '@sandgate/telemetry';
import type { DebugBreak } from '@sandgate/core';
import { jobConnectionNames, jobProcessors, startJobWorker, type ExecKiller, type JobScheduler, type MainStarter, type PoolKeeper, type RunningWorker } from '@sandgate/jobs';
import type { LifecycleService } from './sandboxes/lifecycle-service.ts';

export interface JobRuntimeDeps {
  /** The process's general connection (cluster-wide counters). */
  redis: RedisClient;
  store: SandboxStore;
  driver: ComputeDriver;
  scheduler: JobScheduler;
  lifecycle: LifecycleService;
  /** Kills execs on the owner and knows whether a session is live (the ExecRouter). */
  router: ExecKiller & MainStarter & { sessionLive(sandboxId: string): Promise<boolean> };
  /** Warm pools' refills (the PoolService). */
  pools: PoolKeeper;
  log: Logger;
  metrics: Metrics;
}

/** Installs the reconcile schedule and starts taking jobs. */
/**
 * `processId` (the replica or worker id) names the job connections in CLIENT LIST; `config` is the
 * process's parsed configuration (a replica's or a standalone worker's).
 */
export async function runJobWorker(
  processId: string,
  config: {
    redisUrl: string;
    debugBreaks: ReadonlySet<DebugBreak>;
    /** PEM CA of a rediss:// Redis ('' for none). */
    redisTlsCa?: string;
    /** How long compute must be seen without a record before the reconcile sweep deletes it. */
    orphanGraceMs: number;
    /** How old a half-done create or delete must be before the sweep settles it. */
    pendingGraceMs: number;
  },
  deps: JobRuntimeDeps,
): Promise<RunningWorker> {
  await deps.scheduler.ensureReconcile();
  const processors = jobProcessors({
    store: deps.store,
    driver: deps.driver,
    scheduler: deps.scheduler,
    lifecycle: deps.lifecycle,
    execs: deps.router,
    pools: deps.pools,
    sessionLive: (id) => deps.router.sessionLive(id),
    incrementCounter: (name, by) => new ClusterCounters(deps.redis).incr(name, by),
    phaseCounts: new PhaseCounts(deps.redis),
    debugBreaks: config.debugBreaks,
    orphans: new OrphanQuarantine(deps.redis),
    orphanGraceMs: config.orphanGraceMs,
    pendingGraceMs: config.pendingGraceMs,
    log: deps.log,
    metrics: deps.metrics,
  });
  return startJobWorker(config.redisUrl, processors, {
    connectionName: jobConnectionNames(processId).worker,
    redisTlsCa: config.redisTlsCa,
    onError: (err) => deps.log.warn('job worker error', { err: err.message }),
    metrics: deps.metrics,
  });
}

