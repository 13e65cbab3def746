export * from './pump.ts';
export * from './link.ts';
