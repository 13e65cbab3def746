// A process on a terminal without forking the supervisor: the sandgate-spawn addon's spawnPty
// (native/sandgate-spawn.c) opens a pseudo-terminal and starts the process on it through
// posix_spawn, where node-pty forks the whole supervisor for every terminal (an interactive exec,
// an SSH shell, a main process with a TTY) and holds its event loop until the child has exec'd
// (BENCHMARKS.md, "What a spawn costs a Node process").
//
// Terminal is what the supervisor uses of a terminal, whichever started it: a NativeTerminal, or
// node-pty's IPty through fromNodePty. Both report the exit only once the terminal's output has
// been read to its end, or 200 ms after the exit when something the process left behind still
// holds the terminal open (node-pty's rule; the exec's tree kill ends such leftovers). Unlike
// node-pty, a NativeTerminal does not count those 200 ms while its reading is paused: the output
// it holds then has not been taken yet, and is not given up.
import fs from 'node:fs';
import tty from 'node:tty';
import type * as pty from 'node-pty';
import { loadAddon, NATIVE_SPAWN_ADDON } from './native-spawn.ts';

export interface Terminal {
  readonly pid: number;
  onData(listener: (data: Buffer) => void): void;
  /** Once: the exit status (`signal` 0 unless a signal ended it), after the output. */
  onExit(listener: (exit: { exitCode: number; signal: number }) => void): void;
  /**
   * Once, the moment the process itself exited, its output perhaps not all read yet (what it left
   * behind can then be killed at once). Absent on node-pty's terminals, which do not tell.
   */
  onProcessExit?(listener: () => void): void;
  /** Queued, never blocking; dropped once the terminal is closed. */
  write(data: Buffer | string): void;
  resize(cols: number, rows: number): void;
  pause(): void;
  resume(): void;
  /** Stops reading, closes the terminal and hangs up its process. */
  destroy(): void;
}

export interface TerminalOptions {
  cwd: string;
  cols: number;
  rows: number;
}

/** Starts `file` (an absolute path) with `argv` and exactly `env` on a new terminal; throws (errno set) when it cannot. */
export type NativePtySpawn = (file: string, argv: string[], env: Record<string, string>, opts: TerminalOptions) => Terminal;

interface PtyAddon {
  spawnPty(file: string, argv: string[], envp: string[], cwd: string, cols: number, rows: number, onExit: (code: number | null, signal: number | null) => void): { pid: number; fd: number };
  resizePty(fd: number, cols: number, rows: number): void;
}

/** After the process exited, how long its terminal may stay open (held by what it left behind). */
const LEFTOVER_HOLD_MS = 200;
/** A full terminal input buffer (the process reads no input): how soon a write is tried again. */
const WRITE_RETRY_MS = 5;

/** The addon's terminal spawn, or null when it was not built or does not load (node-pty then). */
export function loadNativePty(file: string = NATIVE_SPAWN_ADDON): NativePtySpawn | null {
  const addon = loadAddon<PtyAddon>(file);
  if (typeof addon?.spawnPty !== 'function') return null;
  return (exe, argv, env, opts) => new NativeTerminal(addon, exe, argv, env, opts);
}

class NativeTerminal implements Terminal {
  readonly pid: number;
  private readonly addon: PtyAddon;
  private readonly fd: number;
  private readonly master: tty.ReadStream;
  private readonly dataListeners: ((data: Buffer) => void)[] = [];
  private readonly exitListeners: ((exit: { exitCode: number; signal: number }) => void)[] = [];
  private readonly processExitListeners: (() => void)[] = [];
  private exitStatus: { exitCode: number; signal: number } | null = null;
  private outputEnded = false;
  private reported = false;
  private holdTimer: NodeJS.Timeout | undefined;
  private paused = false;
  private pending: Buffer[] = [];
  private retryTimer: NodeJS.Timeout | undefined;

  constructor(addon: PtyAddon, file: string, argv: string[], env: Record<string, string>, opts: TerminalOptions) {
    this.addon = addon;
    const envp = Object.entries(env).map(([k, v]) => `${k}=${v}`);
    const started = addon.spawnPty(file, argv, envp, opts.cwd, opts.cols, opts.rows, (code, signal) => this.exited(code, signal));
    this.pid = started.pid;
    this.fd = started.fd;
    // libuv reads the master as a TTY stream; its writes would block the event loop on a full
    // terminal (libuv does not make a master non-blocking), so they go through write() below.
    this.master = new tty.ReadStream(this.fd);
    this.master.on('data', (chunk: Buffer) => {
      for (const listener of this.dataListeners) listener(chunk);
    });
    // EIO is how a terminal's output ends: every process that had it open closed it.
    this.master.on('error', () => this.endOutput());
    this.master.on('end', () => this.endOutput());
    this.master.on('close', () => {
      this.pending = [];
      clearTimeout(this.retryTimer);
      this.endOutput();
    });
  }

  /**
   * Whether the master descriptor is still ours. Its stream closes it the moment it is destroyed
   * (by us, or on a read error), before 'close' is emitted; the number may then be reused at once
   * by another exec's terminal, which a late write or resize must never reach.
   */
  private get closed(): boolean {
    return this.master.destroyed;
  }

  onData(listener: (data: Buffer) => void): void {
    this.dataListeners.push(listener);
  }

  onExit(listener: (exit: { exitCode: number; signal: number }) => void): void {
    this.exitListeners.push(listener);
  }

  onProcessExit(listener: () => void): void {
    this.processExitListeners.push(listener);
  }

  write(data: Buffer | string): void {
    const buf = typeof data === 'string' ? Buffer.from(data) : data;
    if (this.closed || buf.length === 0) return;
    this.pending.push(buf);
    if (this.pending.length === 1 && this.retryTimer === undefined) this.flush();
  }

  resize(cols: number, rows: number): void {
    if (this.closed) return;
    try {
      this.addon.resizePty(this.fd, cols, rows);
    } catch {
      // a size out of range, or the terminal just went: nothing to resize
    }
  }

  pause(): void {
    this.paused = true;
    clearTimeout(this.holdTimer);
    this.holdTimer = undefined;
    this.master.pause();
  }

  resume(): void {
    this.paused = false;
    this.master.resume();
    if (this.exitStatus) this.holdAfterExit();
  }

  destroy(): void {
    if (!this.closed) this.master.destroy();
    // Only while the process has not been reaped: the addon reaps it right before exited() runs,
    // and from then on its pid may belong to another process (another exec's, the netns agent).
    if (this.exitStatus) return;
    try {
      process.kill(this.pid, 'SIGHUP');
    } catch {
      // already gone
    }
  }

  /** Writes what is queued until the terminal's input buffer is full, then tries again shortly. */
  private flush(): void {
    this.retryTimer = undefined;
    while (!this.closed && this.pending.length > 0) {
      const head = this.pending[0]!;
      let written: number;
      try {
        written = fs.writeSync(this.fd, head);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EAGAIN') {
          this.retryTimer = setTimeout(() => this.flush(), WRITE_RETRY_MS);
          return;
        }
        this.pending = []; // EIO: the terminal's processes are gone
        return;
      }
      if (written < head.length) this.pending[0] = head.subarray(written);
      else this.pending.shift();
    }
  }

  private exited(code: number | null, signal: number | null): void {
    this.exitStatus = { exitCode: code ?? 0, signal: signal ?? 0 };
    for (const listener of this.processExitListeners) listener();
    if (this.outputEnded) return this.report();
    this.holdAfterExit();
  }

  /**
   * The process exited but its terminal is still open: give up on it shortly after, unless the
   * reading is paused, because what the terminal holds then is output not yet taken (back-pressure
   * from the client), which giving up would drop. The wait starts again on resume.
   */
  private holdAfterExit(): void {
    if (this.paused || this.reported) return;
    clearTimeout(this.holdTimer);
    this.holdTimer = setTimeout(() => {
      if (!this.closed) this.master.destroy();
      this.report();
    }, LEFTOVER_HOLD_MS);
  }

  private endOutput(): void {
    this.outputEnded = true;
    if (this.exitStatus) this.report();
  }

  private report(): void {
    if (this.reported || !this.exitStatus) return;
    this.reported = true;
    clearTimeout(this.holdTimer);
    if (!this.closed) this.master.destroy();
    for (const listener of this.exitListeners) listener(this.exitStatus);
  }
}

/** node-pty's terminal as a Terminal (started with `encoding: null`, so its data are Buffers). */
export function fromNodePty(term: pty.IPty): Terminal {
  // node-pty rethrows read errors other than EIO unless someone else listens for 'error'; a
  // terminal failing must not become an uncaught exception.
  (term as unknown as { on?: (ev: string, fn: (err: unknown) => void) => void }).on?.('error', () => {});
  return {
    pid: term.pid,
    onData: (listener) => term.onData((data) => listener(Buffer.isBuffer(data) ? data : Buffer.from(data))),
    onExit: (listener) => term.onExit(({ exitCode, signal }) => listener({ exitCode, signal: signal ?? 0 })),
    write: (data) => term.write(data as string),
    resize: (cols, rows) => term.resize(cols, rows),
    pause: () => term.pause(),
    resume: () => term.resume(),
    destroy: () => {
      try {
        (term as unknown as { destroy?: () => void }).destroy?.();
      } catch {
        // already closed
      }
    },
  };
}
