// The sandbox's main process: started once at boot with the exact argv (no shell), on a PTY or on
// pipes. Its output is copied to the supervisor's own stdout/stderr (the driver redirects those to
// the sandbox log) and kept in a bounded ring buffer for later replay. Its exit is recorded but
// does not end the supervisor: execs must keep working afterwards.
import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { normaliseExit } from '@sandgate/core/exit-codes';
import type { Logger } from '@sandgate/telemetry/log';
import { launchCommand, startTerminal } from './exec-process.ts';
import { preflight } from './preflight.ts';
import { RingBuffer } from './ring-buffer.ts';
import { OutputJournal } from './output-journal.ts';
import { signalNumber } from './signals.ts';
import { OOM_MESSAGE, oomKilled, type WorkloadLauncher } from './workload/launcher.ts';
import type { PipedChild } from './workload/native-spawn.ts';
import type { Terminal } from './workload/native-pty.ts';

export interface MainProcessOptions {
  argv: string[];
  env: Record<string, string>;
  tty: boolean;
  cwd?: string;
  log: Logger;
  output?: RingBuffer;
  /** Where the output is mirrored; defaults to the supervisor's stdout/stderr. */
  stdout?: (chunk: Buffer) => void;
  stderr?: (chunk: Buffer) => void;
  /** Confines the process (see workload/launcher.ts); absent: started as is. */
  launcher?: WorkloadLauncher;
}

export interface MainExit {
  exitCode: number;
  signal: number;
  /** SIGKILLed by the OOM killer (the workload cgroup counted it). */
  oomKilled?: boolean;
}

export const MAIN_PTY_COLS = 80;
export const MAIN_PTY_ROWS = 24;

export class MainProcess {
  readonly output: RingBuffer;
  /** Sequenced stdout/stderr for attached clients (see main-attach.ts). */
  readonly journal = new OutputJournal();
  /** 0 when the process could not be started. */
  pid = 0;
  exit: MainExit | undefined;
  readonly exited: Promise<MainExit>;
  private resolveExited!: (e: MainExit) => void;
  private readonly opts: MainProcessOptions;
  private child: PipedChild | undefined;
  private term: Terminal | undefined;
  private oomBefore: number | undefined;

  constructor(opts: MainProcessOptions) {
    this.opts = opts;
    this.output = opts.output ?? new RingBuffer();
    this.exited = new Promise((resolve) => (this.resolveExited = resolve));
  }

  start(): void {
    const { argv, env, tty, log } = this.opts;
    const cwd = this.opts.cwd ?? process.cwd();
    const toStdout = this.opts.stdout ?? ((c: Buffer) => writeQuietly(process.stdout, c));
    const toStderr = this.opts.stderr ?? ((c: Buffer) => writeQuietly(process.stderr, c));

    const check = preflight(argv[0], cwd, env, this.opts.launcher?.identity);
    if (!check.ok) {
      const line = Buffer.from(check.message + '\n');
      this.output.write(line);
      this.journal.append('stderr', line);
      toStderr(line);
      this.finish({ exitCode: check.exitCode, signal: 0 });
      return;
    }

    const launcher = this.opts.launcher;
    this.oomBefore = launcher?.oomKills();
    if (tty) {
      this.term = startTerminal({ argv, env: { ...env, TERM: 'xterm-256color' }, cwd, cols: MAIN_PTY_COLS, rows: MAIN_PTY_ROWS, launcher });
      this.pid = this.term.pid;
      this.term.onData((chunk) => {
        this.output.write(chunk);
        this.journal.append('stdout', chunk);
        toStdout(chunk);
      });
      this.term.onExit(({ exitCode, signal }) => {
        const oomKilled = this.noteOom(signal || null, toStderr);
        this.finish({ exitCode: normaliseExit(exitCode, signal || null), signal, oomKilled });
      });
    } else {
      const child = spawnOnPipes(argv, env, cwd, launcher);
      this.child = child;
      this.pid = child.pid ?? 0;
      child.stdout!.on('data', (chunk: Buffer) => {
        this.output.write(chunk);
        this.journal.append('stdout', chunk);
        toStdout(chunk);
      });
      child.stderr!.on('data', (chunk: Buffer) => {
        this.output.write(chunk);
        this.journal.append('stderr', chunk);
        toStderr(chunk);
      });
      child.on('error', (err) => {
        log.error('main process error', { err });
        if (this.pid === 0) this.finish({ exitCode: 127, signal: 0 });
      });
      // 'close' (not 'exit'): all output has been copied by then.
      child.on('close', (code, sig) => {
        const signal = signalNumber(sig) ?? 0;
        const oomKilled = this.noteOom(signal || null, toStderr);
        this.finish({ exitCode: normaliseExit(code, signal || null), signal, oomKilled });
      });
    }
    log.info('main process started', { pid: this.pid, argv, tty });
  }

  /** A SIGKILL by the OOM killer is said so in the main process's output and the log. */
  private noteOom(signal: number | null, toStderr: (c: Buffer) => void): boolean {
    if (!oomKilled(this.opts.launcher, this.oomBefore, signal)) return false;
    this.opts.log.warn('main process killed by the out-of-memory killer', { pid: this.pid });
    const line = Buffer.from(OOM_MESSAGE);
    this.output.write(line);
    this.journal.append('stderr', line);
    toStderr(line);
    return true;
  }

  private finish(exit: MainExit): void {
    if (this.exit) return;
    this.exit = exit;
    this.opts.log.info('main process exited', { pid: this.pid, exit_code: exit.exitCode, signal: exit.signal });
    this.resolveExited(exit);
  }

  /** Set before start(): a claimed warm-pool member's command (start_main), replacing the launch's. */
  setCommand(argv: string[], tty: boolean): void {
    this.opts.argv = argv;
    this.opts.tty = tty;
  }

  /** Set before start(): the main process is confined like every workload process. */
  confine(launcher: WorkloadLauncher): void {
    this.opts.launcher = launcher;
  }

  /** Input from the attached client holding the stdin lease (PTY main processes only). */
  writeInput(data: Buffer): void {
    this.term?.write(data);
  }

  resize(cols: number, rows: number): void {
    if (this.term && cols > 0 && rows > 0 && cols <= 65535 && rows <= 65535) this.term.resize(cols, rows);
  }

  /** Shutdown: SIGTERM the process group, SIGKILL it after the grace period. */
  async stop(graceMs = 2000): Promise<void> {
    if (this.exit || this.pid <= 1) return;
    const signalGroup = (sig: NodeJS.Signals) => {
      try {
        process.kill(-this.pid, sig);
      } catch {
        try {
          process.kill(this.pid, sig);
        } catch {
          // already gone
        }
      }
    };
    signalGroup('SIGTERM');
    if (this.term) signalGroup('SIGHUP');
    const done = await Promise.race([this.exited.then(() => true), sleep(graceMs).then(() => false)]);
    if (!done) signalGroup('SIGKILL');
  }
}

/**
 * The main process on pipes, in its own process group (shutdown signals the whole tree). A
 * confined sandbox starts it in a spare wrapper, as an exec (posix_spawn: no fork of the
 * supervisor, whose event loop a fork holds for milliseconds while the control session is being
 * set up); its stdin then ends at once, as /dev/null would. Otherwise through Node's spawn.
 */
function spawnOnPipes(argv: string[], env: Record<string, string>, cwd: string, launcher: WorkloadLauncher | undefined): PipedChild {
  const spared = launcher?.startInSpare?.(argv, env, cwd);
  if (spared) {
    // Sockets, not pipes: a reset there (the process gone with unread input) must not be an
    // unhandled 'error'. Whatever output arrived has been read by then.
    for (const s of spared.stdio) s?.on('error', () => undefined);
    spared.stdin?.end();
    return spared;
  }
  const cmd = launchCommand({ argv, env, launcher });
  return spawn(cmd.file, cmd.args, { cwd, env: cmd.env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
}

function writeQuietly(stream: NodeJS.WriteStream, chunk: Buffer): void {
  try {
    stream.write(chunk);
  } catch {
    // Our stdout/stderr went away: the output is still in the ring buffer.
  }
}
