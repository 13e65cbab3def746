// Reconnect backoff: how long the supervisor waits between dials to the gateway.
import { describe, expect, it } from 'vitest';
import { backoffDelay } from '../src/backoff.ts';

describe('backoffDelay', () => {
  it('retries a dropped session within 0–50 ms, then grows exponentially from 100 ms, caps at 2 s, with jitter in the upper half', () => {
    expect(backoffDelay(0, undefined, () => 0)).toBe(0);
    expect(backoffDelay(0, undefined, () => 1)).toBe(50);
    expect(backoffDelay(1, undefined, () => 0)).toBe(100);
    expect(backoffDelay(1, undefined, () => 1)).toBe(200);
    expect(backoffDelay(3, undefined, () => 1)).toBe(800);
    expect(backoffDelay(10, undefined, () => 1)).toBe(2000);
    expect(backoffDelay(1000, undefined, () => 0)).toBe(1000);
  });
});
