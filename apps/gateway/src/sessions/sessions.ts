// Supervisor sessions held by this replica. A session is one supervisor's Control stream: it is
// authenticated by the sandbox credential, claims ownership of the sandbox in Redis (fenced),
// renews it while heartbeats flow, and carries `open_exec` requests. Exec data then arrives on a
// separate ExecChannel call, matched to its pending request by exec id.
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ServerDuplexStream } from '@grpc/grpc-js';
import { MetadataKey, type ExecFrame, type ExecStart, type GatewayMessage, type SupervisorMessage, type TcpFrame, type TcpOpen } from '@sandgate/protocols';
import { GatewayError, Code, onSupervisorConnected, onSupervisorDisconnected, type LifecycleStatus } from '@sandgate/core';
import { policyInForce, type OwnershipStore, type ReplicationGuard, type SandboxStore } from '@sandgate/store';
import { relaySpans, tracingEnabled, type Logger, type Metrics } from '@sandgate/telemetry';
import { verifyCredential } from './credentials.ts';
import { PendingRequests } from './pending.ts';
import { endWithError, onceGone } from '../api/calls.ts';
import { sandboxEnvironment } from '../sandboxes/lifecycle-service.ts';

// Still imported from here by sandboxes/watch-service.ts.
export { endWithError };

export type ControlCall = ServerDuplexStream<SupervisorMessage, GatewayMessage>;
export type ExecChannelCall = ServerDuplexStream<ExecFrame, ExecFrame>;
export type TcpChannelCall = ServerDuplexStream<TcpFrame, TcpFrame>;

/** How long a supervisor has to open the ExecChannel (TcpChannel) after `open_exec` (`open_tcp`). */
const CHANNEL_ATTACH_TIMEOUT_MS = 10_000;
/** How long a channel call has to send its attach frame. */
const ATTACH_FRAME_TIMEOUT_MS = 10_000;
const SUPERSEDED = 'superseded by a new session of the same sandbox';
/** How long UpdateConfig waits for the supervisor to confirm a new policy. */
export const POLICY_APPLY_TIMEOUT_MS = 5_000;
/** How long a claim waits for the supervisor to confirm starting the claim's main process. */
const MAIN_START_TIMEOUT_MS = 5_000;
/** How often a supervisor's report that could not be recorded and replicated is tried again. */
const REPORT_RETRY_MS = 1_000;

export class Session {
  readonly sandboxId: string;
  readonly sessionId = randomUUID();
  readonly instanceId: string;
  readonly call: ControlCall;
  fence = 0;
  lastSeenMs = Date.now();
  /**
   * Until when the ownership key surely lives: the claim's or the last successful renewal's
   * start plus the TTL. Past it, with Redis out of reach, the session is ended (renewAll).
   */
  leaseUntilMs = 0;
  closed = false;
  /** Execs asked for with `open_exec`, by exec id, until their ExecChannel attaches. */
  readonly pendingExecs = new PendingRequests<ExecChannelCall>();
  /** TCP channels (SSH, forwarded TCP) asked for with `open_tcp`, by channel id. */
  readonly pendingTcp = new PendingRequests<TcpChannelCall>();
  /** Kill requests sent to the supervisor, by request id. */
  readonly kills = new PendingRequests<number>();
  /** Policy pushes waiting for policy_applied, by `<revision>/<uuid>` (one answer settles every wait up to it). */
  readonly policyWaits = new PendingRequests<void>();
  /** A warm-pool member's supervisor whose main process waits for start_main (its hello said so). */
  awaitingMain = false;
  /** start_main sent, waiting for main_started. */
  readonly mainStarts = new PendingRequests<void>();
  /** The newest policy revision the supervisor confirmed applying on this session (0: none yet). */
  appliedPolicyRevision = 0;
  /** Execs with an open ExecChannel on this session (the per-sandbox concurrency limit). */
  activeExecs = 0;
  readonly timers: NodeJS.Timeout[] = [];

  constructor(sandboxId: string, instanceId: string, call: ControlCall) {
    this.sandboxId = sandboxId;
    this.instanceId = instanceId;
    this.call = call;
  }
}

export interface SessionDeps {
  replicaId: string;
  store: SandboxStore;
  ownership: OwnershipStore;
  heartbeatIntervalMs: number;
  heartbeatMisses: number;
  maxExecsPerSandbox: number;
  /** How long a released session may stay gone before the sandbox leaves Ready. */
  disconnectGraceMs: number;
  /** Confirms the claim (its fence) reached enough Redis replicas before the session is accepted. */
  replication?: ReplicationGuard;
  /** Durable handling of the supervisor's reports; acknowledged only once these resolve. */
  reports: {
    mainExit(sandboxId: string, instanceId: string, exitCode: number, oomKilled: boolean): Promise<void>;
    terminalFinal(sandboxId: string, instanceId: string): Promise<void>;
  };
  log: Logger;
  metrics: Metrics;
}

export class SessionRegistry {
  private readonly sessions = new Map<string, Session>();
  private readonly deps: SessionDeps;
  private draining = false;
  private renewTimer: NodeJS.Timeout | undefined;
  private renewing = false;

  constructor(deps: SessionDeps) {
    this.deps = deps;
    deps.metrics.gauge('sandgate_supervisor_sessions', () => this.sessions.size);
    // Zero from the start, so rates and alerts have a series before the first event.
    for (const name of ['sandgate_ownership_claims_total', 'sandgate_ownership_renewals_refused_total', 'sandgate_ownership_lapsed_total', 'sandgate_failovers_total']) deps.metrics.inc(name, 0);
    deps.metrics.gauge('sandgate_sandboxes_owned', () => {
      let owned = 0;
      for (const session of this.sessions.values()) if (!session.closed) owned++;
      return owned;
    });
    // Execs asked of a supervisor whose ExecChannel has not arrived yet (the open in progress).
    deps.metrics.gauge('sandgate_exec_opening', () => {
      let opening = 0;
      for (const session of this.sessions.values()) opening += session.pendingExecs.size;
      return opening;
    });
  }

  /** The live session for a sandbox on this replica, if any. */
  get(sandboxId: string): Session | undefined {
    const s = this.sessions.get(sandboxId);
    return s && !s.closed ? s : undefined;
  }

  /** Sandboxes whose live session this replica holds (the ones it reports usage for). */
  ownedSandboxIds(): string[] {
    const ids: string[] = [];
    for (const [id, session] of this.sessions) if (!session.closed) ids.push(id);
    return ids;
  }

  get size(): number {
    return this.sessions.size;
  }

  /** Handles one supervisor Control stream for its whole life. */
  handleControl(call: ControlCall): void {
    const log = this.deps.log;
    let session: Session | undefined;
    let gone = false;
    const helloTimer = setTimeout(() => {
      if (!session) endWithError(call, new GatewayError(Code.DEADLINE_EXCEEDED, 'expected hello within 10s'));
    }, 10_000);

    let helloSeen = false;
    call.on('data', (msg: SupervisorMessage) => {
      if (!session) {
        helloSeen = true;
        if (!msg.hello) {
          endWithError(call, new GatewayError(Code.INVALID_ARGUMENT, 'first supervisor message must be hello'));
          return;
        }
        clearTimeout(helloTimer);
        // Hold further messages until the session is established.
        call.pause();
        this.accept(call, msg.hello.sandbox_id ?? '', msg.hello.instance_id ?? '', msg.hello.awaiting_main ?? false)
          .then((s) => {
            session = s;
            // The stream may have ended while the hello was being accepted.
            if (gone) void this.close(s, 'control stream ended during hello');
            else call.resume();
          })
          .catch((err: unknown) => {
            log.warn('supervisor hello refused', { err, sandboxId: msg.hello?.sandbox_id });
            endWithError(call, err);
          });
        return;
      }
      session.lastSeenMs = Date.now();
      if (msg.exec_open_failed) {
        session.pendingExecs.reject(
          msg.exec_open_failed.exec_id ?? '',
          new GatewayError(Code.UNAVAILABLE, `supervisor could not open exec: ${msg.exec_open_failed.message ?? ''}`),
        );
      }
      if (msg.tcp_open_failed) {
        session.pendingTcp.reject(
          msg.tcp_open_failed.channel_id ?? '',
          new GatewayError(Code.UNAVAILABLE, `supervisor could not open the connection: ${msg.tcp_open_failed.message ?? ''}`),
        );
      }
      if (msg.main_exit) this.onMainExit(session, msg.main_exit);
      if (msg.terminal_final) this.onTerminalFinal(session, msg.terminal_final);
      if (msg.exec_kill_result) session.kills.resolve(msg.exec_kill_result.request_id ?? '', msg.exec_kill_result.killed ?? 0);
      if (msg.policy_applied) this.onPolicyApplied(session, msg.policy_applied.revision ?? 0, msg.policy_applied.error ?? '');
      if (msg.main_started) this.onMainStarted(session);
      // The supervisor's finished spans, on to this replica's OTLP endpoint (otel.ts).
      if (msg.spans?.otlp_json && session && !relaySpans(msg.spans.otlp_json)) this.deps.metrics.inc('sandgate_supervisor_spans_dropped_total');
    });
    const onGone = () => {
      gone = true;
      clearTimeout(helloTimer);
      if (session) void this.close(session, 'control stream ended');
    };
    // A stream the supervisor half-closes before any hello gets an answer at once: the hello
    // timer is cleared on the way out, so nothing else would ever end the call (found by the
    // fuzzer: such a call stayed open for as long as the client kept its connection).
    call.on('end', () => {
      if (!session && !helloSeen) endWithError(call, new GatewayError(Code.INVALID_ARGUMENT, 'control stream ended before its hello'));
      onGone();
    });
    call.on('error', onGone);
    call.on('cancelled', onGone);
    call.on('close', onGone);
  }

  private async accept(call: ControlCall, sandboxId: string, instanceId: string, awaitingMain: boolean): Promise<Session> {
    const { store, ownership, replicaId, heartbeatIntervalMs, heartbeatMisses, log, metrics } = this.deps;
    if (this.draining) throw new GatewayError(Code.UNAVAILABLE, 'replica is shutting down');
    if (!sandboxId || !instanceId) throw new GatewayError(Code.INVALID_ARGUMENT, 'hello needs sandbox_id and instance_id');
    const record = await store.get(sandboxId);
    const credential = call.metadata.get(MetadataKey.credential)[0];
    if (!record || !verifyCredential(typeof credential === 'string' ? credential : '', record.credentialHash)) {
      // One answer for both, so a credential cannot be used to probe for sandbox ids.
      throw new GatewayError(Code.PERMISSION_DENIED, 'unknown sandbox or bad credential');
    }
    if (call.cancelled) throw new GatewayError(Code.CANCELLED, 'supervisor went away during hello');

    const session = new Session(sandboxId, instanceId, call);
    session.awaitingMain = awaitingMain;
    const previous = this.sessions.get(sandboxId);
    if (previous) void this.close(previous, SUPERSEDED);
    // A lease still held by another replica is a failover: its owner stopped renewing (died,
    // stalled, lost its network) and the supervisor came here. The time since that owner's last
    // renewal (TTL minus what is left) is how long the sandbox had no working owner, to within a
    // renewal interval. (A session back after its lease lapsed is an ordinary claim.)
    const lease = await ownership.lease(sandboxId).catch(() => null);
    const claimedAt = Date.now();
    session.fence = await ownership.claim(sandboxId, replicaId, session.sessionId, instanceId);
    session.leaseUntilMs = claimedAt + ownership.ttlMs;
    metrics.inc('sandgate_ownership_claims_total');
    if (lease && lease.replica !== replicaId) {
      metrics.inc('sandgate_failovers_total');
      metrics.record('sandgate_failover_duration', Math.max(0, ownership.ttlMs - lease.remainingMs) / 1000);
    }

    await store.mutate(sandboxId, (cur) => {
      // A newer session (a later claim, through any replica) got here first: its word stands.
      if (cur.ownerFence > session.fence) return null;
      const extra = { ownfence: String(session.fence) };
      const next = onSupervisorConnected(cur.sandbox.status as LifecycleStatus, instanceId, new Date());
      if (!next) return { sandbox: cur.sandbox, extra };
      return { sandbox: { ...cur.sandbox, status: { ...(next as object), exit_code: next.exit_code } as typeof cur.sandbox.status }, extra };
    });

    // A fence a failover could take back would be issued again to the next claim: fencing needs
    // the claim replicated before the session acts on it (UNAVAILABLE: the supervisor retries).
    await this.deps.replication?.confirm('the ownership claim');

    // Two hellos of one sandbox may overlap here (a supervisor reconnecting while its previous
    // hello is still being accepted): whichever finishes last, the later claim — the higher
    // fence — is the session kept. From this check to the map insertion nothing awaits.
    const current = this.sessions.get(sandboxId);
    if (current && current.fence > session.fence) {
      throw new GatewayError(Code.ABORTED, 'superseded by a newer session of the same sandbox');
    }
    if (current) void this.close(current, SUPERSEDED);
    metrics.inc('sandgate_supervisor_sessions_accepted_total');
    // tracing: this replica exports traces, so the supervisor records spans and relays them here.
    call.write({ hello_ack: { session_id: session.sessionId, heartbeat_interval_ms: heartbeatIntervalMs, replica_id: replicaId, fence: session.fence, tracing: tracingEnabled() } });
    // Only now may execs use the session: the supervisor ignores open_exec before hello_ack,
    // and the stream keeps this order. (Until then relays get a retriable UNAVAILABLE.)
    this.sessions.set(sandboxId, session);
    log.info('supervisor session accepted', { sandboxId, sessionId: session.sessionId, fence: session.fence, instanceId });

    // Heartbeats: send ours, and close the session after `heartbeatMisses` silent intervals.
    // If this replica itself stalled (a GC pause, SIGSTOP, an overloaded host), the supervisor's
    // heartbeats are sitting unread in the socket: judge silence only after a timely tick.
    let lastTick = Date.now();
    session.timers.push(
      setInterval(() => {
        const now = Date.now();
        const stalled = now - lastTick > heartbeatIntervalMs * 2;
        lastTick = now;
        if (stalled) {
          session.lastSeenMs = Math.max(session.lastSeenMs, now - heartbeatIntervalMs);
          return;
        }
        if (now - session.lastSeenMs > heartbeatIntervalMs * heartbeatMisses) {
          metrics.inc('sandgate_supervisor_sessions_timed_out_total');
          void this.close(session, 'heartbeats stopped');
          return;
        }
        call.write({ heartbeat: { sent_at_ms: Date.now() } });
      }, heartbeatIntervalMs),
    );
    // Ownership is renewed by renewAll(), for every session of this replica at once.
    this.ensureRenewTimer();
    // The policy in force, read after the session became visible: an UpdateConfig that wrote
    // before this read is sent here, one that writes after it finds the session and pushes
    // itself. So a supervisor that was away (or started before the update) never misses one.
    this.pushPolicy(sandboxId, 0).catch((err: unknown) => {
      // A session that ended meanwhile gets the policy at its next hello: nothing to report.
      if (!session.closed) log.warn('policy push after hello failed', { sandboxId, err });
    });
    // A claimed pool member that came back (or whose claim's start_main was lost) without its
    // main process: start it now. A member still in its pool keeps waiting.
    if (awaitingMain) {
      this.startMain(sandboxId).catch((err: unknown) => {
        if (!session.closed) log.warn('start_main after hello failed', { sandboxId, err });
      });
    }
    return session;
  }

  /**
   * Makes a claimed warm-pool member's supervisor on this replica start its main process with the
   * command and environment the claim wrote to the record (read now), and waits for its
   * main_started. 'no-session' when this replica holds no session of the sandbox (it then gets
   * start_main at its next hello); 'started' at once when the main process already runs;
   * 'unclaimed' for a member still in its pool (nothing to start yet).
   */
  async startMain(sandboxId: string, timeoutMs = MAIN_START_TIMEOUT_MS): Promise<'started' | 'no-session' | 'unclaimed'> {
    const session = this.get(sandboxId);
    if (!session) return 'no-session';
    if (!session.awaitingMain) return 'started';
    const record = await this.deps.store.get(sandboxId);
    if (!record) return 'no-session';
    if (record.pool) return 'unclaimed';
    const spec = record.sandbox.spec!;
    const start = { argv: spec.command, env: sandboxEnvironment(spec), tty: spec.tty ?? false };
    await session.mainStarts.wait(
      randomUUID(),
      timeoutMs,
      () => new GatewayError(Code.UNAVAILABLE, `the sandbox's supervisor did not confirm starting its main process within ${timeoutMs / 1000}s`),
      () => session.call.write({ start_main: start }),
    );
    return 'started';
  }

  /** main_started: every start_main wait of the session is settled; the record stops saying it is pending. */
  private onMainStarted(session: Session): void {
    session.awaitingMain = false;
    session.mainStarts.resolveWhere(() => true, undefined);
    this.deps.store
      .mutate(session.sandboxId, (cur) => (cur.mainPending ? { sandbox: cur.sandbox, extra: { mainpending: '0' } } : null))
      .catch((err: unknown) => this.deps.log.warn('recording the started main process failed', { sandboxId: session.sandboxId, err }));
  }

  /**
   * Makes the sandbox's supervisor on this replica apply the policy in force (read from the
   * record now, so never older than `minRevision`) and waits for its policy_applied. False when
   * this replica holds no session of the sandbox (it then gets the policy at its next hello).
   */
  async pushPolicy(sandboxId: string, minRevision: number, timeoutMs = POLICY_APPLY_TIMEOUT_MS): Promise<boolean> {
    const session = this.get(sandboxId);
    if (!session) return false;
    const record = await this.deps.store.get(sandboxId);
    if (!record) return false;
    const { bytes, revision } = policyInForce(record);
    if (revision === 0 || session.appliedPolicyRevision >= Math.max(revision, minRevision)) return true;
    await session.policyWaits.wait(
      `${revision}/${randomUUID()}`,
      timeoutMs,
      () =>
        new GatewayError(
          Code.UNAVAILABLE,
          `policy revision ${revision} is stored, but the sandbox's supervisor did not confirm applying it within ${timeoutMs / 1000}s; it gets it again when it reconnects (retrying is safe)`,
        ),
      () => session.call.write({ policy_update: { policy: bytes ?? Buffer.alloc(0), revision } }),
    );
    return true;
  }

  /** policy_applied: settles every wait for this revision or an older one; records it on the sandbox. */
  private onPolicyApplied(session: Session, revision: number, error: string): void {
    const revisionOf = (id: string) => Number(id.slice(0, id.indexOf('/')));
    if (error) {
      session.policyWaits.rejectWhere(
        (id) => revisionOf(id) === revision,
        new GatewayError(Code.INTERNAL, `the sandbox's supervisor could not apply policy revision ${revision}: ${error}`),
      );
      return;
    }
    session.appliedPolicyRevision = Math.max(session.appliedPolicyRevision, revision);
    session.policyWaits.resolveWhere((id) => revisionOf(id) <= revision, undefined);
    // GetSandbox's status.current_policy_version: what the supervisor last confirmed (upstream: LOADED).
    this.deps.store
      .mutate(session.sandboxId, (cur) => {
        if ((cur.sandbox.status?.current_policy_version ?? 0) >= revision) return null;
        return { sandbox: { ...cur.sandbox, status: { ...cur.sandbox.status!, current_policy_version: revision } } };
      })
      .catch((err: unknown) => this.deps.log.warn('recording the applied policy failed', { sandboxId: session.sandboxId, err }));
  }

  /** Ends a session: stops timers, fails pending execs, releases ownership if still ours. */
  async close(session: Session, reason: string): Promise<void> {
    if (session.closed) return;
    session.closed = true;
    for (const t of session.timers) clearInterval(t);
    if (this.sessions.get(session.sandboxId) === session) this.sessions.delete(session.sandboxId);
    for (const pending of [session.pendingExecs, session.kills, session.pendingTcp, session.policyWaits, session.mainStarts]) {
      pending.rejectAll(new GatewayError(Code.UNAVAILABLE, `supervisor session closed: ${reason}`));
    }
    endWithError(session.call, new GatewayError(Code.UNAVAILABLE, `session closed: ${reason}`));
    this.deps.log.info('supervisor session closed', { sandboxId: session.sandboxId, sessionId: session.sessionId, reason });
    try {
      const released = await this.deps.ownership.release(session.sandboxId, session.fence);
      // A supervisor usually reconnects within a second or two (through another replica, too):
      // only a session that stays gone moves the sandbox out of Ready. Until then access is
      // answered with a retriable UNAVAILABLE, not a precondition failure.
      if (released) {
        const timer = setTimeout(() => {
          this.markDisconnected(session).catch((err: unknown) =>
            this.deps.log.warn('marking disconnect failed', { sandboxId: session.sandboxId, err }),
          );
        }, this.deps.disconnectGraceMs);
        timer.unref();
      }
    } catch (err) {
      this.deps.log.warn('ownership release failed', { sandboxId: session.sandboxId, err });
    }
  }

  /** Ready → Provisioning when the supervisor is gone, unless a newer session already moved it. */
  private async markDisconnected(session: Session): Promise<void> {
    if (await this.deps.ownership.get(session.sandboxId)) return; // it came back meanwhile
    await this.deps.store.mutate(session.sandboxId, (cur) => {
      if (cur.ownerFence !== session.fence) return null;
      const next = onSupervisorDisconnected(cur.sandbox.status as LifecycleStatus, new Date());
      return next ? { sandbox: { ...cur.sandbox, status: next as typeof cur.sandbox.status } } : null;
    });
  }

  /** Main-process exit: acknowledged only after it is durable (the supervisor resends until then). */
  private onMainExit(session: Session, report: { instance_id?: string; exit_code?: number; oom_killed?: boolean }): void {
    const instanceId = report.instance_id ?? '';
    this.recordReport(session, 'main exit', 'the main process exit', () =>
      this.deps.reports.mainExit(session.sandboxId, instanceId, report.exit_code ?? 0, report.oom_killed ?? false),
    ).then((recorded) => {
      if (recorded && !session.closed) session.call.write({ main_exit_ack: { instance_id: instanceId } });
    });
  }

  private onTerminalFinal(session: Session, report: { instance_id?: string }): void {
    const instanceId = report.instance_id ?? '';
    this.recordReport(session, 'terminal final', 'the terminal delivery', () => this.deps.reports.terminalFinal(session.sandboxId, instanceId)).then((recorded) => {
      if (recorded && !session.closed) session.call.write({ terminal_final_ack: { instance_id: instanceId } });
    });
  }

  /**
   * Records a supervisor's report and confirms it replicated (WAIT) before it is acknowledged:
   * the supervisor stops resending once acknowledged, so a write a failover could take back
   * would be lost for good (an ephemeral sandbox never cleaned up, a restart never made). Tried
   * again every REPORT_RETRY_MS while the session lasts (recording is idempotent, and after a
   * failover the retry writes it on the new primary); a new session gets the supervisor's resend.
   */
  private async recordReport(session: Session, label: string, what: string, record: () => Promise<void>): Promise<boolean> {
    for (let attempt = 1; !session.closed; attempt++) {
      try {
        await record();
        await this.deps.replication?.confirm(what);
        return true;
      } catch (err) {
        if (attempt === 1) this.deps.log.warn(`${label} report not recorded yet; retrying while the session lasts`, { sandboxId: session.sandboxId, err });
        await sleep(REPORT_RETRY_MS);
      }
    }
    return false;
  }

  /** Ends this replica's session of a sandbox, if it holds one (stop, start, revocation). */
  async drop(sandboxId: string, reason: string): Promise<void> {
    const s = this.sessions.get(sandboxId);
    if (s) await this.close(s, reason);
  }

  /** Asks the supervisor to open an exec and resolves with its ExecChannel once attached. */
  openExec(session: Session, start: ExecStart): Promise<ExecChannelCall> {
    const limit = this.deps.maxExecsPerSandbox;
    if (session.activeExecs + session.pendingExecs.size >= limit) {
      this.deps.metrics.inc('sandgate_exec_rejected_limit_total');
      return Promise.reject(
        new GatewayError(
          Code.RESOURCE_EXHAUSTED,
          `sandbox has ${limit} execs running, the limit per sandbox; wait for one to finish or cancel one`,
        ),
      );
    }
    return session.pendingExecs.wait(start.exec_id!, CHANNEL_ATTACH_TIMEOUT_MS, relayOpenTimedOut, () =>
      session.call.write({ open_exec: start }),
    );
  }

  /** An ExecChannel call from a supervisor: its first frame names the pending exec. */
  handleExecChannel(call: ExecChannelCall): void {
    const attach = (frame: ExecFrame) => frame.attach && { sessionId: frame.attach.session_id, id: frame.attach.exec_id };
    // The exec's slot is held until the channel is gone, whichever way it goes.
    this.attachChannel(call, attach, (s) => s.pendingExecs, 'unknown or expired exec channel', (session) => {
      session.activeExecs++;
      onceGone(call, () => session.activeExecs--);
    });
  }

  /** Asks the supervisor to open a TCP channel and resolves with its TcpChannel call once attached. */
  openTcp(session: Session, open: TcpOpen): Promise<TcpChannelCall> {
    return session.pendingTcp.wait(open.channel_id!, CHANNEL_ATTACH_TIMEOUT_MS, relayOpenTimedOut, () =>
      session.call.write({ open_tcp: open }),
    );
  }

  /** A TcpChannel call from a supervisor: its first frame names the pending TCP channel. */
  handleTcpChannel(call: TcpChannelCall): void {
    const attach = (frame: TcpFrame) => frame.attach && { sessionId: frame.attach.session_id, id: frame.attach.channel_id };
    this.attachChannel(call, attach, (s) => s.pendingTcp, 'unknown or expired relay channel');
  }

  /**
   * A channel call (ExecChannel, TcpChannel) from a supervisor: its first frame attaches it to a
   * request of the sandbox's live session, which it then answers. Anything else is NOT_FOUND.
   */
  private attachChannel<F, C extends ServerDuplexStream<F, F>>(
    call: C,
    attachOf: (frame: F) => { sessionId?: string; id?: string } | undefined,
    pendingOf: (session: Session) => PendingRequests<C>,
    unknownMessage: string,
    onAttached?: (session: Session) => void,
  ): void {
    const timer = setTimeout(() => endWithError(call, new GatewayError(Code.DEADLINE_EXCEEDED, 'expected attach frame')), ATTACH_FRAME_TIMEOUT_MS);
    // Half-closed before the attach frame: answer now rather than when the timer fires.
    const onEarlyEnd = () => {
      clearTimeout(timer);
      endWithError(call, new GatewayError(Code.INVALID_ARGUMENT, 'channel ended before its attach frame'));
    };
    call.once('end', onEarlyEnd);
    call.once('data', (frame: F) => {
      call.off('end', onEarlyEnd);
      clearTimeout(timer);
      const sandboxId = call.metadata.get(MetadataKey.sandboxId)[0];
      const session = typeof sandboxId === 'string' ? this.get(sandboxId) : undefined;
      const attach = attachOf(frame);
      const id = attach?.id ?? '';
      if (!session || attach?.sessionId !== session.sessionId || !pendingOf(session).has(id)) {
        endWithError(call, new GatewayError(Code.NOT_FOUND, unknownMessage));
        return;
      }
      // Stop the flow until the relay pipes this call somewhere (back-pressure from the start).
      call.pause();
      onAttached?.(session);
      pendingOf(session).resolve(id, call);
    });
  }

  /** Asks the supervisor to kill whatever still carries the exec's tag; resolves with how many. */
  killExec(session: Session, execId: string, timeoutMs = 10_000): Promise<number> {
    const requestId = randomUUID();
    return session.kills.wait(
      requestId,
      timeoutMs,
      () => new GatewayError(Code.DEADLINE_EXCEEDED, 'supervisor did not answer the kill request'),
      () => session.call.write({ kill_exec: { exec_id: execId, request_id: requestId } }),
    );
  }

  private ensureRenewTimer(): void {
    if (this.renewTimer) return;
    this.renewTimer = setInterval(() => void this.renewAll(), Math.max(200, Math.floor(this.deps.ownership.ttlMs / 3)));
  }

  /**
   * Renews the ownership of every session held here, in one Redis round trip per 500 sessions
   * (a call per session cost each replica a promise and a round trip per session every tick).
   * A session whose record is no longer ours — a newer claim or a revocation — is closed.
   */
  async renewAll(): Promise<void> {
    if (this.renewing) {
      // The previous tick is still waiting for Redis: leases may run out meanwhile.
      this.endLapsed();
      return;
    }
    const live = [...this.sessions.values()].filter((s) => !s.closed);
    if (live.length === 0) return;
    this.renewing = true;
    const sentAt = Date.now();
    try {
      const results = await this.deps.ownership.renewMany(
        live.map((s) => ({ sandboxId: s.sandboxId, fence: s.fence, holder: { replica: this.deps.replicaId, session: s.sessionId, instance: s.instanceId } })),
      );
      results.forEach((ok, i) => {
        if (ok) {
          live[i]!.leaseUntilMs = sentAt + this.deps.ownership.ttlMs;
          return;
        }
        this.deps.metrics.inc('sandgate_ownership_renewals_refused_total');
        void this.close(live[i]!, 'ownership lost to a newer session');
      });
    } catch (err) {
      this.deps.log.warn('ownership renew failed', { sessions: live.length, err });
      this.endLapsed();
    } finally {
      this.renewing = false;
    }
  }

  /**
   * Redis out of reach for this replica: a session whose ownership key has expired by now holds
   * a sandbox no other replica can route to (no owner record) while its supervisor, hearing our
   * heartbeats, stays. Ending it sends the supervisor to reconnect wherever the balancer sends
   * it, a replica that can reach Redis if there is one. A short blip (shorter than the TTL)
   * ends nothing. Also run from a timer, since a renewal can wait on Redis for long.
   */
  private endLapsed(): void {
    const now = Date.now();
    for (const s of this.sessions.values()) {
      if (s.closed || s.leaseUntilMs === 0 || now <= s.leaseUntilMs) continue;
      this.deps.metrics.inc('sandgate_ownership_lapsed_total');
      void this.close(s, 'ownership lapsed: Redis out of reach for longer than the owner TTL');
    }
  }

  /** Graceful shutdown: release every session at once so supervisors move without waiting for expiry. */
  async drain(): Promise<void> {
    clearInterval(this.renewTimer);
    this.draining = true;
    await Promise.all([...this.sessions.values()].map((s) => this.close(s, 'replica shutting down')));
  }
}

function relayOpenTimedOut(): GatewayError {
  return new GatewayError(Code.DEADLINE_EXCEEDED, 'relay open timed out');
}
