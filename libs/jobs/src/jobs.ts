// Durable job definitions: names, ids, data, delays. Every job is idempotent and carries the id
// of the thing it fences on, so BullMQ running it twice (a stalled worker, a retry) changes
// nothing the second time.
import { jobQueue } from '@sandgate/store';

/** The BullMQ queue every job rides on (named with the rest of the key schema in libs/store). */
export const QUEUE_NAME = jobQueue.name;

/** Grace after an exec deadline before the backstop looks: the supervisor's own kill comes first. */
export const EXEC_DEADLINE_GRACE_MS = 2_000;
/** How often the reconcile job runs. */
export const RECONCILE_EVERY_MS = 10_000;
/** The reconcile job's scheduler id: one for the whole cluster, so every worker's upsert is the same. */
export const RECONCILE_SCHEDULER_ID = 'reconcile';

export const JobName = {
  /** After an exec's deadline plus a grace: kill anything of the exec still running. */
  ExecDeadline: 'exec-deadline',
  /** Delete a sandbox (ephemeral cleanup, or a user's delete that must survive a crash). */
  DeleteSandbox: 'delete-sandbox',
  /** A sandbox still not Ready at its provisioning deadline becomes Error and loses its compute. */
  ProvisionDeadline: 'provision-deadline',
  /** Restart policy: start the main process again after a backoff. */
  Restart: 'restart',
  /** Repeatable: compute vs records, stuck deletes, unfinished ephemeral cleanups. */
  Reconcile: 'reconcile',
  /** Bring a warm pool to its size: retire members of an older template or that failed, start new ones; retire all of a deleted pool. */
  PoolRefill: 'pool-refill',
} as const;
export type JobName = (typeof JobName)[keyof typeof JobName];

export interface ExecDeadlineData {
  sandboxId: string;
  execId: string;
  deadlineMs: number;
}

export interface DeleteSandboxData {
  sandboxId: string;
  reason: 'user' | 'ephemeral' | 'reconcile';
}

export interface ProvisionDeadlineData {
  sandboxId: string;
  /** The run being provisioned: the record's resource_version when the run began (fences retries of older runs). */
  runStartedAtMs: number;
  timeoutMs: number;
}

export interface RestartData {
  sandboxId: string;
  /** The run whose exit triggered the restart: a restart of an older run is ignored. */
  instanceId: string;
}

export interface PoolRefillData {
  pool: string;
}

/** BullMQ job ids name what they fence on; ':' is reserved by BullMQ's key layout. */
export const jobIds = {
  execDeadline: (execId: string) => `exec-deadline_${execId}`,
  ephemeralCleanup: (sandboxId: string, instanceId: string) => `ephemeral_${sandboxId}_${instanceId}`,
  userDelete: (sandboxId: string) => `delete_${sandboxId}`,
  provisionDeadline: (sandboxId: string, runStartedAtMs: number) => `provision_${sandboxId}_${runStartedAtMs}`,
  restart: (sandboxId: string, instanceId: string) => `restart_${sandboxId}_${instanceId}`,
  // Removed once done: while one waits, more requests for the same pool fold into it.
  poolRefill: (pool: string) => `pool-refill_${pool}`,
} as const;

/** CLIENT SETNAME of the job connections of one process (a replica id or a worker id). */
export const jobConnectionNames = (processId: string) =>
  ({ scheduler: `sandgate:${processId}:jobs-scheduler`, worker: `sandgate:${processId}:jobs-worker` }) as const;
