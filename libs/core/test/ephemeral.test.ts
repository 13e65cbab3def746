// When an ephemeral sandbox's run is over (and the sandbox goes): through the real transitions.
import { describe, expect, it } from 'vitest';
import {
  Phase,
  ephemeralRunOver,
  onComputeFailed,
  onComputeVanished,
  onMainProcessExit,
  onProvisioningTimeout,
  onSupervisorConnected,
  onSupervisorDisconnected,
  type LifecycleStatus,
} from '../src/index.ts';

const now = new Date(1_700_000_000_000);
const provisioning: LifecycleStatus = { phase: Phase.PROVISIONING, conditions: [] };
const ready = onSupervisorConnected(provisioning, 'run-1', now)!;

describe('ephemeralRunOver', () => {
  it('is over once the main process exited, with 0 or not', () => {
    expect(ephemeralRunOver(ready)).toBe(false);
    expect(ephemeralRunOver(onMainProcessExit(ready, 'run-1', 0, now)!)).toBe(true);
    expect(ephemeralRunOver(onMainProcessExit(ready, 'run-1', 3, now)!)).toBe(true);
  });

  it('is over when the compute vanished under a record that said Ready (a failover lost the exit and the delete)', () => {
    const vanished = onComputeVanished(ready, now)!;
    expect(vanished.phase).toBe(Phase.ERROR);
    expect(ephemeralRunOver(vanished)).toBe(true);
  });

  it('is not over for a launch that failed (its error stays readable) or a supervisor that is only disconnected', () => {
    expect(ephemeralRunOver(onComputeFailed(provisioning, 'bwrap: exited 1', now)!)).toBe(false);
    expect(ephemeralRunOver(onSupervisorDisconnected(ready, now)!)).toBe(false);
  });
});

describe('onComputeVanished', () => {
  it('keeps the reason of a launch that failed: its compute was removed on purpose (deadline) or never ran', () => {
    // The provisioning deadline removes the compute; the next reconcile sweep then finds it gone.
    const timedOut = onProvisioningTimeout(provisioning, 6000, now)!;
    expect(timedOut.phase).toBe(Phase.ERROR);
    expect(onComputeVanished(timedOut, now)).toBeNull();
    expect(onComputeVanished(onComputeFailed(provisioning, 'bwrap: exited 1', now)!, now)).toBeNull();
  });

  it('marks a sandbox that was serving, or whose main process failed, as vanished', () => {
    expect(onComputeVanished(ready, now)?.conditions?.[0]?.reason).toBe('ComputeVanished');
    const failed = onMainProcessExit(ready, 'run-1', 3, now)!;
    expect(failed.phase).toBe(Phase.ERROR);
    expect(onComputeVanished(failed, now)?.conditions?.[0]?.reason).toBe('ComputeVanished');
  });
});

describe('onMainProcessExit', () => {
  it("replaces the sweep's ComputeVanished guess with the run's own exit, and only for that run", () => {
    const vanished = onComputeVanished(ready, now)!;
    const failed = onMainProcessExit(vanished, 'run-1', 7, now)!;
    expect(failed.phase).toBe(Phase.ERROR);
    expect(failed.conditions?.[0]?.reason).toBe('MainProcessFailed');
    expect(failed.exit_code).toBe(7);
    expect(onMainProcessExit(vanished, 'run-1', 0, now)?.phase).toBe(Phase.COMPLETED);
    expect(onMainProcessExit(vanished, 'run-0', 7, now)).toBeNull(); // another run's report
    // A recorded exit is final: a repeat changes nothing.
    expect(onMainProcessExit(failed, 'run-1', 7, now)).toBeNull();
  });
});
