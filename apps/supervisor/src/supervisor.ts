// Wires the pieces together: the main process, the control session, and the execs it opens.
import { randomUUID } from 'node:crypto';
import type { ExecStart, StartMain, TcpOpen } from '@sandgate/protocols';
import { readCredential, stripSupervisorEnv, type SupervisorConfig } from './config.ts';
import { ControlSession, type GatewayConnection, type PolicyUpdate } from './control-session.ts';
import { ExecRunner } from './exec-runner.ts';
import { findTaggedProcesses, killExecTree } from './kill-tree.ts';
import { MainAttach } from './main-attach.ts';
import { SshServer } from './ssh/ssh-server.ts';
import { openTcpChannel } from './ssh/tcp-channel.ts';
import { openFileChannel } from './file-transfer.ts';
import type { MainExit } from './main-process.ts';
import type { RelayedTracing } from '@sandgate/telemetry/otel';
import type { SpanHelpers } from './exec-runner.ts';

/** How long the exit waits for attached clients to receive it before cleanup may start anyway. */
const TERMINAL_DRAIN_TIMEOUT_MS = 30_000;
import type { Logger } from '@sandgate/telemetry/log';
import { MainProcess } from './main-process.ts';
import { SUPERVISOR_VERSION } from './version.ts';
import { closeInheritedFds } from './workload/fds.ts';
import { startWorkload, type Workload } from './workload/workload.ts';

export interface SupervisorHooks {
  /** Something the supervisor cannot serve without broke (the workload's network namespace). */
  onFatal?(reason: string): void;
}

export class Supervisor {
  /** Unique per supervisor run: fences late reports from an older run of the same sandbox. */
  readonly instanceId = randomUUID();
  readonly main: MainProcess;
  private readonly config: SupervisorConfig;
  private readonly log: Logger;
  private readonly control: ControlSession;
  private readonly execs = new Map<string, ExecRunner>();
  private readonly attaches = new Set<MainAttach>();
  private readonly stdinLease: { holder: MainAttach | null } = { holder: null };
  /** SSH connections, relayed by the gateway as TCP channels (no listening port). */
  readonly ssh: SshServer;
  private releaseExit!: (exit: MainExit) => void;
  /** The main process's exit, released to attached clients once the gateway recorded it. */
  private readonly exitReleased = new Promise<MainExit>((resolve) => (this.releaseExit = resolve));
  private credential: string;
  private shuttingDown: Promise<void> | undefined;
  private readonly hooks: SupervisorHooks;
  private tracingStart: Promise<void> | undefined;
  private relayedTracing: RelayedTracing | undefined;
  /** Span helpers, once tracing is on (absent: no span is made at all). */
  private spans: SpanHelpers | undefined;
  /** The workload's confinement, once started (absent: the driver asked for none). */
  private workload: Workload | undefined;
  /** The main process has been started (at start(), or on start_main for a warm-pool member). */
  private mainStarted = false;

  constructor(config: SupervisorConfig, log: Logger, hooks: SupervisorHooks = {}) {
    this.config = config;
    this.log = log;
    this.hooks = hooks;
    this.credential = config.credential;
    this.main = new MainProcess({ argv: config.mainArgv, env: config.sandboxEnv, tty: config.mainTty, log });
    this.control = new ControlSession({
      endpoints: config.endpoints,
      sandboxId: config.sandboxId,
      instanceId: this.instanceId,
      supervisorVersion: SUPERVISOR_VERSION,
      mainPid: () => this.main.pid,
      awaitingMain: () => !this.mainStarted,
      credential: () => this.readCredential(),
      tls: config.gatewayTls,
      log,
      onOpenExec: (start, conn) => this.openExec(start, conn),
      onKillExec: (execId) => this.killExec(execId),
      onOpenTcp: (open, conn) => this.openTcp(open, conn),
      onPolicyUpdate: (update) => this.applyPolicy(update),
      onStartMain: (start) => this.startClaimedMain(start),
      onTracing: () => this.startTracing(),
      noReconnect: config.debugBreaks.has('supervisor-reconnect'),
    });
    this.ssh = new SshServer({
      sandboxEnv: config.sandboxEnv,
      main: { main: this.main, exitReleased: this.exitReleased, stdinLease: this.stdinLease, log },
      log,
    });
  }

  /**
   * The gateway exports traces: load the SDK (only now: a supervisor whose gateway does not
   * trace never loads it) and relay finished spans through the control session.
   */
  private startTracing(): void {
    this.tracingStart ??= (async () => {
      const [{ startRelayedTracing }, spans] = await Promise.all([import('@sandgate/telemetry/otel'), import('@sandgate/telemetry/tracing')]);
      this.relayedTracing = await startRelayedTracing({
        attributes: { 'sandgate.sandbox.id': this.config.sandboxId, 'service.instance.id': this.instanceId },
        send: (bytes) => this.control.sendSpans(bytes),
      });
      this.spans = spans;
      this.log.info('tracing on: spans are relayed through the control session');
    })().catch((err: unknown) => this.log.warn('tracing could not be started', { err }));
  }

  private openTcp(open: TcpOpen, conn: GatewayConnection): void {
    if (this.shuttingDown) {
      this.control.reportTcpOpenFailed(conn, open.channel_id ?? '', 'supervisor is shutting down');
      return;
    }
    // A file transfer rides a TCP channel but dials nothing: the file worker streams it, as the workload.
    if (open.file) {
      openFileChannel(open, conn, { launcher: this.workload?.launcher, workdir: process.cwd(), log: this.log });
      return;
    }
    openTcpChannel(open, conn, {
      acceptSsh: (socket, channelId) => this.ssh.accept(socket, channelId),
      reportFailed: (channelId, message) => this.control.reportTcpOpenFailed(conn, channelId, message),
      log: this.log,
      dial: this.workload?.dial,
    });
  }

  private applyPolicy(update: PolicyUpdate): string {
    if (!this.workload) return 'this sandbox has no workload confinement: its egress policy cannot be enforced';
    this.workload.applyPolicy(update.policy ?? Buffer.alloc(0));
    return '';
  }

  /**
   * Confines the workload first (when the driver asked for it), then starts the main process and
   * the control session: no workload process may ever run unconfined. Rejects when confinement
   * cannot be set up; the caller must not serve the sandbox then.
   */
  async start(): Promise<void> {
    this.log.info('supervisor starting', {
      instance_id: this.instanceId,
      version: SUPERVISOR_VERSION,
      endpoints: this.config.endpoints,
      pid: process.pid,
      // When this process began (epoch ms): a start's time before this line is Node's start and
      // the loading of the supervisor's code (create-latency reads both).
      process_started_at_ms: Math.round(performance.timeOrigin),
    });
    if (this.config.workload) {
      const closed = closeInheritedFds();
      if (closed.length > 0) this.log.info('closed inherited descriptors so no workload process gets them', { fds: closed });
      this.workload = await startWorkload({
        isolation: this.config.workload,
        policy: this.config.policy,
        log: this.log,
        onFatal: (reason) => this.hooks.onFatal?.(reason),
        compileCacheDir: this.config.compileCacheDir,
      });
      this.main.confine(this.workload.launcher);
      this.ssh.confine(this.workload.launcher, this.workload.dial);
    }
    // A warm-pool member serves execs at once but runs no main process until it is claimed.
    if (!this.config.deferMain) this.startMain();
    this.control.start();
  }

  /** A warm-pool member not claimed yet: it runs no main process until start_main. */
  get awaitingClaim(): boolean {
    return this.config.deferMain && !this.mainStarted;
  }

  private startMain(): void {
    this.mainStarted = true;
    this.main.start();
    void this.finishMainProcess();
  }

  /**
   * start_main: this warm-pool member was claimed. Its variables are laid over the sandbox's
   * environment in place (the object execs and SSH shells read), then the main process starts
   * with the claim's command (the launch's own when empty). Idempotent: a repeat (the gateway's
   * retry, a reconnect) changes nothing.
   */
  private startClaimedMain(start: StartMain): void {
    if (this.mainStarted || this.shuttingDown) return;
    // SANDGATE_* names are the supervisor's, never the sandbox's (as in the driver's environment file).
    Object.assign(this.config.sandboxEnv, stripSupervisorEnv(start.env ?? {}));
    const argv = start.argv?.length ? start.argv : this.config.mainArgv;
    this.main.setCommand(argv, start.tty ?? this.config.mainTty);
    this.log.info('warm-pool member claimed: starting the main process', { argv });
    this.startMain();
  }

  /**
   * Terminal delivery, in order: the exit is reported until the gateway has it durably; only then
   * do attached clients get it; once they have (or after a bounded wait) the terminal is final,
   * which is what lets the gateway clean up an ephemeral sandbox. The supervisor stays connected
   * throughout, so execs keep working after the main process is gone.
   */
  private async finishMainProcess(): Promise<void> {
    const exit = await this.main.exited;
    await this.control.report('main_exit', {
      main_exit: { instance_id: this.instanceId, exit_code: exit.exitCode, signal: exit.signal, oom_killed: exit.oomKilled ?? false },
    });
    this.log.info('main process exit recorded by the gateway', { exit_code: exit.exitCode });
    this.releaseExit(exit);
    const drain = Promise.all([...[...this.attaches].map((a) => a.delivered), ...[...this.ssh.mainChannels].map((m) => m.delivered)]);
    await Promise.race([drain, new Promise((r) => setTimeout(r, TERMINAL_DRAIN_TIMEOUT_MS))]);
    await this.control.report('terminal_final', { terminal_final: { instance_id: this.instanceId } });
    this.log.info('terminal delivery final');
  }

  get runningExecs(): number {
    return this.execs.size;
  }

  /** The credential file may be rotated; keep the last good value if it is briefly unreadable. */
  private readCredential(): string {
    try {
      this.credential = readCredential(this.config.credentialFile);
    } catch (err) {
      this.log.warn('cannot re-read credential file, using the previous credential', { err });
    }
    return this.credential;
  }

  private openExec(start: ExecStart, conn: GatewayConnection): void {
    const execId = start.exec_id ?? '';
    if (this.shuttingDown) {
      this.control.reportExecOpenFailed(conn, execId, 'supervisor is shutting down');
      return;
    }
    if (!execId) {
      this.log.warn('open_exec without exec_id ignored');
      return;
    }
    if (this.execs.has(execId)) {
      this.control.reportExecOpenFailed(conn, execId, 'exec id already running');
      return;
    }
    if (start.attach_main) {
      const attach = new MainAttach({
        start,
        conn,
        main: this.main,
        exitReleased: this.exitReleased,
        stdinLease: this.stdinLease,
        log: this.log,
      });
      this.attaches.add(attach);
      void attach.delivered.then(() => this.attaches.delete(attach));
      attach.run();
      return;
    }
    if (!Array.isArray(start.argv) || start.argv.length === 0) {
      this.control.reportExecOpenFailed(conn, execId, 'empty argv');
      return;
    }
    const runner = new ExecRunner({
      start,
      conn,
      sandboxEnv: this.config.sandboxEnv,
      log: this.log,
      debugBreaks: this.config.debugBreaks,
      launcher: this.workload?.launcher,
      spans: this.spans,
    });
    this.execs.set(execId, runner);
    void runner.done.then(() => {
      if (this.execs.get(execId) === runner) this.execs.delete(execId);
    });
    runner.run();
  }

  /**
   * The deadline backstop: anything still carrying the exec's tag after its deadline should not
   * exist. Counts what it finds (zero when the local timeout did its job) and kills it.
   */
  private async killExec(execId: string): Promise<number> {
    const runner = this.execs.get(execId);
    const found = findTaggedProcesses(execId).size;
    if (runner) await runner.expire();
    else if (found > 0) await killExecTree(execId, undefined, { log: this.log });
    if (found > 0) this.log.warn('deadline backstop killed exec processes', { exec_id: execId, found, runner: Boolean(runner) });
    return found;
  }

  /** Kills every exec's tree and the main process group. Idempotent. */
  shutdown(reason: string): Promise<void> {
    this.shuttingDown ??= (async () => {
      this.log.info('supervisor shutting down', { reason, execs: this.execs.size });
      this.control.stop(); // aborts the connection, which also breaks every exec's path
      await Promise.all([...this.execs.values()].map((r) => r.abort(reason)));
      await this.ssh.shutdown(reason);
      for (const a of this.attaches) a.abort();
      await this.main.stop();
      this.workload?.stop();
      await this.relayedTracing?.shutdown();
    })();
    return this.shuttingDown;
  }
}
