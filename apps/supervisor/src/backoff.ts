// Reconnect delays: exponential from `initialMs`, capped at `maxMs`, with "equal jitter" (half the
// delay fixed, half random) so that many supervisors losing the same replica do not come back in
// lockstep, while each still waits a predictable minimum. The first retry after a session drops
// has no minimum: it is drawn from [0, initialMs/2], the same spread as equal jitter's [initialMs/2,
// initialMs] but that much sooner. A drop is usually a replica dying, and the survivors are ready
// at once; the fixed half only delayed every failover (by 50–100 ms of a ~120 ms median reconnect
// in the chaos suite's logs). A second failure in a row does wait its minimum.

export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { initialMs: 100, maxMs: 2000 };

/** Delay before reconnect attempt number `failures` (0 for the first retry). */
export function backoffDelay(failures: number, opts: BackoffOptions = DEFAULT_BACKOFF, random: () => number = Math.random): number {
  const exp = Math.min(opts.maxMs, opts.initialMs * 2 ** Math.min(failures, 30));
  if (failures === 0) return Math.round(random() * (exp / 2));
  return Math.round(exp / 2 + random() * (exp / 2));
}
