export * from './jobs.ts';
export * from './scheduler.ts';
export * from './worker.ts';
export * from './processors.ts';
