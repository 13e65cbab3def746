// Runs the durable job processors. A replica runs one of these unless started with --no-workers,
// and `sandgate worker` runs one alone; any number may run at once (BullMQ hands each job to one
// worker; a crashed worker's jobs are picked up again once their lock expires).
import { Worker, type Job } from 'bullmq';
import { createRedisConnection, jobQueueFor, type RedisClient } from '@sandgate/store';
import type { Metrics } from '@sandgate/telemetry';
import { JobName, QUEUE_NAME, type DeleteSandboxData, type ExecDeadlineData, type PoolRefillData, type ProvisionDeadlineData, type RestartData } from './jobs.ts';
import { closeConnection } from './scheduler.ts';
import { extractContext, inSpan, linksFromCarrier, SpanKind, TraceAttr, tracingEnabled, type TraceCarrier } from '@sandgate/telemetry';

export interface JobProcessors {
  execDeadline(data: ExecDeadlineData): Promise<unknown>;
  deleteSandbox(data: DeleteSandboxData): Promise<unknown>;
  provisionDeadline(data: ProvisionDeadlineData): Promise<unknown>;
  restart(data: RestartData): Promise<unknown>;
  reconcile(): Promise<unknown>;
  poolRefill(data: PoolRefillData): Promise<unknown>;
}

export interface RunningWorker {
  /** Stops taking jobs, waits for the running ones, then closes its Redis connections. */
  close(): Promise<void>;
  /** Drops everything now (a drain past its deadline): running jobs are left to their locks' expiry. */
  abort(): void;
}

export interface JobWorkerOptions {
  /** CLIENT SETNAME of the worker's connections (BullMQ's blocking one is a duplicate and keeps it). */
  connectionName: string;
  onError: (err: Error) => void;
  /** PEM CA of a `rediss://` Redis (see createRedisConnection). */
  redisTlsCa?: string;
  /** sandgate_job_latency / _duration / _failures_total of the jobs this worker runs. */
  metrics?: Metrics;
}

export function startJobWorker(redisUrl: string, processors: JobProcessors, opts: JobWorkerOptions): RunningWorker {
  // Workers block on Redis and must retry forever (BullMQ requires maxRetriesPerRequest: null).
  const connection = createRedisConnection(redisUrl, 'jobs-worker', { connectionName: opts.connectionName, tlsCa: opts.redisTlsCa });
  const run = async (job: Job): Promise<unknown> => {
    switch (job.name) {
      case JobName.ExecDeadline:
        return processors.execDeadline(job.data as ExecDeadlineData);
      case JobName.DeleteSandbox:
        return processors.deleteSandbox(job.data as DeleteSandboxData);
      case JobName.ProvisionDeadline:
        return processors.provisionDeadline(job.data as ProvisionDeadlineData);
      case JobName.Restart:
        return processors.restart(job.data as RestartData);
      case JobName.Reconcile:
        return processors.reconcile();
      case JobName.PoolRefill:
        return processors.poolRefill(job.data as PoolRefillData);
      default:
        throw new Error(`unknown job type '${job.name}'`);
    }
  };
  const metrics = opts.metrics;
  for (const job of Object.values(JobName)) metrics?.inc('sandgate_job_failures_total', 0, { queue: QUEUE_NAME, job_name: job });
  const measured = async (job: Job): Promise<unknown> => {
    if (!metrics) return run(job);
    // `job_name`, not `job`: Prometheus keeps `job` for the scrape job and would rename ours `exported_job`.
    const labels = { queue: QUEUE_NAME, job_name: job.name };
    const started = Date.now();
    // Latency of the first attempt only: a retry's wait is its backoff, not the queue's.
    if (job.attemptsMade === 0) metrics.record('sandgate_job_latency', Math.max(0, started - job.timestamp - (job.delay ?? 0)) / 1000, labels);
    try {
      return await run(job);
    } catch (err) {
      metrics.inc('sandgate_job_failures_total', 1, labels);
      throw err;
    } finally {
      metrics.record('sandgate_job_duration', (Date.now() - started) / 1000, labels);
    }
  };
  const worker = new Worker(
    QUEUE_NAME,
    async (job: Job) => (tracingEnabled() ? traced(job, () => measured(job)) : measured(job)),
    // A short lock: a worker killed mid-job has its job taken over within seconds.
    { connection, prefix: jobQueueFor(connection).prefix, concurrency: 16, lockDuration: 10_000, stalledInterval: 5_000, maxStalledCount: 100 },
  );
  worker.on('error', opts.onError);
  let closing: Promise<void> | undefined;
  return {
    // BullMQ closes the blocking connection it made, never the one it was handed: that is ours.
    close: () =>
      (closing ??= (async () => {
        await worker.close().catch(opts.onError);
        await closeConnection(connection);
      })()),
    abort: () => {
      // Another worker takes the running jobs over once their locks (lockDuration) lapse.
      void worker.close(true).catch(() => undefined);
      worker.disconnect().catch(() => undefined);
      connection.disconnect();
    },
  };
}

/**
 * A job's processing span: a new trace (a job outlives the call that enqueued it, and may run
 * on another process, much later) with a span LINK to the enqueue span named in `data.trace`.
 */
function traced(job: Job, run: () => Promise<unknown>): Promise<unknown> {
  const data = (job.data ?? {}) as { trace?: TraceCarrier; sandboxId?: string; execId?: string };
  const attributes: Record<string, string | number> = {
    [TraceAttr.jobName]: job.name,
    [TraceAttr.jobId]: job.id ?? '',
    [TraceAttr.queue]: QUEUE_NAME,
    'messaging.operation.type': 'process',
    'sandgate.job.attempt': job.attemptsMade + 1,
  };
  if (data.sandboxId) attributes[TraceAttr.sandboxId] = data.sandboxId;
  if (data.execId) attributes[TraceAttr.execId] = data.execId;
  if (job.name === JobName.ExecDeadline) attributes[TraceAttr.killReason] = 'backstop';
  return inSpan(`sandgate.job ${job.name}`, { kind: SpanKind.CONSUMER, parent: extractContext(null), links: linksFromCarrier(data.trace), attributes }, async (span) => {
    const result = await run();
    const killed = (result as { killed?: unknown } | null)?.killed;
    if (typeof killed === 'number') span.setAttribute(TraceAttr.killed, killed);
    return result;
  });
}
