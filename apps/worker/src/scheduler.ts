// Enqueues durable jobs. Used by replicas on the request path; cheap and idempotent (job ids).
import { Queue, type ConnectionOptions } from 'bullmq';
import { JobName, QUEUE_NAME, jobIds, type ExecDeadlineData } from './jobs.ts';

/** Grace after an exec deadline before the backstop looks: the supervisor's own kill comes first. */
export const EXEC_DEADLINE_GRACE_MS = 2_000;

export class JobScheduler {
  private readonly queue: Queue;

  constructor(connection: ConnectionOptions) {
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
    await this.queue.add(JobName.ExecDeadline, data, {
      jobId: jobIds.execDeadline(data.execId),
      delay: Math.max(0, data.deadlineMs + EXEC_DEADLINE_GRACE_MS - Date.now()),
    });
  }

  /** The exec ended cleanly and its tree was killed by the supervisor: the backstop is moot. */
  async cancelExecDeadline(execId: string): Promise<void> {
    await this.queue.remove(jobIds.execDeadline(execId));
  }

  async close(): Promise<void> {
    await this.queue.close();
  }
}
