export { startReplica, createDriver } from './replica.ts';
export * from './config.ts';
// How a supervisor credential is stored (load tests seed sessions straight into Redis).
export { hashCredential } from './sessions/credentials.ts';
