import { expect } from 'vitest';
import { UsageError } from '../src/args.ts';

/** The UsageError `fn` throws; fails the test if it throws nothing or something else. */
export function usageError(fn: () => unknown): UsageError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError);
    return err as UsageError;
  }
  throw new Error('expected a UsageError');
}
