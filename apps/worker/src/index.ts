export * from './jobs.ts';
export * from './scheduler.ts';
export * from './worker.ts';
