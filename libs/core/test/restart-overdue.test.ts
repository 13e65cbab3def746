// When the reconcile sweep takes a restart's job for lost: through the real transitions.
import { describe, expect, it } from 'vitest';
import {
  Phase,
  RESTART_OVERDUE_MS,
  onMainProcessExit,
  onStopped,
  onSupervisorConnected,
  planStop,
  restartOverdue,
  type LifecycleStatus,
} from '../src/index.ts';

const now = new Date(1_700_000_000_000);
const ready = onSupervisorConnected({ phase: Phase.PROVISIONING, conditions: [] }, 'run-1', now)!;
const due = now.getTime() + 1_000;

describe('restartOverdue', () => {
  it('is true for a finished run whose restart is more than RESTART_OVERDUE_MS late, exit 0 or not', () => {
    for (const code of [0, 3]) {
      const exited: LifecycleStatus = { ...onMainProcessExit(ready, 'run-1', code, now)!, next_restart_at_ms: due };
      expect(restartOverdue(exited, due)).toBe(false);
      expect(restartOverdue(exited, due + RESTART_OVERDUE_MS)).toBe(false);
      expect(restartOverdue(exited, due + RESTART_OVERDUE_MS + 1)).toBe(true);
    }
  });

  it('is false without a restart due (none planned, or the restart cleared it)', () => {
    const exited = onMainProcessExit(ready, 'run-1', 3, now)!;
    expect(restartOverdue(exited, due + 60_000)).toBe(false);
    expect(restartOverdue({ ...exited, next_restart_at_ms: 0 }, due + 60_000)).toBe(false);
  });

  it('is false while the run still runs, and once the sandbox was stopped', () => {
    expect(restartOverdue({ ...ready, next_restart_at_ms: due }, due + 60_000)).toBe(false);
    const plan = planStop({ ...onMainProcessExit(ready, 'run-1', 3, now)!, next_restart_at_ms: due }, now);
    if (plan.kind !== 'stop') throw new Error(`an exited run with exit 3 is stopped, not ${plan.kind}`);
    expect(restartOverdue(plan.status, due + 60_000)).toBe(false);
    expect(restartOverdue(onStopped(plan.status, now)!, due + 60_000)).toBe(false);
  });
});
