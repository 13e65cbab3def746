// The sandbox lifecycle as pure transitions: (current status, event) → next status, a no-op
// (null), or a refusal. The gateway performs I/O around these; nothing here reads a clock or Redis
// (the caller passes `now`).
import { Code, GatewayError } from './status.ts';
import { Phase, phaseName, readyCondition, type Condition } from './phases.ts';

export interface LifecycleStatus {
  phase?: number;
  conditions: { type?: string; status?: string; reason?: string; message?: string; last_transition_time?: string }[];
  main_process_instance_id?: string;
  exit_code?: number;
  restart_count?: number;
  next_restart_at_ms?: number;
  main_process_started_at_ms?: number;
  [key: string]: unknown;
}

export const Reason = {
  Provisioning: 'Provisioning',
  SupervisorConnected: 'SupervisorConnected',
  SupervisorDisconnected: 'SupervisorDisconnected',
  MainProcessCompleted: 'MainProcessCompleted',
  MainProcessFailed: 'MainProcessFailed',
  Stopping: 'Stopping',
  Stopped: 'Stopped',
  Starting: 'Starting',
  Deleting: 'Deleting',
  ProvisioningTimeout: 'ProvisioningTimeout',
  ComputeVanished: 'ComputeVanished',
  ComputeFailed: 'ComputeFailed',
} as const;

export const RETENTION_ANNOTATION = 'openshell.nvidia.com/retention';
export const RETENTION_EPHEMERAL = 'ephemeral';

export function isEphemeral(annotations: Record<string, string> | undefined): boolean {
  return annotations?.[RETENTION_ANNOTATION] === RETENTION_EPHEMERAL;
}

function withPhase(s: LifecycleStatus, phase: number, cond: Condition, extra: Partial<LifecycleStatus> = {}): LifecycleStatus {
  return { ...s, ...extra, phase, conditions: [cond] };
}

export function readyReason(s: LifecycleStatus): string | undefined {
  return s.conditions.find((c) => c.type === 'Ready')?.reason;
}

/** The main process has finished (successfully or not): its result is final for this run. */
export function mainProcessFinished(s: LifecycleStatus): boolean {
  return (s.phase === Phase.COMPLETED || (s.phase === Phase.ERROR && readyReason(s) === Reason.MainProcessFailed)) && s.exit_code !== undefined;
}

/**
 * An ephemeral sandbox's run is over, so the sandbox goes: its main process finished, or its
 * compute vanished while the record still said it was running. The second is how a finished
 * ephemeral sandbox comes back after a Redis failover lost its exit and its deletion (the
 * compute was deleted on the host, the record is the older one): nothing would finish it again.
 * Not ComputeFailed: a launch that failed keeps its error for the client to read.
 */
export function ephemeralRunOver(s: LifecycleStatus): boolean {
  return mainProcessFinished(s) || (s.phase === Phase.ERROR && readyReason(s) === Reason.ComputeVanished);
}

/** A supervisor's hello was accepted. Provisioning/Starting → Ready; a new run clears the last exit. */
export function onSupervisorConnected(s: LifecycleStatus, instanceId: string, now: Date): LifecycleStatus | null {
  const phase = s.phase ?? Phase.UNSPECIFIED;
  if (phase === Phase.PROVISIONING || phase === Phase.STARTING || phase === Phase.UNSPECIFIED) {
    const { exit_code: _dropped, ...rest } = s;
    const newRun = s.main_process_instance_id !== instanceId;
    return withPhase(rest, Phase.READY, readyCondition('True', Reason.SupervisorConnected, 'Supervisor session is connected', now), {
      main_process_instance_id: instanceId,
      ...(newRun ? { main_process_started_at_ms: now.getTime() } : {}),
    });
  }
  return null;
}

/** The supervisor session is gone (and no newer session took over). Ready → Provisioning. */
export function onSupervisorDisconnected(s: LifecycleStatus, now: Date): LifecycleStatus | null {
  if (s.phase !== Phase.READY) return null;
  return withPhase(s, Phase.PROVISIONING, readyCondition('False', Reason.SupervisorDisconnected, 'Supervisor session is not connected', now));
}

/**
 * The supervisor reports its main process exited. Fenced by instance id: a report from an older
 * run is ignored. Ready → Completed (0) or Error/MainProcessFailed (nonzero). Repeats are no-ops.
 */
export function onMainProcessExit(s: LifecycleStatus, instanceId: string, exitCode: number, now: Date): LifecycleStatus | null {
  if (!instanceId || s.main_process_instance_id !== instanceId) return null;
  // A sweep's ComputeVanished is a guess (a Ready record whose compute it did not find, e.g. after
  // a failover took the exit back); the run's own supervisor reporting its exit knows better.
  const vanished = s.phase === Phase.ERROR && readyReason(s) === Reason.ComputeVanished;
  if (s.phase !== Phase.READY && s.phase !== Phase.PROVISIONING && !vanished) return null;
  if (exitCode === 0) {
    return withPhase(s, Phase.COMPLETED, readyCondition('False', Reason.MainProcessCompleted, 'Main process exited with code 0', now), {
      exit_code: 0,
    });
  }
  return withPhase(s, Phase.ERROR, readyCondition('False', Reason.MainProcessFailed, `Main process exited with code ${exitCode}`, now), {
    exit_code: exitCode,
  });
}

export type StopPlan = { kind: 'noop' } | { kind: 'revoke-only' } | { kind: 'stop'; status: LifecycleStatus };

/** StopSandbox: Ready|Error|Stopping → Stopping; Stopped is idempotent; Completed only revokes access. */
export function planStop(s: LifecycleStatus, now: Date): StopPlan {
  const phase = s.phase;
  if (phase === Phase.STOPPED) return { kind: 'noop' };
  if (phase === Phase.COMPLETED) return { kind: 'revoke-only' };
  if (phase === Phase.READY || phase === Phase.ERROR || phase === Phase.STOPPING) {
    const { exit_code: _cleared, ...rest } = s;
    return { kind: 'stop', status: withPhase(rest, Phase.STOPPING, readyCondition('False', Reason.Stopping, 'Sandbox stop requested', now)) };
  }
  throw new GatewayError(Code.FAILED_PRECONDITION, `sandbox must be Ready to stop (current phase: ${phaseName(phase)})`);
}

export function onStopped(s: LifecycleStatus, now: Date): LifecycleStatus | null {
  if (s.phase !== Phase.STOPPING) return null;
  return withPhase(s, Phase.STOPPED, readyCondition('False', Reason.Stopped, 'Sandbox compute is stopped', now));
}

/** StartSandbox: Stopped|Completed|Error(MainProcessFailed or provisioning timeout) → Starting; Ready is a no-op. */
export function planStart(s: LifecycleStatus, now: Date): LifecycleStatus | null {
  const phase = s.phase;
  if (phase === Phase.READY || phase === Phase.STARTING) return null;
  const reason = readyReason(s);
  const startable =
    phase === Phase.STOPPED ||
    phase === Phase.COMPLETED ||
    (phase === Phase.ERROR &&
      (reason === Reason.MainProcessFailed || reason === Reason.ProvisioningTimeout || reason === Reason.ComputeVanished || reason === Reason.ComputeFailed));
  if (!startable) {
    throw new GatewayError(Code.FAILED_PRECONDITION, `sandbox must be Stopped to start (current phase: ${phaseName(phase)})`);
  }
  return withPhase(s, Phase.STARTING, readyCondition('False', Reason.Starting, 'Sandbox start requested', now));
}

/** Any phase → Deleting (idempotent). */
export function onDeleteRequested(s: LifecycleStatus, now: Date): LifecycleStatus | null {
  if (s.phase === Phase.DELETING) return null;
  return withPhase(s, Phase.DELETING, readyCondition('False', Reason.Deleting, 'Sandbox deletion requested', now));
}

/** The provisioning deadline passed: still Provisioning/Starting → Error. */
export function onProvisioningTimeout(s: LifecycleStatus, timeoutMs: number, now: Date): LifecycleStatus | null {
  if (s.phase !== Phase.PROVISIONING && s.phase !== Phase.STARTING) return null;
  return withPhase(
    s,
    Phase.ERROR,
    readyCondition('False', Reason.ProvisioningTimeout, `Supervisor did not connect within ${Math.round(timeoutMs / 1000)}s`, now),
  );
}

/** The compute died before its supervisor ever connected (e.g. an image that cannot run it). */
export function onComputeFailed(s: LifecycleStatus, message: string, now: Date): LifecycleStatus | null {
  if (s.phase !== Phase.PROVISIONING && s.phase !== Phase.STARTING) return null;
  return withPhase(s, Phase.ERROR, readyCondition('False', Reason.ComputeFailed, message, now));
}

/**
 * Reconcile found the record's compute gone behind sandgate's back. Not for a launch that already
 * failed: after ProvisioningTimeout sandgate removed the compute itself, after ComputeFailed it
 * never ran, and that reason (what the caller needs to read) must not be replaced by this one.
 */
export function onComputeVanished(s: LifecycleStatus, now: Date): LifecycleStatus | null {
  if (s.phase === Phase.DELETING || s.phase === Phase.STOPPED || s.phase === Phase.STOPPING) return null;
  const reason = readyReason(s);
  if (s.phase === Phase.ERROR && (reason === Reason.ComputeVanished || reason === Reason.ProvisioningTimeout || reason === Reason.ComputeFailed)) return null;
  return withPhase(s, Phase.ERROR, readyCondition('False', Reason.ComputeVanished, 'The sandbox compute no longer exists', now));
}

/** Restart policy: should a finished main process be started again? */
export function shouldRestart(restartPolicy: number | undefined, exitCode: number): boolean {
  if (restartPolicy === 3) return true; // ALWAYS
  if (restartPolicy === 2) return exitCode !== 0; // ON_FAILURE
  return false; // NEVER / unspecified
}

/** How long past its time a restart may be before the reconcile sweep takes its job for lost. */
export const RESTART_OVERDUE_MS = 10_000;

/**
 * A finished run whose restart was due more than RESTART_OVERDUE_MS ago and has not happened:
 * its durable job is taken for lost (BullMQ's own writes are not confirmed with WAIT, so a Redis
 * failover can take a job enqueued just before it, while the record that says a restart is due
 * survived), and the reconcile sweep enqueues it again. The job's id is per run, so a job that
 * is only late is not doubled; a restart that happened cleared `next_restart_at_ms`.
 */
export function restartOverdue(s: LifecycleStatus, nowMs: number): boolean {
  const due = Number(s.next_restart_at_ms ?? 0);
  return due > 0 && mainProcessFinished(s) && nowMs - due > RESTART_OVERDUE_MS;
}

/** Exponential backoff for restarts: 1 s, 2 s, 4 s … capped at 60 s. */
export function restartDelayMs(restartCount: number): number {
  return Math.min(60_000, 1000 * 2 ** Math.min(restartCount, 6));
}

/** Phases in which a WatchSandbox with stop_on_terminal ends. */
export function isWatchTerminal(phase: number | undefined): boolean {
  return phase === Phase.READY || phase === Phase.COMPLETED || phase === Phase.STOPPED || phase === Phase.ERROR;
}
