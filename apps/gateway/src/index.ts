export { startReplica, createDriver } from './replica.ts';
export { startWorker, type WorkerConfig, type RunningStandaloneWorker } from './worker.ts';
export * from './config.ts';
// How a supervisor credential is stored (load tests seed sessions straight into Redis).
export { hashCredential } from './sessions/credentials.ts';
