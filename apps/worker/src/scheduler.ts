// Enqueues durable jobs. Used by replicas on the request path; cheap and idempotent (job ids).
import { Queue, type ConnectionOptions } from 'bullmq';
import {
  JobName,
  QUEUE_NAME,
  jobIds,
  type DeleteSandboxData,
  type ExecDeadlineData,
  type ProvisionDeadlineData,
  type RestartData,
} from './jobs.ts';

/** Grace after an exec deadline before the backstop looks: the supervisor's own kill comes first. */
export const EXEC_DEADLINE_GRACE_MS = 2_000;
/** How often the reconcile job runs. */
export const RECONCILE_EVERY_MS = 10_000;

export class JobScheduler {
  private readonly queue: Queue;
  /** DEBUG ONLY (SANDGATE_DEBUG_DISABLE_JOBS): when false nothing is enqueued, for the chaos suite's negative run. */
  private readonly enabled: boolean;

  constructor(connection: ConnectionOptions, opts: { enabled?: boolean } = {}) {
    this.enabled = opts.enabled ?? true;
    this.queue = new Queue(QUEUE_NAME, {
      connection,
      defaultJobOptions: {
        removeOnComplete: { count: 1000 },
        removeOnFail: { count: 1000 },
        attempts: 10,
        backoff: { type: 'exponential', delay: 500 },
      },
    });
  }

  async execDeadline(data: ExecDeadlineData): Promise<void> {
    if (!this.enabled) return;
    await this.queue.add(JobName.ExecDeadline, data, {
      jobId: jobIds.execDeadline(data.execId),
      delay: Math.max(0, data.deadlineMs + EXEC_DEADLINE_GRACE_MS - Date.now()),
    });
  }

  /** The exec ended cleanly and its tree was killed by the supervisor: the backstop is moot. */
  async cancelExecDeadline(execId: string): Promise<void> {
    await this.queue.remove(jobIds.execDeadline(execId));
  }

  async ephemeralCleanup(sandboxId: string, instanceId: string): Promise<void> {
    const data: DeleteSandboxData = { sandboxId, reason: 'ephemeral' };
    // Many attempts: a deletion must eventually happen, whatever was down at the time.
    if (!this.enabled) return;
    await this.queue.add(JobName.DeleteSandbox, data, { jobId: jobIds.ephemeralCleanup(sandboxId, instanceId), attempts: 50 });
  }

  async deleteSandbox(sandboxId: string): Promise<void> {
    const data: DeleteSandboxData = { sandboxId, reason: 'user' };
    if (!this.enabled) return;
    await this.queue.add(JobName.DeleteSandbox, data, { jobId: jobIds.userDelete(sandboxId), attempts: 50 });
  }

  async provisionDeadline(data: ProvisionDeadlineData): Promise<void> {
    if (!this.enabled) return;
    await this.queue.add(JobName.ProvisionDeadline, data, {
      jobId: jobIds.provisionDeadline(data.sandboxId, data.runStartedAtMs),
      delay: Math.max(0, data.runStartedAtMs + data.timeoutMs - Date.now()),
    });
  }

  async restart(data: RestartData, delayMs: number): Promise<void> {
    if (!this.enabled) return;
    await this.queue.add(JobName.Restart, data, { jobId: jobIds.restart(data.sandboxId, data.instanceId), delay: delayMs });
  }

  /** Installs the repeatable reconcile job (idempotent: one scheduler id for the whole cluster). */
  async ensureReconcile(): Promise<void> {
    if (!this.enabled) return;
    await this.queue.upsertJobScheduler('reconcile', { every: RECONCILE_EVERY_MS }, { name: JobName.Reconcile, data: {} });
  }

  async close(): Promise<void> {
    await this.queue.close();
  }
}
