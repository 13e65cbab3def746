// Exec, as clients and peers see it. The entry replica validates, applies the access rule and
// opens an ExecPath to the supervisor (local or through the owner); frames are then relayed
// unchanged, with back-pressure, until the supervisor reports the exit.
import type { Principal } from '@sandgate/core';
import { randomUUID } from 'node:crypto';
import type { ServerWritableStream, ServiceError } from '@grpc/grpc-js';
import type { JobScheduler } from '@sandgate/jobs';
import type { Readable, Writable } from 'node:stream';
import type { ExecFrame, ExecSandboxEvent, ExecSandboxInput, ExecSandboxRequest, ExecStart } from '@sandgate/protocols';
import { GatewayError, Code, validateExec, EXIT_TIMEOUT, type DebugBreak } from '@sandgate/core';
import type { SandboxStore, WorkspaceExecSlots } from '@sandgate/store';
import { activeSpan, extractContext, failSpan, injectContext, otelContext, SpanKind, startSpan, TraceAttr, type Logger, type Metrics, type Span } from '@sandgate/telemetry';
import { SessionNotHere, toPeerError, type ExecPath, type ExecRouter } from '../relay/exec-router.ts';
import { endWithError, onceGone, takeFirstMessage } from '../api/calls.ts';
import { byteSlices, limitReadAhead, pump, type LinkChannel } from '@sandgate/relay';
import { relayFailure, toClientError, toServiceError } from '../api/grpc-errors.ts';
import { requireAccess, type AccessDeps, type WorkspaceAccess } from '../api/access.ts';
import { OOM_NOTE } from '../sandboxes/lifecycle-service.ts';

/**
 * The argv that attaches to the sandbox's main process instead of starting a command (the same
 * name as upstream's SSH subsystem): replayed output, live output, then the main process's exit.
 */
export const MAIN_ATTACH_COMMAND = 'openshell-main';

/** After the deadline, how long the supervisor has to report its own timeout before the gateway does. */
const TIMEOUT_BACKSTOP_GRACE_MS = 3_000;

export interface ExecServiceDeps {
  store: SandboxStore;
  /** This replica (named on its trace spans). */
  replicaId?: string;
  router: ExecRouter;
  /** Durable deadline jobs for execs with a timeout; null when jobs are disabled. */
  scheduler: JobScheduler | null;
  log: Logger;
  metrics: Metrics;
  /** Debug faults of this process (only `retriable-errors` acts here); normally empty. */
  debugBreaks?: ReadonlySet<DebugBreak>;
  /** A line in the sandbox's log (LifecycleService.note). */
  note?: (sandboxId: string, message: string, level?: string) => void;
  /** Workspace scoping (access.ts): another workspace's sandbox is NOT_FOUND. */
  workspaces: WorkspaceAccess;
  /** Live execs per workspace across replicas (`--max-execs-per-workspace`; 0 = no limit). */
  execSlots: WorkspaceExecSlots;
  maxExecsPerWorkspace: number;
}

/** The client's side of an exec: where its events go, and whether it is still there. */
type ClientCall = Writable & { cancelled: boolean; on(e: 'cancelled', f: () => void): unknown };

/**
 * What an interactive client may send: the gRPC messages, plus two that only the WebSocket adapter
 * (api/rest/exec-ws.ts) sends, because its stream stays open after stdin ends: a signal for the
 * exec's process group, and stdin EOF. (Upstream's ExecSandboxInput has neither, so a gRPC client
 * never produces them: protobuf decoding yields only the proto's fields.)
 */
export type InteractiveInput = ExecSandboxInput & { signal?: { signo: number }; stdin_eof?: true };

/**
 * An event for the client. The exit also says whether the deadline ended it: the WebSocket
 * protocol reports it; protobuf encoding drops the field (upstream's ExecSandboxExit has only the code).
 */
export type ClientExecEvent = ExecSandboxEvent & { exit?: { exit_code?: number; timed_out?: boolean } };

/** An interactive client's call: the gRPC ServerDuplexStream, or an adapter shaped like it (exec-ws.ts). */
export type InteractiveCall = Readable & ClientCall;

function toClientEvent(frame: ExecFrame): ClientExecEvent | null {
  if (frame.stdout) return { stdout: { data: frame.stdout } };
  if (frame.stderr) return { stderr: { data: frame.stderr } };
  if (frame.exit) return { exit: { exit_code: frame.exit.exit_code ?? 0, timed_out: frame.exit.timed_out ?? false } };
  return null;
}

export class ExecService {
  private readonly deps: ExecServiceDeps;
  private readonly access: AccessDeps;

  constructor(deps: ExecServiceDeps) {
    this.deps = deps;
    this.access = { store: deps.store, sessionLive: (sandboxId) => deps.router.sessionLive(sandboxId) };
    // Every series at zero from the start: a rate or an alert has something to read before the first event.
    for (const path of ['local', 'relayed']) deps.metrics.inc('sandgate_execs_total', 0, { path });
    for (const reason of ['timeout', 'cancel', 'disconnect', 'backstop']) deps.metrics.inc('sandgate_exec_kills_total', 0, { reason });
  }

  /** The status the client gets for a failed exec (see toClientError). */
  private clientError(err: unknown): Partial<ServiceError> {
    return toClientError(err, this.deps.log, this.deps.debugBreaks?.has('retriable-errors') ?? false);
  }

  /** Validation, existence and the access rule; returns the start frame for the supervisor. */
  private async prepare(req: ExecSandboxRequest, stdinEof: boolean, caller: Principal): Promise<{ start: ExecStart; workspace: string }> {
    const sandboxId = validateExec(req);
    // The request names the sandbox by id: its record's workspace decides, never a request field.
    const record = await requireAccess(this.access, sandboxId, { caller, workspaces: this.deps.workspaces });
    const attachMain = req.command.length === 1 && req.command[0] === MAIN_ATTACH_COMMAND;
    const start: ExecStart = {
      attach_main: attachMain,
      exec_id: randomUUID(),
      sandbox_id: sandboxId,
      argv: req.command,
      workdir: req.workdir ?? '',
      env: req.environment,
      timeout_seconds: attachMain ? 0 : (req.timeout_seconds ?? 0),
      tty: req.tty ?? false,
      cols: req.tty ? req.cols || 80 : 0,
      rows: req.tty ? req.rows || 24 : 0,
      stdin: req.stdin ?? Buffer.alloc(0),
      stdin_eof: stdinEof,
    };
    const workspace = record.sandbox.metadata?.workspace ?? '';
    // The call's SERVER span (call-tracing.ts) carries the exec; its context rides the first
    // frame to the owner replica and on to the supervisor.
    const trace = injectContext();
    if (trace.traceparent) start.trace_context = trace;
    activeSpan().setAttributes({ [TraceAttr.sandboxId]: sandboxId, [TraceAttr.workspace]: workspace, [TraceAttr.execId]: start.exec_id! });
    return { start, workspace };
  }

  /**
   * Takes one of the workspace's exec slots for as long as the client's call lives (released when
   * it ends, however it ends); RESOURCE_EXHAUSTED when the workspace is at its cap.
   */
  private async takeSlot(workspace: string, execId: string, client: ClientCall): Promise<() => void> {
    const cap = this.deps.maxExecsPerWorkspace;
    const slot = { workspace, execId };
    if (!(await this.deps.execSlots.acquire(slot, cap))) {
      this.deps.metrics.inc('sandgate_exec_refused_workspace_cap_total');
      throw new GatewayError(
        Code.RESOURCE_EXHAUSTED,
        `workspace '${workspace}' has reached its limit of ${cap} concurrent execs (--max-execs-per-workspace); wait for one to finish`,
      );
    }
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      this.deps.execSlots.release(slot).catch((err: unknown) => this.deps.log.warn('exec slot release failed', { execId, err }));
    };
    // onceGone keeps its listeners: a later 'error' still finds one.
    onceGone(client, release);
    if (client.destroyed || client.writableFinished) release();
    return release;
  }

  /**
   * Opens the path to the supervisor; an exec with a deadline then gets its durable backstop job,
   * so that a crash of any replica cannot let the tree outlive the deadline unnoticed.
   */
  private async openPath(start: ExecStart, deadlineAtMs: number | undefined): Promise<ExecPath> {
    const path = await this.deps.router.open(start.sandbox_id!, start, deadlineAtMs);
    // The supervisor was handed what is left of the deadline (timeout_ms), so its clock ends at
    // about `deadlineAtMs` too; the job's grace covers the hops. (Until this is enqueued the
    // supervisor's local timeout alone holds the deadline, as it always does.)
    if (deadlineAtMs !== undefined && this.deps.scheduler) {
      try {
        await this.deps.scheduler.execDeadline({
          sandboxId: start.sandbox_id!,
          execId: start.exec_id!,
          deadlineMs: deadlineAtMs,
        });
      } catch (err) {
        path.abort('could not record the exec deadline');
        throw err;
      }
    }
    return path;
  }

  /**
   * Validates, applies the access rule, opens the path and relays its output to the client;
   * null when the client went away first (nobody would see this exec).
   */
  private async begin(req: ExecSandboxRequest, stdinEof: boolean, client: ClientCall, caller: Principal): Promise<ExecPath | null> {
    const startedAt = performance.now();
    // An exec's deadline runs from here: finding its session (even a moving one) is part of it.
    const acceptedAtMs = Date.now();
    const { start, workspace } = await this.prepare(req, stdinEof, caller);
    const deadlineAtMs = start.timeout_seconds ? acceptedAtMs + start.timeout_seconds * 1000 : undefined;
    if (client.cancelled) return null;
    const release = await this.takeSlot(workspace, start.exec_id!, client);
    try {
      const path = await this.openPath(start, deadlineAtMs);
      if (client.cancelled) {
        path.abort('client cancelled before the exec started');
        release();
        return null;
      }
      // Counted here, on the entry replica: local = this replica holds the session.
      const execPath = path.via === 'local' ? 'local' : 'relayed';
      this.deps.metrics.inc('sandgate_execs_total', 1, { path: execPath });
      const span = activeSpan();
      span.setAttribute(TraceAttr.execPath, execPath);
      this.relayToClient(path, client, start, deadlineAtMs, span, () => this.deps.metrics.record('sandgate_exec_duration', (performance.now() - startedAt) / 1000, { path: execPath }));
      return path;
    } catch (err) {
      release();
      throw err;
    }
  }

  /** ExecSandbox: server-streaming; stdin is the request's whole payload. */
  handleUnary(call: ServerWritableStream<ExecSandboxRequest, ExecSandboxEvent>, caller: Principal): void {
    this.deps.metrics.inc('sandgate_exec_started_total');
    this.begin(call.request, true, call, caller).catch((err: unknown) => endWithError(call, this.clientError(err)));
  }

  /** ExecSandboxInteractive: bidi; the first message must be `start`. */
  handleInteractive(call: InteractiveCall, caller: Principal): void {
    this.deps.metrics.inc('sandgate_exec_started_total');
    // Later stdin frames stay buffered until the path is open: one message's worth, not 16.
    limitReadAhead(call);
    takeFirstMessage(call, 'empty stream: expected start message', (first: ExecSandboxInput) => {
      if (!first.start) {
        endWithError(call, new GatewayError(Code.INVALID_ARGUMENT, 'first message must be a start payload'));
        return;
      }
      this.begin(first.start, false, call, caller)
        .then((path) => {
          if (!path) return;
          pump(call, path.stream, (input: InteractiveInput): ExecFrame | ExecFrame[] | null => {
            if (input.stdin) return byteSlices(input.stdin).map((stdin) => ({ stdin }));
            if (input.resize) return { resize: { cols: input.resize.cols ?? 0, rows: input.resize.rows ?? 0 } };
            // The supervisor delivers it to the exec's process group (exec-runner.ts).
            if (input.signal) return { signal: { signo: input.signal.signo } };
            if (input.stdin_eof) return { stdin_eof: {} };
            return null;
          });
          // The client's half-close is stdin EOF; the exec goes on until it exits.
          call.on('end', () => {
            if (!path.stream.writableEnded) path.stream.write({ stdin_eof: {} });
          });
        })
        .catch((err: unknown) => endWithError(call, this.clientError(err)));
    });
  }

  /** Output of the path to the client, and every way the exec can end. */
  private relayToClient(path: ExecPath, client: ClientCall, start: ExecStart, deadlineAtMs: number | undefined, span: Span, ended: () => void): void {
    const { log, metrics } = this.deps;
    let exitSeen = false;
    let finished = false;
    let backstop: NodeJS.Timeout | undefined;
    const kill = (reason: 'timeout' | 'cancel' | 'disconnect') => metrics.inc('sandgate_exec_kills_total', 1, { reason });
    const finish = (err?: unknown) => {
      if (finished) return;
      finished = true;
      ended();
      stop();
      clearTimeout(backstop);
      // The upstream hop is closed only once everything was handed to the client's stream: the
      // supervisor takes that as "delivered" (terminal delivery of the main process's exit).
      const closeUpstream = () => {
        if (!path.stream.writableEnded) path.stream.end();
      };
      // A client stream that is already gone emits neither event again: close (and free the slot) now.
      if (client.destroyed || client.writableFinished) closeUpstream();
      client.once('finish', closeUpstream);
      client.once('close', closeUpstream);
      if (err) endWithError(client, this.clientError(err));
      else client.end();
    };
    const stop = pump(path.stream, client, (frame: ExecFrame) => {
      if (frame.error) {
        finish(new GatewayError((frame.error.code ?? Code.UNAVAILABLE) as Code, frame.error.message ?? 'exec path failed'));
        return null;
      }
      if (frame.exit) {
        exitSeen = true;
        metrics.inc('sandgate_exec_finished_total');
        span.setAttributes({ [TraceAttr.exitCode]: frame.exit.exit_code ?? 0, [TraceAttr.timedOut]: frame.exit.timed_out ?? false });
        if (frame.exit.timed_out) {
          kill('timeout');
          span.setAttribute(TraceAttr.killReason, 'timeout');
        }
        if (frame.exit.oom_killed) {
          this.deps.note?.(start.sandbox_id!, `exec ${start.exec_id} (${start.argv?.[0] ?? '?'}) exited with code ${frame.exit.exit_code ?? 137}: ${OOM_NOTE}`, 'WARN');
        }
        // The exit is the last frame: end the client's call as soon as it has been written (the
        // pump writes it when this returns) instead of waiting for every hop's end-of-stream.
        process.nextTick(finish);
        // The supervisor killed what was left of the tree before reporting: the backstop is moot.
        if (start.timeout_seconds && this.deps.scheduler) {
          this.deps.scheduler.cancelExecDeadline(start.exec_id!).catch(() => undefined);
        }
      }
      return toClientEvent(frame);
    });
    path.stream.on('end', () =>
      finish(exitSeen ? undefined : new GatewayError(Code.UNAVAILABLE, 'exec relay closed before the command reported an exit status')),
    );
    const broken = (err: unknown) => {
      if (exitSeen) return finish();
      // A hop between here and the supervisor broke: the supervisor kills the tree (or is gone).
      if (!finished) kill('disconnect');
      finish(relayFailure(err, 'exec relay failed'));
    };
    path.stream.on('error', broken);
    path.stream.on('cancelled', () => broken(undefined));
    // The path may have failed while this exec was being set up (before these listeners).
    const early = path.failure();
    if (early) broken(early);
    client.on('cancelled', () => {
      // grpc-js reports 'cancelled' whenever the call's HTTP/2 stream closes, after a call that
      // ended normally too. Once the upstream hop was closed (closeUpstream: everything was handed
      // to the client) there is nothing to cancel, and aborting then would also throw away a peer
      // link that could carry the next exec.
      if (path.stream.writableEnded) return;
      metrics.inc('sandgate_exec_cancelled_total');
      span.setAttribute(TraceAttr.killReason, 'cancel');
      path.abort('client cancelled the exec');
      if (!finished) {
        if (!exitSeen) kill('cancel');
        ended();
      }
      finished = true;
      stop();
      clearTimeout(backstop);
    });
    if (deadlineAtMs !== undefined) {
      // The supervisor enforces the deadline itself; this only answers the client if it cannot.
      backstop = setTimeout(() => {
        if (exitSeen || finished) return;
        metrics.inc('sandgate_exec_timeout_backstop_total');
        kill('timeout');
        span.setAttributes({ [TraceAttr.killReason]: 'timeout', [TraceAttr.timedOut]: true, [TraceAttr.exitCode]: EXIT_TIMEOUT });
        path.abort('exec deadline passed');
        client.write({ exit: { exit_code: EXIT_TIMEOUT, timed_out: true } });
        exitSeen = true;
        finish();
      }, deadlineAtMs - Date.now() + TIMEOUT_BACKSTOP_GRACE_MS);
    }
  }

  /** Peer.KillExec on the owner replica (a 'call' peer link, already authenticated): the deadline job's backstop. */
  async handlePeerKill(request: { sandbox_id?: string; exec_id?: string; trace_context?: Record<string, string> }): Promise<{ killed: number }> {
    const { sandbox_id: sandboxId, exec_id: execId } = request;
    if (!sandboxId || !execId) throw new GatewayError(Code.INVALID_ARGUMENT, 'sandbox_id and exec_id are required');
    const { span, ctx } = startSpan('sandgate.Peer/KillExec', {
      kind: SpanKind.SERVER,
      parent: extractContext(request.trace_context),
      attributes: { [TraceAttr.sandboxId]: sandboxId, [TraceAttr.execId]: execId, [TraceAttr.killReason]: 'backstop', [TraceAttr.replicaId]: this.deps.replicaId ?? '' },
    });
    try {
      const killed = await otelContext.with(ctx, () => this.deps.router.killExecLocal(sandboxId, execId));
      span.setAttribute(TraceAttr.killed, killed);
      return { killed };
    } catch (err) {
      failSpan(span, err);
      throw err;
    } finally {
      span.end();
    }
  }

  /**
   * A relayed exec on the owner, over a peer link (already authorised). Entry replicas open exec
   * links ahead of need (warm-calls.ts), so a channel may wait idle for its first frame.
   */
  servePeer(call: LinkChannel<ExecFrame>): void {
    call.once('data', (first: ExecFrame) => {
      call.pause();
      const start = first.start;
      if (!start?.sandbox_id || !start.exec_id) {
        endWithError(call, new GatewayError(Code.INVALID_ARGUMENT, 'first peer frame must be start with sandbox_id and exec_id'));
        return;
      }
      if (!this.deps.router.holdsSession(start.sandbox_id)) {
        endWithError(call, toPeerError(new SessionNotHere(), this.deps.log));
        return;
      }
      // "The session is here": from now on the entry replica relays whatever comes, failures
      // included. Said before the supervisor is asked, so that the entry replica's wake-up does
      // not compete with the exec's process start for the CPU.
      call.sendMetadata();
      // The owner's hop of a relayed exec: a child of the entry replica's call span, and the
      // parent of the supervisor's spans.
      const { span, ctx } = startSpan('sandgate.Peer/Exec', {
        kind: SpanKind.SERVER,
        parent: extractContext(start.trace_context),
        attributes: {
          [TraceAttr.sandboxId]: start.sandbox_id,
          [TraceAttr.execId]: start.exec_id,
          [TraceAttr.replicaId]: this.deps.replicaId ?? '',
          [TraceAttr.execPath]: 'relayed',
        },
      });
      if (span.isRecording()) {
        start.trace_context = injectContext(ctx);
        let ended = false;
        const end = (err?: unknown) => {
          if (ended) return;
          ended = true;
          if (err) failSpan(span, err);
          span.end();
        };
        call.on('error', (err: unknown) => end(err));
        onceGone(call, () => end());
      }
      this.deps.router
        .openLocal(start.sandbox_id, start)
        .then((path) => {
          if (call.cancelled) return path.abort('peer went away');
          pump(path.stream, call, (f: ExecFrame) => f);
          pump(call, path.stream, (f: ExecFrame) => (f.stdin || f.stdin_eof || f.resize || f.signal ? f : null));
          path.stream.on('end', () => {
            // Close the supervisor's side only after the entry replica has been handed everything.
            call.once('finish', () => path.stream.end());
            call.end();
          });
          const broken = () => endWithError(call, new GatewayError(Code.UNAVAILABLE, 'supervisor exec channel dropped'));
          path.stream.on('error', broken);
          path.stream.on('cancelled', broken);
          call.on('cancelled', () => path.abort('peer relay cancelled'));
        })
        .catch((err: unknown) => endWithError(call, toPeerError(err, this.deps.log)));
    });
  }
}
