export * from './keys.ts';
export * from './sandbox-store.ts';
export * from './ownership.ts';
export * from './replicas.ts';
export * from './events.ts';
export * from './ssh-sessions.ts';
export * from './counters.ts';
export * from './connection.ts';
