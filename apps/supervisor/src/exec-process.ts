// One exec's process, on pipes or on a PTY, behind a common interface so the exec runner does not
// care which. The runner gets raw output chunks, and an exit notification only once the output
// has been fully read (so no output can arrive after the exit frame).
import { spawn, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import type * as pty from 'node-pty';
import { killExecTree, readProcStat, type KillTreeOptions } from './kill-tree.ts';
import type { Logger } from '@sandgate/telemetry/log';
import { signalNumber } from './signals.ts';
import type { WorkloadLauncher } from './workload/launcher.ts';
import type { PipedChild } from './workload/native-spawn.ts';
import { fromNodePty, type Terminal } from './workload/native-pty.ts';

// node-pty is required at the first PTY, not at start: most execs run on pipes, and an idle
// supervisor need not hold it (start-up and memory in every sandbox).
const requireModule = createRequire(import.meta.url);
let ptyModule: typeof pty | null = null;
export function nodePty(): typeof pty {
  ptyModule ??= requireModule('node-pty') as typeof pty;
  return ptyModule;
}

export interface ExecProcessHandlers {
  stdout(chunk: Buffer): void;
  stderr(chunk: Buffer): void;
  /** The process exited and its output streams have ended. `signal` is a number or null. */
  exit(code: number | null, signal: number | null): void;
  /** The process itself exited; its output may still be held open by processes it left behind. */
  childExited?(): void;
  /** The process could not be started (a race with the preflight check). */
  spawnError(err: NodeJS.ErrnoException): void;
  /** Stdin can take more data after writeStdin returned false. */
  stdinDrain(): void;
}

export interface ExecProcess {
  readonly pid: number;
  /** The process group to signal; the pid, since every exec leads its own session and group. */
  readonly pgid: number;
  /**
   * The leader's start time as read right after the fork (undefined if unreadable): tells the
   * exec's group and session apart from a later process that recycled the pid.
   */
  readonly startTime: string | undefined;
  readonly tty: boolean;
  /** false: stop feeding stdin until stdinDrain. */
  writeStdin(data: Buffer): boolean;
  endStdin(): void;
  resize(cols: number, rows: number): void;
  /** Output back-pressure: stop reading the process's output (it blocks once the kernel buffer fills). */
  pause(): void;
  resume(): void;
  /**
   * Reading the output is paused right now. Not always since pause(): Node's child_process resumes a
   * piped child's output by itself once the child exited (to reach the end of the pipes).
   */
  readingPaused(): boolean;
  /** Give up on output still held open by escaped processes: destroy the streams. */
  abandonOutput(): void;
}

export interface SpawnSpec {
  argv: string[];
  cwd: string;
  env: Record<string, string>;
  cols: number;
  rows: number;
  /** Confines the process (uid, network namespace, cgroups); absent: started as is. */
  launcher?: WorkloadLauncher;
}

/** What to actually execute for a spec: the argv itself, or the confining wrapper around it. */
export function launchCommand(spec: Pick<SpawnSpec, 'argv' | 'env' | 'launcher'>): { file: string; args: string[]; env: Record<string, string> } {
  if (spec.launcher) return spec.launcher.command(spec.argv, spec.env);
  return { file: spec.argv[0]!, args: spec.argv.slice(1), env: spec.env };
}

export const DEFAULT_COLS = 80;
export const DEFAULT_ROWS = 24;

/** A requested terminal size: 0 (unset) or nonsense becomes 0, which the PTY layer turns into 80x24. */
export function termSize(n: number | undefined): number {
  return Number.isInteger(n) && n! > 0 && n! <= 65535 ? n! : 0;
}

/** After the leader exited and its leftovers were killed, how long output pipes may stay held. */
const LEFTOVER_OUTPUT_GRACE_MS = 200;

/**
 * What an exec — or an SSH channel's process — shares once spawned: output back-pressure, the
 * kill of its whole tagged tree (once, however many ask), and what follows the leader's exit.
 */
export class ProcessTree {
  private readonly execId: string;
  private readonly log: Logger;
  private readonly killOptions: Omit<KillTreeOptions, 'pty' | 'log' | 'leaderStartTime'>;
  private killing: Promise<boolean> | undefined;
  private outputPaused = false;
  /** Set once the leader exited and its tree was killed: (re)starts the wait for leftover output. */
  private armLeftoverGrace: (() => void) | undefined;
  private leftoverTimer: NodeJS.Timeout | undefined;
  proc: ExecProcess | undefined;

  /** DEBUG ONLY (the `exec-kill` fault, negative chaos runs): kill() kills nothing. */
  private readonly neverKill: boolean;

  constructor(
    execId: string,
    log: Logger,
    killOptions: Omit<KillTreeOptions, 'pty' | 'log' | 'leaderStartTime'> = {},
    debug: { neverKill: boolean } = { neverKill: false },
  ) {
    this.execId = execId;
    this.log = log;
    this.killOptions = killOptions;
    this.neverKill = debug.neverKill;
  }

  /**
   * Output back-pressure: `written` is what the output stream's write returned. A full stream
   * pauses the process's output until it drains (then it resumes if `stillRunning()`).
   */
  afterOutputWrite(written: boolean, stream: { once(event: 'drain', f: () => void): unknown }, stillRunning: () => boolean): void {
    const proc = this.proc;
    if (written || this.outputPaused || !proc) return;
    this.outputPaused = true;
    proc.pause();
    stream.once('drain', () => {
      this.outputPaused = false;
      if (!stillRunning()) return;
      proc.resume();
      this.armLeftoverGrace?.();
    });
  }

  /** Kills every process carrying the exec's tag (and its group); the same promise for every caller. */
  kill(): Promise<boolean> {
    if (this.neverKill) return Promise.resolve(false);
    this.killing ??= killExecTree(this.execId, this.proc?.pgid, {
      ...this.killOptions,
      pty: this.proc?.tty ?? false,
      leaderStartTime: this.proc?.startTime,
      log: this.log,
    }).catch((err: unknown) => {
      this.log.error('killing the process tree failed', { err });
      return false;
    });
    return this.killing;
  }

  /**
   * The leader exited: what it started ends with it (background jobs, nohup'd or setsid'd
   * children still carrying the tag). Once they are gone the output pipes close; if something
   * untagged still holds them, stop waiting shortly after — while `stillRunning()`. Not while
   * reading the output is paused by back-pressure, though: what the pipes still hold then is the
   * command's output the client has not taken yet, and giving up would drop it and report the exit
   * as if the output were complete. The wait starts again when the output drains. (The reading
   * itself, not our pause flag: Node resumes the pipes at the exit, and an escapee writing into
   * them while the flag waits for a drain must not keep the exec, and fill memory, forever.)
   */
  leaderExited(stillRunning: () => boolean): void {
    void this.kill().then(() => {
      this.armLeftoverGrace = () => {
        clearTimeout(this.leftoverTimer);
        this.leftoverTimer = setTimeout(() => {
          // Decided after one more poll of the pipes (setImmediate runs after the event loop's
          // I/O phase): a supervisor that got no CPU for longer than the grace (a starved host)
          // wakes up with the timer due and the command's output and EOF still unread, and
          // timers run before I/O. Deciding in the timer dropped that output: a chaos run saw
          // `echo` exit 0 with no output, its log saying stdout_bytes 0 right after this warning.
          setImmediate(() => {
            if (!stillRunning() || this.proc?.readingPaused()) return;
            // Said in the log: an exec whose output stops short is told apart from one that wrote nothing.
            this.log.warn('output pipes still open after the exit and its tree were gone: no longer read', { graceMs: LEFTOVER_OUTPUT_GRACE_MS });
            this.proc?.abandonOutput();
          });
        }, LEFTOVER_OUTPUT_GRACE_MS);
      };
      this.armLeftoverGrace();
    });
  }
}

export function spawnPiped(spec: SpawnSpec, h: ExecProcessHandlers): ExecProcess {
  // A wrapper waiting for this command (spare.ts) if there is one: no fork of this process now.
  const child: PipedChild = spec.launcher?.startInSpare?.(spec.argv, spec.env, spec.cwd) ?? spawnWrapped(spec);
  const stdin = child.stdin!;
  const stdout = child.stdout!;
  const stderr = child.stderr!;
  let failed = false;

  stdout.on('data', (c: Buffer) => h.stdout(c));
  stderr.on('data', (c: Buffer) => h.stderr(c));
  // The process may exit or close stdin before reading everything we send: EPIPE is expected.
  stdin.on('error', () => {});
  stdout.on('error', () => {});
  stderr.on('error', () => {});
  stdin.on('drain', () => h.stdinDrain());
  child.on('error', (err: NodeJS.ErrnoException) => {
    if (child.pid === undefined && !failed) {
      failed = true;
      h.spawnError(err);
    }
    // Errors of a running child (a failed kill) change nothing for the exec.
  });
  child.on('exit', () => {
    if (!failed) h.childExited?.();
  });
  // 'close' comes after 'exit' and after stdout and stderr have ended, so no output is lost.
  child.on('close', (code, sig) => {
    if (failed) return;
    h.exit(code, signalNumber(sig));
  });

  const pid = child.pid ?? 0;
  return {
    pid,
    pgid: pid,
    startTime: pid > 0 ? readProcStat(pid)?.startTime : undefined,
    tty: false,
    writeStdin: (data) => {
      if (stdin.destroyed || stdin.writableEnded) return true;
      return stdin.write(data);
    },
    endStdin: () => {
      if (!stdin.destroyed && !stdin.writableEnded) stdin.end();
    },
    resize: () => {},
    pause: () => {
      stdout.pause();
      stderr.pause();
    },
    resume: () => {
      stdout.resume();
      stderr.resume();
    },
    readingPaused: () => stdout.isPaused() || stderr.isPaused(),
    abandonOutput: () => {
      stdout.destroy();
      stderr.destroy();
    },
  };
}

function spawnWrapped(spec: SpawnSpec): ChildProcess {
  const cmd = launchCommand(spec);
  return spawn(cmd.file, cmd.args, {
    cwd: spec.cwd,
    env: cmd.env,
    detached: true, // own process group: signals and kills address the whole tree
    stdio: 'pipe',
  });
}

export function spawnPty(spec: SpawnSpec, h: ExecProcessHandlers): ExecProcess {
  const term = startTerminal({ ...spec, cols: spec.cols || DEFAULT_COLS, rows: spec.rows || DEFAULT_ROWS });
  term.onData((data) => h.stdout(data));
  // The leader's own exit, where the terminal tells it (native-pty.ts): what it left behind is
  // killed at once, as on pipes, even while the client holds the output back.
  term.onProcessExit?.(() => h.childExited?.());
  // Reported once the terminal has been read to its end (or shortly after, see native-pty.ts).
  term.onExit(({ exitCode, signal }) => h.exit(exitCode, signal ? signal : null));
  let paused = false;
  // Either way the process leads its own session and process group, the terminal controlling it.
  return {
    pid: term.pid,
    pgid: term.pid,
    startTime: readProcStat(term.pid)?.startTime,
    tty: true,
    // Both queue writes internally and offer no drain event.
    writeStdin: (data) => {
      term.write(data);
      return true;
    },
    // A PTY has no half-close; EOF is the line discipline's business (^D typed by the client).
    endStdin: () => {},
    resize: (cols, rows) => {
      if (Number.isInteger(cols) && Number.isInteger(rows) && cols > 0 && rows > 0 && cols <= 65535 && rows <= 65535) {
        term.resize(cols, rows);
      }
    },
    pause: () => {
      paused = true;
      term.pause();
    },
    resume: () => {
      paused = false;
      term.resume();
    },
    readingPaused: () => paused,
    abandonOutput: () => term.destroy(),
  };
}

/**
 * A process on a new terminal of cols x rows, TERM set (xterm-256color unless the environment
 * names one): confined and started through posix_spawn when the launcher can (native-pty.ts),
 * otherwise forked by node-pty.
 */
export function startTerminal(spec: Pick<SpawnSpec, 'argv' | 'env' | 'cwd' | 'launcher'> & { cols: number; rows: number }): Terminal {
  const name = spec.env.TERM || 'xterm-256color';
  const env = { ...spec.env, TERM: name };
  const native = spec.launcher?.startTerminal?.(spec.argv, env, { cwd: spec.cwd, cols: spec.cols, rows: spec.rows });
  if (native) return native;
  // node-pty sets TERM on what it starts; a confined process gets its environment from the wrapper.
  const cmd = launchCommand({ ...spec, env });
  return fromNodePty(
    nodePty().spawn(cmd.file, cmd.args, {
      name,
      cols: spec.cols,
      rows: spec.rows,
      cwd: spec.cwd,
      env: cmd.env,
      encoding: null, // raw bytes, not utf8-decoded strings
    }),
  );
}
