// Enqueues durable jobs. Used by replicas on the request path, and by the jobs themselves (the
// reconcile sweep re-enqueues); cheap and idempotent (job ids).
import { Queue, type JobsOptions } from 'bullmq';
import { createRedisConnection, jobQueueFor, type RedisClient } from '@sandgate/store';
import type { Metrics } from '@sandgate/telemetry';
import { inSpan, injectContext, SpanKind, TraceAttr, tracingEnabled } from '@sandgate/telemetry';
import {
  EXEC_DEADLINE_GRACE_MS,
  JobName,
  QUEUE_NAME,
  RECONCILE_EVERY_MS,
  RECONCILE_SCHEDULER_ID,
  jobIds,
  type DeleteSandboxData,
  type ExecDeadlineData,
  type ProvisionDeadlineData,
  type RestartData,
  type PoolRefillData,
} from './jobs.ts';

export interface JobSchedulerOptions {
  /** CLIENT SETNAME of the scheduler's connection, so an operator (and a test) can tell it apart. */
  connectionName: string;
  /** DEBUG ONLY (the `jobs` debug fault): when false nothing is enqueued, for the chaos suite's negative run. */
  enabled?: boolean;
  /** PEM CA of a `rediss://` Redis (see createRedisConnection). */
  redisTlsCa?: string;
}

/** The queue states sandgate_queue_jobs reports. */
export const QUEUE_STATES = ['waiting', 'active', 'delayed', 'failed'] as const;

/** How often a replica reads the queue's depth for sandgate_queue_jobs (scrapes read the cache). */
export const QUEUE_DEPTH_EVERY_MS = 5_000;

export class JobScheduler {
  private readonly queue: Queue;
  /** Ours, not BullMQ's: BullMQ never closes a connection it was handed, so close() does. */
  private readonly connection: RedisClient;
  private readonly enabled: boolean;

  constructor(redisUrl: string, opts: JobSchedulerOptions) {
    this.enabled = opts.enabled ?? true;
    this.connection = createRedisConnection(redisUrl, 'commands', { connectionName: opts.connectionName, tlsCa: opts.redisTlsCa });
    this.queue = new Queue(QUEUE_NAME, {
      connection: this.connection,
      prefix: jobQueueFor(this.connection).prefix,
      defaultJobOptions: {
        removeOnComplete: { count: 1000 },
        removeOnFail: { count: 1000 },
        attempts: 10,
        backoff: { type: 'exponential', delay: 500 },
      },
    });
  }

  /**
   * queue.add inside a PRODUCER span whose context rides in the job's data (`trace`): the
   * processing span, on whichever process runs the job, links back to it (worker.ts).
   */
  private async add(name: string, data: object, opts: JobsOptions): Promise<void> {
    if (!tracingEnabled()) {
      await this.queue.add(name, data, opts);
      return;
    }
    await inSpan(
      `sandgate.job.enqueue ${name}`,
      { kind: SpanKind.PRODUCER, attributes: { [TraceAttr.jobName]: name, [TraceAttr.jobId]: opts.jobId ?? '', [TraceAttr.queue]: QUEUE_NAME } },
      async () => {
        const trace = injectContext();
        await this.queue.add(name, trace.traceparent ? { ...data, trace } : data, opts);
      },
    );
  }

  async execDeadline(data: ExecDeadlineData): Promise<void> {
    if (!this.enabled) return;
    await this.add(JobName.ExecDeadline, data, {
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
    await this.add(JobName.DeleteSandbox, data, { jobId: jobIds.ephemeralCleanup(sandboxId, instanceId), attempts: 50 });
  }

  async deleteSandbox(sandboxId: string): Promise<void> {
    const data: DeleteSandboxData = { sandboxId, reason: 'user' };
    if (!this.enabled) return;
    await this.add(JobName.DeleteSandbox, data, { jobId: jobIds.userDelete(sandboxId), attempts: 50 });
  }

  async provisionDeadline(data: ProvisionDeadlineData): Promise<void> {
    if (!this.enabled) return;
    await this.add(JobName.ProvisionDeadline, data, {
      jobId: jobIds.provisionDeadline(data.sandboxId, data.runStartedAtMs),
      delay: Math.max(0, data.runStartedAtMs + data.timeoutMs - Date.now()),
    });
  }

  async restart(data: RestartData, delayMs: number): Promise<void> {
    if (!this.enabled) return;
    await this.add(JobName.Restart, data, { jobId: jobIds.restart(data.sandboxId, data.instanceId), delay: delayMs });
  }

  /**
   * Brings the pool to its size soon. One waiting job per pool (its id); it is removed when done,
   * so a request after that makes a new one. Idempotent: a refill of a full pool does nothing.
   */
  async poolRefill(pool: string, delayMs = 0): Promise<void> {
    const data: PoolRefillData = { pool };
    if (!this.enabled) return;
    await this.add(JobName.PoolRefill, data, { jobId: jobIds.poolRefill(pool), delay: delayMs, removeOnComplete: true, removeOnFail: true });
  }

  /** Installs the repeatable reconcile job (idempotent: one scheduler id for the whole cluster). */
  async ensureReconcile(): Promise<void> {
    if (!this.enabled) return;
    await this.queue.upsertJobScheduler(RECONCILE_SCHEDULER_ID, { every: RECONCILE_EVERY_MS }, { name: JobName.Reconcile, data: {} });
  }

  /**
   * sandgate_queue_jobs{queue,state}: the queue's job counts, read every `everyMs` (one Redis
   * round trip) and cached, so scrapes never reach Redis. Stops with close().
   */
  reportDepth(metrics: Metrics, everyMs = QUEUE_DEPTH_EVERY_MS): void {
    let counts: Record<string, number> | null = null;
    const read = () => {
      this.queue.getJobCounts(...QUEUE_STATES).then(
        (c) => (counts = c),
        () => undefined, // Redis unreachable: keep the last counts (the Redis alert says why)
      );
    };
    read();
    this.depthTimer = setInterval(read, everyMs);
    this.depthTimer.unref();
    metrics.family('sandgate_queue_jobs', 'gauge', () => (counts ? QUEUE_STATES.map((state) => [{ queue: QUEUE_NAME, state }, counts![state] ?? 0] as const) : []));
  }

  private depthTimer: NodeJS.Timeout | undefined;

  async close(): Promise<void> {
    clearInterval(this.depthTimer);
    await this.queue.close().catch(() => undefined);
    await closeConnection(this.connection);
  }

  /** Drops the connection now (a drain past its deadline, Redis unreachable). */
  abort(): void {
    clearInterval(this.depthTimer);
    void this.queue.disconnect().catch(() => undefined);
    this.connection.disconnect();
  }
}

/** QUIT (pending replies first); a connection that cannot say goodbye (Redis down) is dropped. */
export async function closeConnection(connection: RedisClient): Promise<void> {
  try {
    await connection.quit();
  } catch {
    connection.disconnect();
  }
}
