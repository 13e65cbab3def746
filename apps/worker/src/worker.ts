// Runs the durable job processors. A replica runs one of these unless started with --no-workers;
// any number may run at once (BullMQ hands each job to one worker; a crashed worker's jobs are
// picked up again once their lock expires).
import { Worker, type ConnectionOptions, type Job } from 'bullmq';
import { JobName, QUEUE_NAME, type ExecDeadlineData } from './jobs.ts';

export interface JobProcessors {
  execDeadline(data: ExecDeadlineData): Promise<unknown>;
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
        default:
          throw new Error(`unknown job type '${job.name}'`);
      }
    },
    { connection, concurrency: 16, lockDuration: 30_000, stalledInterval: 15_000 },
  );
  worker.on('error', onError);
  return { close: () => worker.close() };
}
