// Runs one exec over one ExecChannel call: attach, spawn, stream output (with back-pressure), feed
// stdin/resize/signal frames, enforce the timeout, report the exit. If the call ends before we
// reported the exit, the path to the client is broken and the exec's whole process tree is killed:
// nobody is left to see its output or its exit.
import type { CallError, CallStatus, GatewayCall } from './gateway-client.ts';
import { EXIT_TIMEOUT, normaliseExit } from '@sandgate/core/exit-codes';
import type { ExecExit, ExecFrame, ExecStart } from '@sandgate/protocols';
import { EXEC_ID_ENV, stripSupervisorEnv } from './config.ts';
import type { GatewayConnection } from './control-session.ts';
import { ProcessTree, spawnPiped, spawnPty, termSize, type ExecProcess, type ExecProcessHandlers } from './exec-process.ts';
import type { KillTreeOptions } from './kill-tree.ts';
import type { DebugBreak } from '@sandgate/core/debug-breaks';
import type { Logger } from '@sandgate/telemetry/log';
import { exitCodeForSpawnError, preflight, reasonOf } from './preflight.ts';
import { isValidSignal } from './signals.ts';
import { OOM_MESSAGE, oomKilled, type WorkloadLauncher } from './workload/launcher.ts';
import type * as Tracing from '@sandgate/telemetry/tracing';

/** @sandgate/telemetry's span helpers, loaded by the supervisor only once tracing is on. */
export type SpanHelpers = typeof Tracing;

export interface ExecRunnerOptions {
  start: ExecStart;
  conn: GatewayConnection;
  /** The sandbox environment (SANDGATE_* already stripped). */
  sandboxEnv: Record<string, string>;
  log: Logger;
  killOptions?: Omit<KillTreeOptions, 'pty' | 'log' | 'leaderStartTime'>;
  /** After a timeout kill, how long to wait for the exit before reporting it anyway. */
  timeoutReportGraceMs?: number;
  /** Debug faults (negative chaos runs only): `exec-kill` never kills the tree, `exec-timeout` ignores the deadline. */
  debugBreaks?: ReadonlySet<DebugBreak>;
  /** Confines the exec's process (see workload/launcher.ts); absent: started as is. */
  launcher?: WorkloadLauncher;
  /** Tracing is on: the exec and its spawn get spans, children of the caller's (start.trace_context). */
  spans?: SpanHelpers;
}

type State = 'running' | 'exited' | 'broken';

const MAX_TIMER_MS = 2 ** 31 - 1;

export class ExecRunner {
  readonly execId: string;
  /** Resolves once the exit was reported or the tree was killed after a broken path. */
  readonly done: Promise<void>;
  private resolveDone!: () => void;
  private readonly opts: ExecRunnerOptions;
  private readonly log: Logger;
  private state: State = 'running';
  private call: GatewayCall<ExecFrame, ExecFrame> | undefined;
  private readonly tree: ProcessTree;
  private stdinEnded = false;
  private timedOut = false;
  /** Ended by the gateway's deadline backstop (expire), not by this supervisor's own timer. */
  private backstopped = false;
  private timeoutTimer: NodeJS.Timeout | undefined;
  /** The workload's OOM-kill count when the exec started (tells an OOM kill from any SIGKILL). */
  private oomBefore: number | undefined;
  /** Output bytes handed to the exec's call, per stream: in the exit log line, so a client that
   *  says it got less can be told apart from a command that wrote less. */
  private readonly sent = { stdout: 0, stderr: 0 };
  private readonly onConnAbort = (): void => this.breakPath('control session lost');
  /** The exec's span (tracing on) and its context, parent of the spawn span. */
  private span: Tracing.Span | undefined;
  private spanCtx: Tracing.Context | undefined;

  constructor(opts: ExecRunnerOptions) {
    this.opts = opts;
    this.execId = opts.start.exec_id ?? '';
    this.log = opts.log.child({ exec_id: this.execId });
    this.tree = new ProcessTree(this.execId, this.log, opts.killOptions, { neverKill: opts.debugBreaks?.has('exec-kill') ?? false });
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
  }

  private get proc(): ExecProcess | undefined {
    return this.tree.proc;
  }

  get finished(): boolean {
    return this.state !== 'running';
  }

  /** Opens the channel, attaches and starts the process. Never throws. */
  run(): void {
    const { start, conn } = this.opts;
    const spans = this.opts.spans;
    if (spans) {
      const { span, ctx } = spans.startSpan('sandgate.supervisor.exec', {
        kind: spans.SpanKind.SERVER,
        parent: spans.extractContext(start.trace_context),
        attributes: {
          [spans.TraceAttr.sandboxId]: start.sandbox_id ?? '',
          [spans.TraceAttr.execId]: this.execId,
          [spans.TraceAttr.replicaId]: conn.replicaId,
          'process.command': start.argv?.[0] ?? '',
          'sandgate.exec.tty': Boolean(start.tty),
        },
      });
      this.span = span;
      this.spanCtx = ctx;
    }
    try {
      const call = conn.client.ExecChannel(conn.metadata());
      this.call = call;
      call.on('error', (err: CallError) => this.breakPath('exec channel error', err));
      call.on('end', () => this.breakPath('exec channel ended by gateway'));
      // 'status' fires as soon as the call is over, even while reading is paused (stdin back-pressure).
      call.on('status', (status: CallStatus) => this.breakPath(`exec channel closed (status ${status.code})`));
      call.on('data', (frame: ExecFrame) => this.onFrame(frame));
      if (conn.signal.aborted) {
        this.breakPath('control session lost');
        return;
      }
      conn.signal.addEventListener('abort', this.onConnAbort, { once: true });
      call.write({ attach: { exec_id: this.execId, session_id: conn.sessionId } });
      this.spawn(start);
    } catch (err) {
      this.log.error('exec setup failed', { err });
      this.breakPath('exec setup failed', err);
    }
  }

  /**
   * The gateway's deadline backstop (Peer.KillExec): the exec's deadline, counted from the
   * client's request, passed without an exit report. It ends as a timeout: the tree is killed and
   * exit 124 (timed out) is reported to whoever still listens, never a silently cancelled channel
   * (which the client could only see as a broken relay). Under load the backstop can come before
   * this supervisor's own timer, which starts at spawn.
   */
  expire(): Promise<void> {
    if (this.state !== 'running') return this.done;
    this.timedOut = true;
    this.backstopped = true;
    clearTimeout(this.timeoutTimer);
    this.log.warn('exec deadline passed (gateway backstop): killing its process tree');
    const report = () => this.reportExit({ exit_code: EXIT_TIMEOUT, timed_out: true, signal: 9 });
    if (!this.proc) report();
    else void this.tree.kill().then(report);
    return this.done;
  }

  /** Shutdown: kill the tree without reporting. */
  abort(reason: string): Promise<void> {
    this.breakPath(reason);
    return this.done;
  }

  private spawn(start: ExecStart): void {
    const argv = start.argv ?? [];
    const cwd = start.workdir || process.cwd();
    const env: Record<string, string> = {
      ...this.opts.sandboxEnv,
      ...stripSupervisorEnv(start.env ?? {}),
      // The one SANDGATE_* variable execs do get: it lets killExecTree find escaped processes.
      [EXEC_ID_ENV]: this.execId,
    };

    const check = preflight(argv[0], cwd, env, this.opts.launcher?.identity);
    if (!check.ok) {
      this.reportSpawnFailure(check.message, check.exitCode);
      return;
    }

    const handlers: ExecProcessHandlers = {
      stdout: (chunk) => {
        if (this.send({ stdout: chunk })) this.sent.stdout += chunk.length;
      },
      stderr: (chunk) => {
        if (this.send({ stderr: chunk })) this.sent.stderr += chunk.length;
      },
      exit: (code, signal) => this.onProcessExit(code, signal),
      childExited: () => this.onChildExited(),
      spawnError: (err) => this.reportSpawnFailure(`${argv[0]}: ${reasonOf(err)}`, exitCodeForSpawnError(err)),
      stdinDrain: () => this.call?.resume(),
    };
    const spec = { argv, cwd, env, cols: termSize(start.cols), rows: termSize(start.rows), launcher: this.opts.launcher };
    this.oomBefore = this.opts.launcher?.oomKills();
    let proc: ExecProcess;
    // The process spawn, as a span of its own (tracing on).
    const spawned = this.opts.spans?.startSpan('sandgate.supervisor.spawn', { parent: this.spanCtx, attributes: { 'process.command': argv[0] ?? '' } });
    try {
      proc = this.tree.proc = start.tty ? spawnPty(spec, handlers) : spawnPiped(spec, handlers);
    } catch (err) {
      if (spawned) this.opts.spans!.failSpan(spawned.span, err);
      spawned?.span.end();
      this.reportSpawnFailure(`${argv[0]}: ${reasonOf(err)}`, exitCodeForSpawnError(err));
      return;
    }
    spawned?.span.setAttribute('process.pid', proc.pid ?? 0);
    spawned?.span.end();
    // Only the command name: arguments may carry secrets.
    this.log.info('exec started', {
      pid: proc.pid,
      argv0: argv[0],
      argc: argv.length,
      tty: Boolean(start.tty),
      endpoint: this.opts.conn.endpoint,
    });

    if (start.stdin && start.stdin.length > 0) this.writeStdin(start.stdin);
    if (start.stdin_eof) this.endStdin();

    const timeoutSeconds = start.timeout_seconds ?? 0;
    if (timeoutSeconds > 0 && !this.opts.debugBreaks?.has('exec-timeout')) {
      // What is left of the deadline the gateway fixed on accepting the exec (a gateway that
      // predates timeout_ms sends only the whole timeout). setTimeout fires immediately for
      // delays beyond 2^31-1 ms (~24.8 days): clamp instead.
      const ms = Math.min(start.timeout_ms || timeoutSeconds * 1000, MAX_TIMER_MS);
      this.timeoutTimer = setTimeout(() => this.onTimeout(), ms);
    }
  }

  private onFrame(frame: ExecFrame): void {
    try {
      if (this.state !== 'running' || !this.proc || !frame) return;
      if (frame.stdin) this.writeStdin(frame.stdin);
      else if (frame.stdin_eof) this.endStdin();
      else if (frame.resize) this.proc.resize(frame.resize.cols ?? 0, frame.resize.rows ?? 0);
      else if (frame.signal) this.signal(frame.signal.signo);
      // Anything else (start, attach, output frames, unknown) makes no sense here: ignored.
    } catch (err) {
      this.log.warn('exec frame handling failed', { err });
    }
  }

  private writeStdin(data: Buffer): void {
    if (this.stdinEnded || !this.proc || data.length === 0) return;
    // Stdin back-pressure: stop reading frames from the gateway until the process catches up.
    if (!this.proc.writeStdin(data)) this.call?.pause();
  }

  private endStdin(): void {
    if (this.stdinEnded || !this.proc) return;
    this.stdinEnded = true;
    this.proc.endStdin();
  }

  private signal(signo: number | undefined): void {
    if (!this.proc || !isValidSignal(signo)) return;
    try {
      process.kill(-this.proc.pgid, signo);
    } catch {
      // The group is gone; the exit is on its way.
    }
  }

  /**
   * Writes one frame; on back-pressure stops reading the process's output until the call drains.
   * False when the frame was not handed to the call (the exec is over or its path broke).
   */
  private send(frame: ExecFrame): boolean {
    const call = this.call;
    if (this.state !== 'running' || !call) return false;
    let ok: boolean;
    try {
      ok = call.write(frame);
    } catch (err) {
      this.breakPath('exec channel write failed', err);
      return false;
    }
    this.tree.afterOutputWrite(ok, call, () => this.state === 'running');
    return true;
  }

  private reportSpawnFailure(message: string, exitCode: number): void {
    if (this.state !== 'running') return;
    this.log.info('exec could not be started', { message, exit_code: exitCode });
    this.send({ stderr: Buffer.from(message + '\n') });
    this.reportExit({ exit_code: exitCode, timed_out: false, signal: 0 });
  }

  /**
   * The command itself exited. What it started ends with it: background jobs, nohup'd or setsid'd
   * children still carrying the exec's tag are killed (plain exec is always attached). Once they
   * are gone the output pipes close and the exit is reported; if something untagged still holds
   * them, stop waiting shortly after.
   */
  private onChildExited(): void {
    if (this.state !== 'running' || this.timedOut) return;
    this.tree.leaderExited(() => this.state === 'running');
  }

  private onProcessExit(code: number | null, signal: number | null): void {
    if (this.state !== 'running') return;
    // Report the exit only once the whole tree is gone: after a timeout "exit 124" means nothing
    // survived, and after a normal exit nothing the command started lingers.
    const exit: ExecExit = this.timedOut
      ? { exit_code: EXIT_TIMEOUT, timed_out: true, signal: signal ?? 0 }
      : { exit_code: normaliseExit(code, signal), timed_out: false, signal: signal ?? 0 };
    if (!this.timedOut && oomKilled(this.opts.launcher, this.oomBefore, signal)) {
      this.log.warn('exec killed by the out-of-memory killer', { exit_code: exit.exit_code });
      this.send({ stderr: Buffer.from(OOM_MESSAGE) });
      // Also on the exit, so the gateway can say it in the sandbox's log.
      exit.oom_killed = true;
    }
    void this.tree.kill().then(() => this.reportExit(exit));
  }

  private onTimeout(): void {
    if (this.state !== 'running') return;
    this.timedOut = true;
    this.log.info('exec timed out', { timeout_seconds: this.opts.start.timeout_seconds });
    void this.tree.kill().then(() => {
      if (this.state !== 'running') return;
      // Normally the exit arrives as the tree dies. If processes that shed the tag still hold the
      // output pipes, stop waiting for them; if even that does not produce an exit, report anyway.
      const grace = this.opts.timeoutReportGraceMs ?? 2000;
      setTimeout(() => {
        if (this.state !== 'running') return;
        this.proc?.abandonOutput();
        setTimeout(() => {
          if (this.state === 'running') this.reportExit({ exit_code: EXIT_TIMEOUT, timed_out: true, signal: 9 });
        }, 500);
      }, grace);
    });
  }

  private reportExit(exit: ExecExit): void {
    if (this.state !== 'running') return;
    this.state = 'exited';
    this.cleanup();
    const call = this.call;
    if (call) {
      try {
        call.write({ exit });
        call.end();
        // Keep consuming so the call can complete even if stdin back-pressure had paused it.
        call.resume();
      } catch (err) {
        this.log.warn('could not report exec exit', { err });
      }
    }
    this.log.info('exec exited', { exit_code: exit.exit_code, timed_out: exit.timed_out, signal: exit.signal, stdout_bytes: this.sent.stdout, stderr_bytes: this.sent.stderr });
    const spans = this.opts.spans;
    if (this.span && spans) {
      this.span.setAttributes({
        [spans.TraceAttr.exitCode]: exit.exit_code ?? 0,
        [spans.TraceAttr.timedOut]: exit.timed_out ?? false,
        'process.exit.signal': exit.signal ?? 0,
      });
      if (exit.timed_out) this.span.setAttribute(spans.TraceAttr.killReason, this.backstopped ? 'backstop' : 'timeout');
      this.span.addEvent('exit');
      this.span.end();
    }
    this.resolveDone();
  }

  /** The call ended, errored or lost its control session before we reported the exit. */
  private breakPath(reason: string, err?: unknown): void {
    if (this.state !== 'running') return;
    this.state = 'broken';
    this.cleanup();
    const fields: Record<string, unknown> = { reason };
    if (err) fields.err = err;
    if (this.span && this.opts.spans) {
      // Killed before it reported an exit because nobody is left to see it (the client's path
      // broke, or the supervisor is shutting down).
      this.span.setAttributes({ [this.opts.spans.TraceAttr.killReason]: 'disconnect', 'sandgate.exec.break': reason });
      this.span.end();
    }
    this.log.warn('exec path broken: killing its process tree', fields);
    try {
      this.call?.cancel();
    } catch {
      // already finished
    }
    if (!this.proc) {
      this.resolveDone();
      return;
    }
    void this.tree.kill().then(() => {
      // Nobody reads the output any more; release pipes possibly still held by escapees.
      this.proc?.abandonOutput();
      this.resolveDone();
    });
  }

  private cleanup(): void {
    clearTimeout(this.timeoutTimer);
    this.opts.conn.signal.removeEventListener('abort', this.onConnAbort);
  }
}
