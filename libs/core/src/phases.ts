// Sandbox phases and the access rule. Pure: the gateway supplies the facts, this decides.
import { SandboxPhase } from '@sandgate/protocols/contract';

// The numbers are the wire's (openshell.v1.SandboxPhase), defined once in the protocol contract.
export const Phase = SandboxPhase;
export type Phase = SandboxPhase;

const PHASE_NAMES: Record<Phase, string> = {
  [Phase.UNSPECIFIED]: 'Unspecified',
  [Phase.PROVISIONING]: 'Provisioning',
  [Phase.READY]: 'Ready',
  [Phase.ERROR]: 'Error',
  [Phase.DELETING]: 'Deleting',
  [Phase.UNKNOWN]: 'Unknown',
  [Phase.STOPPING]: 'Stopping',
  [Phase.STOPPED]: 'Stopped',
  [Phase.STARTING]: 'Starting',
  [Phase.COMPLETED]: 'Completed',
};

export function phaseName(phase: number | undefined): string {
  return PHASE_NAMES[(phase ?? 0) as Phase] ?? `Phase(${phase})`;
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
