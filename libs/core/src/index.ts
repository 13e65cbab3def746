export * from './status.ts';
export * from './limits.ts';
export * from './validation.ts';
export * from './create.ts';
export * from './phases.ts';
export * from './exit-codes.ts';
export * from './names.ts';
export * from './lifecycle.ts';
