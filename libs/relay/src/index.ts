export * from './pump.ts';
