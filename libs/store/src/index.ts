export * from './keys.ts';
export * from './lua.ts';
export * from './sandbox-store.ts';
export * from './ownership.ts';
export * from './replicas.ts';
export * from './events.ts';
export * from './ssh-sessions.ts';
