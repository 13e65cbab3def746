// Durable job types. Every job is idempotent and carries the id of the thing it fences on, so
// BullMQ running it twice (a stalled worker, a retry) changes nothing the second time.
export const QUEUE_NAME = 'sandgate';

export const JobName = {
  /** After an exec's deadline plus a grace: kill anything of the exec still running. */
  ExecDeadline: 'exec-deadline',
} as const;
export type JobName = (typeof JobName)[keyof typeof JobName];

export interface ExecDeadlineData {
  sandboxId: string;
  execId: string;
  deadlineMs: number;
}

/** BullMQ job ids name what they fence on; ':' is reserved by BullMQ's key layout. */
export const jobIds = {
  execDeadline: (execId: string) => `exec-deadline_${execId}`,
} as const;
