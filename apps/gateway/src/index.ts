export { startReplica, createDriver } from './replica.ts';
export { startWorker, type WorkerConfig, type RunningStandaloneWorker } from './worker.ts';
export * from './config.ts';
