export * from './log.ts';
export * from './metrics.ts';
export * from './tracing.ts';
