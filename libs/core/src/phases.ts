// Sandbox phases and the access rule. Pure: the gateway supplies the facts, this decides.
export const Phase = {
  UNSPECIFIED: 0,
  PROVISIONING: 1,
  READY: 2,
  ERROR: 3,
  DELETING: 4,
  UNKNOWN: 5,
  STOPPING: 6,
  STOPPED: 7,
  STARTING: 8,
  COMPLETED: 9,
} as const;
export type Phase = (typeof Phase)[keyof typeof Phase];

const PHASE_NAMES: Record<number, string> = {
  0: 'Unspecified',
  1: 'Provisioning',
  2: 'Ready',
  3: 'Error',
  4: 'Deleting',
  5: 'Unknown',
  6: 'Stopping',
  7: 'Stopped',
  8: 'Starting',
  9: 'Completed',
};

export function phaseName(phase: number | undefined): string {
  return PHASE_NAMES[phase ?? 0] ?? `Phase(${phase})`;
}

export type AccessDecision = { allowed: true } | { allowed: false; message: string };

/**
 * The one access rule for every path into a sandbox (exec, SSH, forwarding, services):
 * Ready → allowed; Completed or Error → allowed while the supervisor session is live on any
 * replica; anything else → "sandbox is not ready".
 */
export function decideAccess(phase: number | undefined, supervisorSessionLive: boolean): AccessDecision {
  if (phase === Phase.READY) return { allowed: true };
  if ((phase === Phase.COMPLETED || phase === Phase.ERROR) && supervisorSessionLive) return { allowed: true };
  return { allowed: false, message: 'sandbox is not ready' };
}

export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  last_transition_time: string;
}

/** The single `Ready` condition the gateway keeps up to date. */
export function readyCondition(status: Condition['status'], reason: string, message: string, now: Date): Condition {
  return { type: 'Ready', status, reason, message, last_transition_time: now.toISOString() };
}
