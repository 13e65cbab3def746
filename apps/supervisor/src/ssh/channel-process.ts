// One process started for one SSH channel (shell, exec or the sftp subsystem), on a PTY or on
// pipes, tagged SANDGATE_EXEC_ID=<id> and leading its own process group, exactly like an exec.
// Its lifetime is the channel's: the process exiting ends the channel (data, EOF, exit-status,
// close), and the channel going away — closed by the client, or its whole connection dropped —
// kills the process's tree with the exec kill procedure. Channel EOF only closes stdin.
import { normaliseExit } from '@sandgate/core/exit-codes';
import type { ServerChannel } from 'ssh2';
import { EXEC_ID_ENV } from '../config.ts';
import { ProcessTree, spawnPiped, spawnPty, termSize, type ExecProcess, type ExecProcessHandlers } from '../exec-process.ts';
import type { Logger } from '@sandgate/telemetry/log';
import { exitCodeForSpawnError, preflight, reasonOf } from '../preflight.ts';
import { OOM_MESSAGE, oomKilled, type WorkloadLauncher } from '../workload/launcher.ts';

export interface PtyRequest {
  cols: number;
  rows: number;
  term: string;
}

export interface ChannelProcessOptions {
  channel: ServerChannel;
  execId: string;
  argv: string[];
  cwd: string;
  /** The complete environment (the exec tag is added here). */
  env: Record<string, string>;
  pty: PtyRequest | undefined;
  log: Logger;
  /** Confines the process (see workload/launcher.ts); absent: started as is. */
  launcher?: WorkloadLauncher;
}

type State = 'starting' | 'running' | 'exited' | 'killed';

/** Signals a client may send on a channel (RFC 4254 names, without "SIG"). */
const CLIENT_SIGNALS = new Set(['HUP', 'INT', 'KILL', 'QUIT', 'TERM', 'USR1', 'USR2', 'ALRM', 'PIPE']);

/** Resolves once everything written to `w` before now was handed on (0-byte write callbacks run in order). */
function flushed(w: NodeJS.WritableStream & { writable: boolean }): Promise<void> {
  return new Promise((resolve) => {
    if (!w.writable) return resolve();
    try {
      w.write(Buffer.alloc(0), () => resolve());
    } catch {
      resolve();
    }
  });
}

export class ChannelProcess {
  readonly execId: string;
  /** Resolves when the channel's process is gone and its tree was cleaned up. */
  readonly done: Promise<void>;
  private resolveDone!: () => void;
  private readonly opts: ChannelProcessOptions;
  private readonly log: Logger;
  private state: State = 'starting';
  private readonly tree: ProcessTree;
  private oomBefore: number | undefined;

  constructor(opts: ChannelProcessOptions) {
    this.opts = opts;
    this.execId = opts.execId;
    this.log = opts.log.child({ exec_id: opts.execId });
    this.tree = new ProcessTree(this.execId, this.log);
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
  }

  private get proc(): ExecProcess | undefined {
    return this.tree.proc;
  }

  get running(): boolean {
    return this.state === 'starting' || this.state === 'running';
  }

  /** Starts the process. Never throws: failures become stderr text and an exit status. */
  start(): void {
    const { channel, argv, cwd, pty } = this.opts;
    const env = { ...this.opts.env, [EXEC_ID_ENV]: this.execId };
    const check = preflight(argv[0], cwd, env, this.opts.launcher?.identity);
    if (!check.ok) return this.failStart(check.message, check.exitCode);

    const handlers: ExecProcessHandlers = {
      stdout: (chunk) => this.output(channel, chunk),
      stderr: (chunk) => this.output(channel.stderr, chunk),
      exit: (code, signal) => this.onExit(code, signal),
      childExited: () => this.onChildExited(),
      spawnError: (err) => this.failStart(`${argv[0]}: ${reasonOf(err)}`, exitCodeForSpawnError(err)),
      stdinDrain: () => channel.resume(),
    };
    const spec = { argv, cwd, env, cols: termSize(pty?.cols), rows: termSize(pty?.rows), launcher: this.opts.launcher };
    this.oomBefore = this.opts.launcher?.oomKills();
    let proc: ExecProcess;
    try {
      proc = this.tree.proc = pty ? spawnPty(spec, handlers) : spawnPiped(spec, handlers);
    } catch (err) {
      return this.failStart(`${argv[0]}: ${reasonOf(err)}`, exitCodeForSpawnError(err));
    }
    if (this.state !== 'starting') return; // a synchronous spawn error already ended it
    this.state = 'running';
    this.log.info('ssh channel process started', { pid: proc.pid, argv0: argv[0], tty: Boolean(pty) });

    channel.on('data', (data: Buffer) => {
      if (this.state !== 'running' || !this.proc) return;
      // Stdin back-pressure: stop reading the channel (SSH flow control then stops the client).
      if (!this.proc.writeStdin(data)) channel.pause();
    });
    // EOF from the client closes stdin (`tar xf -` needs it); it never kills.
    channel.on('end', () => this.proc?.endStdin());
    channel.on('close', () => void this.close('channel closed by the client'));
  }

  /** Output with back-pressure: a full channel pauses the process's output. */
  private output(stream: NodeJS.WritableStream, chunk: Buffer): void {
    if (this.state !== 'running' && this.state !== 'starting') return;
    let ok = true;
    try {
      ok = stream.write(chunk);
    } catch {
      return;
    }
    this.tree.afterOutputWrite(ok, stream, () => this.state === 'running');
  }

  signal(name: string): void {
    if (this.state !== 'running' || !this.proc || !CLIENT_SIGNALS.has(name)) return;
    try {
      process.kill(-this.proc.pgid, `SIG${name}` as NodeJS.Signals);
    } catch {
      // the group is gone; the exit is on its way
    }
  }

  resize(cols: number, rows: number): void {
    if (this.state === 'running') this.proc?.resize(cols, rows);
  }

  /** Before the spawn, or when the spawn itself failed (then no exit event follows). */
  private failStart(message: string, exitCode: number): void {
    if (this.state !== 'starting' && this.state !== 'running') return;
    this.state = 'exited';
    this.log.info('ssh channel process could not be started', { message, exit_code: exitCode });
    try {
      this.opts.channel.stderr.write(message + '\n');
    } catch {
      // channel gone
    }
    void this.finishChannel(exitCode).then(() => this.resolveDone());
  }

  /** The leader exited: what it left behind dies with it, so the output pipes close. */
  private onChildExited(): void {
    if (this.state !== 'running') return;
    this.tree.leaderExited(() => this.state === 'running');
  }

  private onExit(code: number | null, signal: number | null): void {
    if (this.state !== 'running') return;
    this.state = 'exited';
    const exitCode = normaliseExit(code, signal);
    if (oomKilled(this.opts.launcher, this.oomBefore, signal)) {
      this.log.warn('ssh channel process killed by the out-of-memory killer', { exit_code: exitCode });
      try {
        this.opts.channel.stderr.write(OOM_MESSAGE);
      } catch {
        // channel gone
      }
    }
    void this.tree.kill()
      .then(() => this.finishChannel(exitCode))
      .then(() => {
        this.log.info('ssh channel process exited', { exit_code: exitCode });
        this.resolveDone();
      });
  }

  /** Everything written so far, then exit-status, EOF and close — the order OpenSSH expects. */
  private async finishChannel(exitCode: number): Promise<void> {
    const channel = this.opts.channel;
    await Promise.all([flushed(channel), flushed(channel.stderr as NodeJS.WritableStream & { writable: boolean })]);
    try {
      channel.exit(exitCode);
      channel.end();
    } catch {
      // the client is gone already
    }
  }

  /**
   * The channel is gone (closed by the client, or its connection dropped): kill the whole tree.
   * Idempotent; the main process is never anyone's channel process, so it is never touched.
   */
  close(reason: string): Promise<void> {
    if (this.state === 'starting') {
      this.state = 'killed';
      this.resolveDone();
      return this.done;
    }
    if (this.state !== 'running') return this.done;
    this.state = 'killed';
    this.log.info('ssh channel gone: killing its process tree', { reason });
    void this.tree.kill().then(() => {
      this.proc?.abandonOutput();
      this.resolveDone();
    });
    return this.done;
  }
}
