export * from './log.ts';
export * from './metrics.ts';
