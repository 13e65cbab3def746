// What each durable job does. The processors take their dependencies as narrow interfaces, so a
// replica (which may hold the sandbox's session itself) and a standalone `sandgate worker`
// (which holds none) run the same code. Decisions are the pure transitions of @sandgate/core;
// every processor is idempotent: it re-reads the record and does nothing for a run, phase or
// instance that has moved on.
import { Phase, mainProcessFinished, onComputeVanished, onProvisioningTimeout, restartOverdue, type LifecycleStatus, type DebugBreak } from '@sandgate/core';
import type { ComputeDriver } from '@sandgate/compute';
import { ClusterCounter, sameRun, type ClusterCounterName, type OrphanQuarantine, type PhaseCounts, type SandboxStore, type StoredSandbox } from '@sandgate/store';
import type { Logger, Metrics } from '@sandgate/telemetry';
import { RECONCILE_EVERY_MS } from './jobs.ts';
import type { JobScheduler } from './scheduler.ts';
import type { JobProcessors } from './worker.ts';

/** Reaches an exec's processes wherever the sandbox's session is (locally, or Peer.KillExec on the owner). */
export interface ExecKiller {
  /** The number of processes killed; throws UNAVAILABLE while no replica holds the session (the job retries). */
  killExec(sandboxId: string, execId: string): Promise<number>;
}

/** The lifecycle steps the jobs share with the API (implemented by the gateway's LifecycleService). */
export interface LifecycleTransitions {
  /** Applies a pure transition with compare-and-swap; null from `change` leaves the record alone. */
  transition(
    sandboxId: string,
    change: (status: LifecycleStatus, rec: StoredSandbox) => LifecycleStatus | null,
    extra?: Record<string, string>,
  ): Promise<StoredSandbox | null>;
  /** A line in the sandbox's log (source "gateway"), best effort. */
  note(sandboxId: string, message: string, level?: string): void;
  /** Deleting → compute deleted → record and keys removed. Idempotent. */
  finishDelete(sandboxId: string): Promise<boolean>;
  /** A new run on the kept filesystem (new credential, supervisor, provisioning deadline). */
  launchNewRun(rec: StoredSandbox, why: string, resetRestarts: boolean): Promise<StoredSandbox | null>;
  /** Compute that died before its supervisor connected: Error (ComputeFailed) with the driver's reason. */
  failLaunch(rec: StoredSandbox): Promise<void>;
  /** Enqueues the cleanup of an ephemeral sandbox whose run is over (core's ephemeralRunOver) if it is due; true if it did. */
  maybeScheduleEphemeralCleanup(rec: StoredSandbox): Promise<boolean>;
}

/** Keeps warm pools at their size (the gateway's PoolService). */
export interface PoolKeeper {
  /** Brings one pool to its size; retires every member of a pool that is gone. Idempotent. */
  refill(pool: string): Promise<unknown>;
  /** Every pool with a definition or members left to retire. */
  names(): Promise<string[]>;
}

/** Starts a claimed pool member's main process wherever its session is (the ExecRouter). */
export interface MainStarter {
  /** False while no replica holds the session (the supervisor gets it at its next hello). */
  startMain(sandboxId: string): Promise<boolean>;
}

/** A claim whose start_main is not confirmed this long after the claim is sent again by the sweep. */
const MAIN_PENDING_RESEND_MS = 5_000;

export interface JobDeps {
  store: Pick<SandboxStore, 'get' | 'pages' | 'settlePending'>;
  driver: Pick<ComputeDriver, 'list' | 'inspect' | 'stop' | 'delete'>;
  scheduler: Pick<JobScheduler, 'deleteSandbox' | 'restart' | 'poolRefill'>;
  lifecycle: LifecycleTransitions;
  execs: ExecKiller & MainStarter;
  pools: PoolKeeper;
  /** Is a supervisor session live anywhere for this sandbox? */
  sessionLive(sandboxId: string): Promise<boolean>;
  /** Adds to a cluster-wide counter (libs/store's ClusterCounters). */
  incrementCounter(name: ClusterCounterName, by: number): Promise<void>;
  /** Where the sweep publishes the fleet's records by phase, for every replica's gauge (libs/store's PhaseCounts). */
  phaseCounts: Pick<PhaseCounts, 'publish'>;
  /** Debug faults (negative chaos runs only; empty otherwise): `reconcile` skips the sweep. */
  debugBreaks: ReadonlySet<DebugBreak>;
  /** Where the sweep keeps orphaned compute's first sightings (libs/store's OrphanQuarantine). */
  orphans: Pick<OrphanQuarantine, 'sight'>;
  /** How long compute must be seen without a record before the sweep deletes it (0: at once). */
  orphanGraceMs: number;
  /** How old a create or delete left half-done must be before the sweep settles it (SandboxStore.settlePending). */
  pendingGraceMs: number;
  log: Logger;
  metrics: Metrics;
}

/** A record still without compute this long after its creation belongs to an interrupted create. */
const INTERRUPTED_CREATE_MS = 30_000;

const now = () => new Date();

export function jobProcessors(deps: JobDeps): JobProcessors {
  return {
    async execDeadline(data) {
      if (!(await deps.store.get(data.sandboxId))) return { skipped: 'sandbox gone' };
      // Throws UNAVAILABLE while no replica holds the session: BullMQ retries with backoff.
      const killed = await deps.execs.killExec(data.sandboxId, data.execId);
      if (killed > 0) {
        deps.metrics.inc('sandgate_exec_backstop_kills_total', killed);
        // One exec killed (whatever the number of its processes), on the replica that ran the job.
        deps.metrics.inc('sandgate_exec_kills_total', 1, { reason: 'backstop' });
        await deps.incrementCounter(ClusterCounter.execBackstopKills, killed);
        deps.log.warn('exec backstop killed processes past the deadline', { ...data, killed });
      }
      return { killed };
    },

    async deleteSandbox(data) {
      // Ephemeral cleanup does not wait for the supervisor to go away: count that it did not.
      if (data.reason === 'ephemeral' && (await deps.sessionLive(data.sandboxId))) {
        await deps.incrementCounter(ClusterCounter.ephemeralDeletedWhileConnected, 1);
      }
      const removed = await deps.lifecycle.finishDelete(data.sandboxId);
      return { removed, reason: data.reason };
    },

    async provisionDeadline(data) {
      const rec = await deps.store.get(data.sandboxId);
      if (!rec || rec.runStartedAtMs !== data.runStartedAtMs) return { skipped: 'run is gone or superseded' };
      const failed = await deps.lifecycle.transition(data.sandboxId, (s) => onProvisioningTimeout(s, data.timeoutMs, now()));
      if (failed?.sandbox.status?.phase !== Phase.ERROR || rec.sandbox.status?.phase === Phase.ERROR) return { skipped: 'not provisioning' };
      deps.lifecycle.note(data.sandboxId, 'provisioning deadline passed; compute removed', 'ERROR');
      await deps.driver.stop(data.sandboxId, rec.compute);
      return { failed: true };
    },

    async restart(data) {
      const rec = await deps.store.get(data.sandboxId);
      const status = rec?.sandbox.status as LifecycleStatus | undefined;
      if (!rec || !status || status.main_process_instance_id !== data.instanceId || !mainProcessFinished(status)) {
        return { skipped: 'no longer the finished run' };
      }
      await deps.lifecycle.transition(data.sandboxId, (s) => ({ ...s, restart_count: (s.restart_count ?? 0) + 1, next_restart_at_ms: 0 }));
      const fresh = await deps.store.get(data.sandboxId);
      if (fresh) await deps.lifecycle.launchNewRun(fresh, `restart policy: run ${fresh.sandbox.status?.restart_count ?? 0}`, false);
      return { restarted: true };
    },

    reconcile: () => reconcile(deps),

    poolRefill: (data) => deps.pools.refill(data.pool),
  };
}

/**
 * The repeatable sweep: compute without a record is quarantined, and removed once it has been
 * seen so for `orphanGraceMs`; a record whose compute vanished is marked; deletes interrupted by a crash are finished; finalized ephemeral sandboxes whose
 * cleanup job was lost get one, and so do overdue restarts (restartOverdue).
 */
async function reconcile(deps: JobDeps): Promise<unknown> {
  if (deps.debugBreaks.has('reconcile')) return { skipped: 'debug fault: reconcile' };
  // Creates and deletes whose replica died between two of their steps (SandboxStore.remove and
  // create): finished or undone first, so the scan below sees the records as they will stay.
  const pending = await deps.store.settlePending(deps.pendingGraceMs);
  if (pending.finished || pending.released || pending.deleted) deps.log.warn('reconcile settled creates and deletes left half-done by a replica', pending);
  // Compute first, then records: a record is written before its compute, so every compute
  // listed here has a record the scan below sees (unless it is being deleted anyway).
  const compute = await deps.driver.list();
  const computeById = new Map(compute.map((c) => [c.sandboxId, c]));
  const recordIds = new Set<string>();
  const phases = new Map<number, number>();
  let orphans = 0;
  let quarantined = 0;
  let vanished = 0;
  let resumed = 0;
  let ephemeral = 0;
  let interrupted = 0;
  let restarts = 0;
  let mainResent = 0;
  for await (const page of deps.store.pages()) {
    for (const rec of page) {
      const id = rec.sandbox.metadata!.id!;
      if (recordIds.has(id)) continue; // SSCAN may repeat an id
      recordIds.add(id);
      const phase = rec.sandbox.status?.phase ?? Phase.UNSPECIFIED;
      phases.set(phase, (phases.get(phase) ?? 0) + 1);
      if (phase === Phase.DELETING) {
        await deps.scheduler.deleteSandbox(id);
        resumed++;
        continue;
      }
      // A create interrupted between writing the record and launching the compute (its replica
      // died; the client got UNAVAILABLE): creation is all-or-nothing, so the record goes.
      const createdAt = rec.sandbox.metadata!.created_at_ms ?? 0;
      if (phase === Phase.PROVISIONING && !rec.compute && !rec.runStartedAtMs && Date.now() - createdAt > INTERRUPTED_CREATE_MS) {
        await deps.scheduler.deleteSandbox(id);
        interrupted++;
        continue;
      }
      if (await deps.lifecycle.maybeScheduleEphemeralCleanup(rec)) ephemeral++;
      // A claimed pool member whose start_main was lost (the claiming replica died before sending
      // it): sent again, from the record, wherever the session is. Idempotent at the supervisor.
      if (rec.mainPending && Date.now() - (rec.sandbox.metadata!.created_at_ms ?? 0) > MAIN_PENDING_RESEND_MS) {
        await deps.execs.startMain(id).catch((err: unknown) => deps.log.warn('start_main resend failed', { sandboxId: id, err }));
        mainResent++;
      }
      const status = rec.sandbox.status as LifecycleStatus | undefined;
      if (status && restartOverdue(status, Date.now())) {
        await deps.scheduler.restart({ sandboxId: id, instanceId: status.main_process_instance_id ?? '' }, 0);
        deps.log.warn('restart overdue: its job was lost, enqueued again', { sandboxId: id, dueAtMs: Number(status.next_restart_at_ms) });
        restarts++;
      }
      if ((phase === Phase.PROVISIONING || phase === Phase.STARTING) && rec.compute && Date.now() - rec.runStartedAtMs > 10_000) {
        if ((await deps.driver.inspect(id, rec.compute)) !== 'running') await deps.lifecycle.failLaunch(rec);
        continue;
      }
      const running = computeById.get(id)?.state === 'running';
      const expectsCompute = phase === Phase.READY || phase === Phase.COMPLETED || (phase === Phase.ERROR && rec.compute !== null);
      // Give a fresh launch time to show up before calling it vanished.
      if (expectsCompute && !running && rec.compute && Date.now() - rec.runStartedAtMs > 5_000) {
        // Fenced by the run: a restart or start since the listing launched new compute.
        const marked = await deps.lifecycle.transition(id, (s, cur) => (sameRun(cur, rec) ? onComputeVanished(s, now()) : null));
        if (marked?.sandbox.status?.phase === Phase.ERROR && phase !== Phase.ERROR) {
          deps.lifecycle.note(id, 'sandbox compute vanished', 'ERROR');
          vanished++;
          // An ephemeral one is over now (ephemeralRunOver): cleaned up in this sweep, not the next.
          if (await deps.lifecycle.maybeScheduleEphemeralCleanup(marked)) ephemeral++;
        }
      }
    }
  }
  // Counted as the records were read (before this sweep's repairs land): good for a gauge. It
  // outlives two missed sweeps, then replicas count for themselves.
  await deps.phaseCounts.publish(phases, Date.now(), 3 * RECONCILE_EVERY_MS);
  // Compute without a record. The record may only look missing (a Redis failover in progress,
  // a primary back with stale data): deleting at first sight would destroy a live sandbox, so it
  // is quarantined first and deleted once seen orphaned for the whole grace period.
  const orphaned = compute.filter((c) => !recordIds.has(c.sandboxId));
  const sweptAt = Date.now();
  const firstSeen = await deps.orphans.sight(orphaned.map((c) => c.sandboxId), sweptAt);
  for (const c of orphaned) {
    const since = firstSeen.get(c.sandboxId) ?? sweptAt;
    if (sweptAt - since < deps.orphanGraceMs) {
      if (since === sweptAt) {
        deps.metrics.inc('sandgate_orphans_total', 1, { action: 'quarantined' });
        deps.log.warn('compute without a record quarantined: deleted if still without one after the grace period', { sandboxId: c.sandboxId, graceMs: deps.orphanGraceMs });
      }
      quarantined++;
      continue;
    }
    await deps.driver.delete(c.sandboxId, c.handle).catch(() => undefined);
    deps.metrics.inc('sandgate_orphans_total', 1, { action: 'deleted' });
    deps.log.warn('compute without a record deleted', { sandboxId: c.sandboxId, orphanedForMs: sweptAt - since });
    orphans++;
  }
  // Every pool gets a refill each sweep: a refill lost with a crashed replica is made up here.
  const pools = await deps.pools.names();
  for (const pool of pools) await deps.scheduler.poolRefill(pool);
  if (orphans || vanished || interrupted || restarts || mainResent) deps.log.warn('reconcile repaired state', { orphans, vanished, resumed, ephemeral, interrupted, restarts, mainResent });
  return { orphans, quarantined, vanished, resumed, ephemeral, interrupted, restarts, mainResent, pools: pools.length, pending };
}
