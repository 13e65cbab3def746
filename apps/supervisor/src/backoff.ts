// Reconnect delays: exponential from `initialMs`, capped at `maxMs`, with "equal jitter" (half the
// delay fixed, half random) so that many supervisors losing the same replica do not come back in
// lockstep, while each still waits a predictable minimum.

export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { initialMs: 100, maxMs: 2000 };

/** Delay before reconnect attempt number `failures` (0 for the first retry). */
export function backoffDelay(failures: number, opts: BackoffOptions = DEFAULT_BACKOFF, random: () => number = Math.random): number {
  const exp = Math.min(opts.maxMs, opts.initialMs * 2 ** Math.min(failures, 30));
  return Math.round(exp / 2 + random() * (exp / 2));
}
