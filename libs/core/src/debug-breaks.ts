// Debug faults: switches that remove one safety mechanism, so the chaos suite can prove that the
// invariant guarding it really fails without it ("every check can fail"). They exist only for
// negative runs. A switch is honoured only together with SANDGATE_DEBUG_UNSAFE=1; a process that
// is handed one without it refuses to start, so an exported variable can never silently run a
// replica or a supervisor unsafe.

/** Every debug fault, where it acts, and what it removes. The chaos suite's `--break NAME` list. */
export const DEBUG_BREAKS = {
  fencing: { side: 'replica', removes: 'ownership fencing: renew and release ignore the fence' },
  jobs: { side: 'replica', removes: 'durable jobs: nothing is enqueued (deadlines, deletes, restarts, reconcile)' },
  'ephemeral-cleanup': { side: 'replica', removes: 'the delete of an ephemeral sandbox once its main process finished' },
  reconcile: { side: 'replica', removes: 'the reconcile sweep (orphaned compute and stuck records stay)' },
  'exec-kill': { side: 'supervisor', removes: 'killing an exec tree on timeout, cancel, broken path and at exit' },
  'exec-timeout': { side: 'supervisor', removes: "the supervisor's own exec timer: only the gateway's exec-deadline job (the backstop) ends a timed exec" },
  'supervisor-reconnect': { side: 'supervisor', removes: 'reconnecting: a supervisor that lost an established control session stays disconnected' },
  'owner-hints': { side: 'replica', removes: "dropping stale owner hints: a cached owner is trusted forever (no TTL, no forget, no fresh look-up after 'not here')" },
  'redis-wait': { side: 'replica', removes: 'waiting for Redis replicas (WAIT) before acknowledging a write: a failover can lose an acknowledged create' },
  'retriable-errors': { side: 'replica', removes: 'retriable relay failures: an exec or forward call whose path broke gets INTERNAL instead of UNAVAILABLE' },
} as const satisfies Record<string, { side: 'replica' | 'supervisor'; removes: string }>;

export type DebugBreak = keyof typeof DEBUG_BREAKS;

/** Variables read by parseDebugBreaks (documented in the configuration tables). */
export const DEBUG_ENV = {
  breaks: 'SANDGATE_DEBUG_BREAK',
  unsafe: 'SANDGATE_DEBUG_UNSAFE',
  /** Older spellings of `fencing` and `jobs`, still honoured (scripts use them). */
  legacyFencing: 'SANDGATE_DEBUG_DISABLE_FENCING',
  legacyJobs: 'SANDGATE_DEBUG_DISABLE_JOBS',
} as const;

export class DebugBreakError extends Error {}

export function isDebugBreak(name: string): name is DebugBreak {
  return Object.hasOwn(DEBUG_BREAKS, name);
}

/**
 * Reads the debug faults from an environment. Returns the empty set when none is asked for;
 * throws DebugBreakError (with the fix in its message) for an unknown name or for any switch
 * without SANDGATE_DEBUG_UNSAFE=1.
 */
export function parseDebugBreaks(env: Readonly<Record<string, string | undefined>>): ReadonlySet<DebugBreak> {
  const asked: string[] = (env[DEBUG_ENV.breaks] ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (env[DEBUG_ENV.legacyFencing] === '1') asked.push('fencing');
  if (env[DEBUG_ENV.legacyJobs] === '1') asked.push('jobs');
  if (asked.length === 0) return new Set();
  const unknown = asked.filter((n) => !isDebugBreak(n));
  if (unknown.length > 0) {
    throw new DebugBreakError(
      `${DEBUG_ENV.breaks}: unknown debug fault ${unknown.map((n) => `'${n}'`).join(', ')}; known: ${Object.keys(DEBUG_BREAKS).join(', ')}`,
    );
  }
  if (env[DEBUG_ENV.unsafe] !== '1') {
    throw new DebugBreakError(
      `debug fault(s) ${asked.join(', ')} switch a safety mechanism off; refusing to start without ${DEBUG_ENV.unsafe}=1 ` +
        `(unset ${DEBUG_ENV.breaks}/${DEBUG_ENV.legacyFencing}/${DEBUG_ENV.legacyJobs} for a normal run)`,
    );
  }
  return new Set(asked as DebugBreak[]);
}

/** The supervisor-side subset, as the value of SANDGATE_DEBUG_BREAK handed to a supervisor. */
export function supervisorDebugBreaks(breaks: ReadonlySet<DebugBreak>): string {
  return [...breaks].filter((b) => DEBUG_BREAKS[b].side === 'supervisor').join(',');
}
