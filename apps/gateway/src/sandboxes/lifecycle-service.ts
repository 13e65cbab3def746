// The sandbox lifecycle at the gateway: main-process exit reports, terminal delivery and
// ephemeral cleanup, stop/start, new runs, deletes. Decisions are the pure transitions of
// @sandgate/core; this module does the I/O around them, and everything that must survive a crash
// goes through a durable, idempotent job (@sandgate/jobs, whose processors call back in here).
import type { Sandbox, StopSandboxRequest, SandboxResponse, StartSandboxRequest } from '@sandgate/protocols';
import {
  Code,
  GatewayError,
  Phase,
  isEphemeral,
  ephemeralRunOver,
  notFound,
  requestedWorkspace,
  type Principal,
  onComputeFailed,
  onDeleteRequested,
  onMainProcessExit,
  onStopped,
  phaseName,
  planStart,
  planStop,
  requireName,
  restartDelayMs,
  shouldRestart,
  supervisorDebugBreaks,
  type DebugBreak,
  type LifecycleStatus,
  decodePolicy,
  DEFAULT_MAIN_COMMAND,
  parseResources,
  workloadUserFor,
} from '@sandgate/core';
import { policyInForce, sameRun, type ReplicationGuard, type SandboxLogStore, type SandboxStore, type StoredSandbox } from '@sandgate/store';
import type { ComputeDriver, GatewayTls, LaunchSpec } from '@sandgate/compute';
import type { JobScheduler, LifecycleTransitions } from '@sandgate/jobs';
import type { Logger, Metrics } from '@sandgate/telemetry';
import { newCredential } from '../sessions/credentials.ts';
import type { WorkspaceAccess } from '../api/access.ts';

export interface LifecycleDeps {
  store: SandboxStore;
  logs: SandboxLogStore;
  driver: ComputeDriver;
  scheduler: JobScheduler;
  supervisorEndpoint: () => string;
  /** The gateway serves TLS: the CA and name supervisors verify it with; absent: plaintext. */
  supervisorTls?: GatewayTls;
  /** Is a supervisor session live anywhere for this sandbox? */
  sessionLive: (sandboxId: string) => Promise<boolean>;
  /** Ends the sandbox's supervisor session wherever it is (stop/start and new runs revoke access). */
  revokeSessions: (sandboxId: string, reason: string) => Promise<void>;
  provisionTimeoutMs: number;
  /** Debug faults (negative chaos runs only; empty otherwise). */
  debugBreaks: ReadonlySet<DebugBreak>;
  /** Workspace scoping of Stop/StartSandbox; the job worker, which serves no caller, has none. */
  workspaces?: WorkspaceAccess;
  /** Confirms a write the caller is about to be told of reached enough Redis replicas; the job worker, which answers no caller, has none. */
  replication?: ReplicationGuard;
  log: Logger;
  metrics: Metrics;
}

const now = () => new Date();

/**
 * `supervisorBreaks`: the supervisor-side debug faults, as supervisorDebugBreaks() renders them ('' normally).
 * `policy`: the policy in force (policyInForce); spec.policy and template.resources were
 * validated at create, so they decode here.
 */
export function launchSpecFor(
  sandbox: Sandbox,
  credential: string,
  gatewayEndpoints: string,
  supervisorBreaks: string,
  policy: Buffer | undefined = sandbox.spec?.policy,
  gatewayTls?: GatewayTls,
): LaunchSpec {
  const spec = sandbox.spec!;
  return {
    sandboxId: sandbox.metadata!.id!,
    command: spec.command,
    tty: spec.tty ?? false,
    environment: sandboxEnvironment(spec),
    image: spec.template?.image ?? '',
    gatewayEndpoints,
    credential,
    logLevel: spec.log_level || 'info',
    debugBreaks: supervisorBreaks || undefined,
    // An absent pids limit is the driver's DEFAULT_PIDS_LIMIT (the LaunchSpec contract).
    limits: parseResources(spec.template?.resources),
    policy,
    workloadUser: workloadUserFor(policy ? decodePolicy(policy) : undefined),
    gatewayTls,
  };
}

/** The variables the main process and every exec get: the template's, with the spec's over them. */
export function sandboxEnvironment(spec: NonNullable<Sandbox['spec']>): Record<string, string> {
  return { ...(spec.template?.environment ?? {}), ...spec.environment };
}

/** The main process a warm-pool member is launched with (what an empty start_main would run). */
export function memberLaunch(): { command: string[]; tty: boolean } {
  return { command: [...DEFAULT_MAIN_COMMAND], tty: true };
}

/** How the sandbox's log says a process died of the memory limit. */
export const OOM_NOTE = "killed by the out-of-memory (OOM) killer: the sandbox's memory limit";

export class LifecycleService implements LifecycleTransitions {
  private readonly deps: LifecycleDeps;

  constructor(deps: LifecycleDeps) {
    this.deps = deps;
  }

  /** What the driver launches for a run of `sandbox`: its supervisor dials our endpoint, with our supervisor-side debug faults. */
  launchSpec(sandbox: Sandbox, credential: string, policy: Buffer | undefined = sandbox.spec?.policy): LaunchSpec {
    return launchSpecFor(sandbox, credential, this.deps.supervisorEndpoint(), supervisorDebugBreaks(this.deps.debugBreaks), policy, this.deps.supervisorTls);
  }

  /**
   * The first run of a record just written (a create, a new warm-pool member): the provisioning
   * deadline is made durable before any compute exists, so a crash from here on still ends in
   * Ready or Error, never a sandbox stuck in Provisioning; then the compute, then its handle.
   * `deferMain`: a pool member, whose main process waits for its claim.
   */
  async launchFirstRun(sandbox: Sandbox, credential: string, runStartedAtMs: number, deferMain = false): Promise<StoredSandbox | null> {
    const id = sandbox.metadata!.id!;
    await this.scheduleProvisionDeadline(id, runStartedAtMs);
    const handle = await this.deps.driver.create({ ...this.launchSpec(sandbox, credential), deferMain });
    return this.deps.store.mutate(id, (cur) => ({
      sandbox: cur.sandbox,
      extra: { compute: JSON.stringify(handle), runstart: String(runStartedAtMs) },
    }));
  }

  /** A line in the sandbox's log (source "gateway"), best effort. */
  note(sandboxId: string, message: string, level = 'INFO'): void {
    this.deps.logs
      .append(sandboxId, { timestamp_ms: Date.now(), level, target: 'sandgate::lifecycle', source: 'gateway', message })
      .catch(() => undefined);
  }

  /** Applies a pure transition with CAS; null from `change` leaves the record alone. */
  transition(
    sandboxId: string,
    change: (status: LifecycleStatus, rec: StoredSandbox) => LifecycleStatus | null,
    extra?: Record<string, string>,
  ): Promise<StoredSandbox | null> {
    return this.deps.store.mutate(sandboxId, (cur) => {
      const next = change(cur.sandbox.status as LifecycleStatus, cur);
      if (!next) return extra ? { sandbox: cur.sandbox, extra } : null;
      const sandbox = { ...cur.sandbox, status: { ...cur.sandbox.status!, ...next, exit_code: next.exit_code } as Sandbox['status'] };
      return { sandbox, extra };
    });
  }

  // ---- supervisor reports -------------------------------------------------------------------

  /** The supervisor's main-process exit report: durable before it is acknowledged. */
  async mainProcessExited(sandboxId: string, instanceId: string, exitCode: number, oomKilled = false): Promise<void> {
    let accepted = false;
    const rec = await this.transition(sandboxId, (s) => {
      const next = onMainProcessExit(s, instanceId, exitCode, now());
      accepted = next !== null;
      return next;
    });
    if (!rec || !accepted) return; // a repeat, or a report from an older run: nothing to do
    this.deps.metrics.inc('sandgate_main_process_exits_total');
    this.note(
      sandboxId,
      `main process exited with code ${exitCode}${oomKilled ? ` (${OOM_NOTE})` : ''}; phase ${phaseName(rec.sandbox.status?.phase)}`,
      oomKilled ? 'WARN' : 'INFO',
    );
    const policy = rec.sandbox.spec?.restart_policy;
    if (shouldRestart(policy, exitCode) && !isEphemeral(rec.sandbox.metadata?.annotations)) {
      const delay = restartDelayMs(rec.sandbox.status?.restart_count ?? 0);
      await this.transition(sandboxId, (s) => ({ ...s, next_restart_at_ms: Date.now() + delay }));
      await this.deps.scheduler.restart({ sandboxId, instanceId }, delay);
    }
  }

  /** Every attached client has the output and the exit: an ephemeral sandbox may go now. */
  async terminalFinal(sandboxId: string, instanceId: string): Promise<void> {
    const rec = await this.transition(sandboxId, () => null, { termfinal: instanceId });
    if (!rec) return;
    await this.maybeScheduleEphemeralCleanup(rec);
  }

  async maybeScheduleEphemeralCleanup(rec: StoredSandbox): Promise<boolean> {
    const sb = rec.sandbox;
    const status = sb.status as LifecycleStatus;
    if (!isEphemeral(sb.metadata?.annotations) || !ephemeralRunOver(status)) return false;
    if (this.deps.debugBreaks.has('ephemeral-cleanup')) return false;
    const instance = status.main_process_instance_id ?? '';
    if (rec.terminalFinal !== instance) {
      // Not final yet: only a supervisor that is gone for good can no longer finalize it.
      if (await this.deps.sessionLive(sb.metadata!.id!)) return false;
    }
    await this.deps.scheduler.ephemeralCleanup(sb.metadata!.id!, instance);
    return true;
  }

  // ---- delete -------------------------------------------------------------------------------

  /** DeleteSandbox: durable (the job finishes it if this replica dies), but done inline too. */
  async delete(name: string, workspace: string): Promise<boolean> {
    const rec = await this.deps.store.getByName(workspace, name);
    if (!rec) throw notFound();
    const id = rec.sandbox.metadata!.id!;
    await this.transition(id, (s) => onDeleteRequested(s, now()));
    await this.deps.scheduler.deleteSandbox(id);
    await this.finishDelete(id);
    await this.deps.replication?.confirm('the delete');
    return true;
  }

  /** Kills the compute and removes the record. Idempotent: safe to run twice, or after a crash. */
  async finishDelete(sandboxId: string): Promise<boolean> {
    const rec = await this.transition(sandboxId, (s) => onDeleteRequested(s, now()));
    if (!rec) return false;
    try {
      await this.deps.driver.delete(sandboxId, rec.compute);
    } catch (err) {
      throw new GatewayError(Code.INTERNAL, `delete sandbox failed: ${err instanceof Error ? err.message : String(err)}`);
    }
    const removed = await this.deps.store.remove(sandboxId, rec.sandbox.metadata!.workspace!, rec.sandbox.metadata!.name!);
    if (removed) {
      this.deps.metrics.inc('sandgate_sandboxes_deleted_total');
      this.deps.log.info('sandbox deleted', { sandboxId, name: rec.sandbox.metadata!.name });
    }
    return removed;
  }

  // ---- stop / start -------------------------------------------------------------------------

  async stop(req: StopSandboxRequest, caller: Principal): Promise<SandboxResponse> {
    const rec = await this.byName(req.name, req.workspace, caller);
    const id = rec.sandbox.metadata!.id!;
    const plan = planStop(rec.sandbox.status as LifecycleStatus, now());
    if (plan.kind === 'noop') return { sandbox: rec.sandbox };
    if (plan.kind === 'revoke-only') {
      // A finished run keeps its compute; stopping it only ends access to it.
      await this.deps.store.mutate(id, (cur) => ({ sandbox: cur.sandbox, extra: { cred: '' } }));
      await this.deps.revokeSessions(id, 'sandbox stopped');
      await this.deps.replication?.confirm('the stop');
      return { sandbox: rec.sandbox };
    }
    await this.transition(id, () => plan.status, { cred: '' });
    this.note(id, 'stop requested');
    await this.deps.revokeSessions(id, 'sandbox stopped');
    await this.deps.driver.stop(id, rec.compute);
    const stopped = await this.transition(id, (s) => onStopped(s, now()));
    this.note(id, 'sandbox stopped');
    await this.deps.replication?.confirm('the stop');
    return { sandbox: stopped?.sandbox ?? rec.sandbox };
  }

  async start(req: StartSandboxRequest, caller: Principal): Promise<SandboxResponse> {
    const rec = await this.byName(req.name, req.workspace, caller);
    const started = await this.launchNewRun(rec, 'start requested', true);
    await this.deps.replication?.confirm('the start');
    return { sandbox: started?.sandbox ?? rec.sandbox };
  }

  /**
   * A new run on the kept filesystem: new credential (access granted for the old run ends), new
   * supervisor, and a fresh provisioning deadline. Ready comes with the new supervisor's hello.
   */
  async launchNewRun(rec: StoredSandbox, why: string, resetRestarts: boolean): Promise<StoredSandbox | null> {
    const id = rec.sandbox.metadata!.id!;
    const next = planStart(rec.sandbox.status as LifecycleStatus, now());
    if (!next) return rec;
    const credential = newCredential();
    const runStartedAtMs = Date.now();
    const starting = await this.transition(
      id,
      (s) => {
        const planned = planStart(s, now());
        if (!planned) return null;
        return resetRestarts ? { ...planned, restart_count: 0, next_restart_at_ms: 0 } : planned;
      },
      // A new run starts its main process itself: a claim's pending start_main is moot.
      // A new run of an unclaimed-then-claimed sandbox is launched as the member was and gets
      // its main process by start_main (at its hello, or from the sweep): mainpending says so.
      { cred: credential.hash, runstart: String(runStartedAtMs), termfinal: '', mainpending: rec.claimed ? '1' : '0' },
    );
    if (!starting) throw notFound();
    this.note(id, why);
    await this.deps.revokeSessions(id, 'new run');
    await this.scheduleProvisionDeadline(id, runStartedAtMs);
    const spec = this.launchSpec(starting.sandbox, credential.secret, policyInForce(starting).bytes);
    // A claimed member's compute was made for the member's launch: the same launch keeps it (the
    // docker driver keeps a container only for an identical launch), and start_main runs the claim's command.
    const handle = await this.deps.driver.start(starting.claimed ? { ...spec, ...memberLaunch(), deferMain: true } : spec, starting.compute);
    const updated = await this.deps.store.mutate(id, (cur) => ({ sandbox: cur.sandbox, extra: { compute: JSON.stringify(handle) } }));
    this.watchLaunch(id, runStartedAtMs);
    return updated;
  }

  /**
   * Watches a fresh launch for a few seconds: compute that dies before its supervisor connects
   * (an image that cannot run it, a crash at start) makes the sandbox Error at once, with the
   * driver's explanation, instead of waiting for the provisioning deadline. Best effort; the
   * deadline job and the reconcile sweep remain the durable backstops. Only this run
   * (`runStartedAtMs`) is watched: a restart begun meanwhile is the next run's watch's business.
   */
  watchLaunch(sandboxId: string, runStartedAtMs: number): void {
    const delays = [300, 700, 1000, 2000, 3000, 5000, 8000];
    void (async () => {
      for (const delay of delays) {
        await new Promise((r) => setTimeout(r, delay));
        const rec = await this.deps.store.get(sandboxId);
        const phase = rec?.sandbox.status?.phase;
        if (!rec || rec.runStartedAtMs !== runStartedAtMs || (phase !== Phase.PROVISIONING && phase !== Phase.STARTING)) return;
        if ((await this.deps.driver.inspect(sandboxId, rec.compute)) === 'running') continue;
        await this.failLaunch(rec);
        return;
      }
    })().catch((err: unknown) => this.deps.log.warn('launch watch failed', { sandboxId, err }));
  }

  /**
   * The launch `rec` describes died before its supervisor connected: Error/ComputeFailed. Fenced
   * by the run: `rec` was read before the compute was inspected, and if a new run (a restart, a
   * start) has begun since, the dead compute was the old run's and the new one is left alone.
   */
  async failLaunch(rec: StoredSandbox): Promise<void> {
    const id = rec.sandbox.metadata!.id!;
    const reason =
      (await this.deps.driver.failureReason?.(id, rec.compute).catch(() => null)) ??
      `the sandbox compute exited before its supervisor connected (driver ${this.deps.driver.name})`;
    const failed = await this.transition(id, (s, cur) => (sameRun(cur, rec) ? onComputeFailed(s, reason, now()) : null));
    if (failed?.sandbox.status?.phase === Phase.ERROR && sameRun(failed, rec)) {
      this.note(id, reason, 'ERROR');
      this.deps.log.warn('sandbox compute failed at launch', { sandboxId: id, reason });
    }
  }

  async scheduleProvisionDeadline(sandboxId: string, runStartedAtMs: number): Promise<void> {
    await this.deps.scheduler.provisionDeadline({ sandboxId, runStartedAtMs, timeoutMs: this.deps.provisionTimeoutMs });
  }

  /** The caller's sandbox by name; another workspace's is NOT_FOUND (access.ts). */
  private async byName(name: string | undefined, workspace: string | undefined, caller: Principal): Promise<StoredSandbox> {
    const access = this.deps.workspaces;
    if (!access) throw new GatewayError(Code.INTERNAL, 'workspace scoping is not configured in this process');
    const sandboxName = requireName(name);
    return access.visible(caller, await this.deps.store.getByName(requestedWorkspace(caller, workspace), sandboxName));
  }
}
