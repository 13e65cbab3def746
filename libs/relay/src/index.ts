export * from './pump.ts';
export * from './link.ts';
export * from './handshake.ts';
