export { startReplica, createDriver } from './replica.ts';
export * from './config.ts';
