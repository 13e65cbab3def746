// Runs the durable job processors. A replica runs one of these unless started with --no-workers;
// any number may run at once (BullMQ hands each job to one worker; a crashed worker's jobs are
// picked up again once their lock expires).
import { Worker, type ConnectionOptions, type Job } from 'bullmq';
import { JobName, QUEUE_NAME, type DeleteSandboxData, type ExecDeadlineData, type ProvisionDeadlineData, type RestartData } from './jobs.ts';

export interface JobProcessors {
  execDeadline(data: ExecDeadlineData): Promise<unknown>;
  deleteSandbox(data: DeleteSandboxData): Promise<unknown>;
  provisionDeadline(data: ProvisionDeadlineData): Promise<unknown>;
  restart(data: RestartData): Promise<unknown>;
  reconcile(): Promise<unknown>;
}

export interface RunningWorker {
  close(): Promise<void>;
}

export function startJobWorker(connection: ConnectionOptions, processors: JobProcessors, onError: (err: Error) => void): RunningWorker {
  const worker = new Worker(
    QUEUE_NAME,
    async (job: Job) => {
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
        default:
          throw new Error(`unknown job type '${job.name}'`);
      }
    },
    // A short lock: a worker killed mid-job has its job taken over within seconds.
    { connection, concurrency: 16, lockDuration: 10_000, stalledInterval: 5_000, maxStalledCount: 100 },
  );
  worker.on('error', onError);
  return { close: () => worker.close() };
}
