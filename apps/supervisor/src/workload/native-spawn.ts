// Starting a process without forking the supervisor: native/sandgate-spawn.c, a Node addon built
// at `npm install` beside the other helpers, starts it with glibc's posix_spawn (a vfork-like
// clone: no page tables copied), where Node's spawn forks the whole supervisor and holds its event
// loop until the child has exec'd (BENCHMARKS.md, "What a spawn costs a Node process": about 7 ms
// per spawn on the project's machine, against well under 1 ms this way).
//
// What it returns behaves as Node's ChildProcess does for what the spare wrapper and an exec on
// pipes use (PipedChild): the pid, one socket per stdio descriptor, 'exit' and then 'close' once
// every output socket has closed, exitCode and signalCode. Null when the addon was not built (a
// checkout installed without a C compiler) or does not load: the caller spawns through Node.
import { EventEmitter } from 'node:events';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';

/** The addon (native/build.sh builds it), where this checkout keeps it. */
export const NATIVE_SPAWN_ADDON = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../native/build/sandgate-spawn.node');

interface Addon {
  spawn(file: string, argv: string[], envp: string[], stdioCount: number, onExit: (code: number | null, signal: number | null) => void): { pid: number; fds: number[] };
}

/** What a process started on pipes offers its caller. Node's ChildProcess has all of it. */
export interface PipedChild extends EventEmitter {
  readonly pid?: number | undefined;
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  readonly stdio: readonly (Readable | Writable | null | undefined)[];
  readonly exitCode: number | null;
  readonly signalCode: NodeJS.Signals | null;
  ref(): void;
  unref(): void;
}

export type NativeSpawn = (file: string, argv: string[], env: Record<string, string>, stdioCount: number) => PipedChild;

const SIGNAL_NAMES = new Map(Object.entries(os.constants.signals).map(([name, n]) => [n, name as NodeJS.Signals]));

/** The addon module (Node caches it: one load for its every user), or null when it is not there or does not load. */
export function loadAddon<T>(file: string = NATIVE_SPAWN_ADDON): T | null {
  try {
    return createRequire(import.meta.url)(file) as T;
  } catch {
    return null;
  }
}

/** The addon's spawn, or null when it is not there or does not load. */
export function loadNativeSpawn(file: string = NATIVE_SPAWN_ADDON): NativeSpawn | null {
  const addon = loadAddon<Addon>(file);
  if (!addon) return null;
  return (exe, argv, env, stdioCount) => new NativeChild(addon, exe, argv, env, stdioCount);
}

class NativeChild extends EventEmitter implements PipedChild {
  readonly pid: number;
  readonly stdio: net.Socket[];
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  private closesNeeded: number;

  /** Throws (errno's message, `errno` set) when the process could not be started. */
  constructor(addon: Addon, file: string, argv: string[], env: Record<string, string>, stdioCount: number) {
    super();
    const envp = Object.entries(env).map(([k, v]) => `${k}=${v}`);
    const started = addon.spawn(file, argv, envp, stdioCount, (code, signal) => this.exited(code, signal));
    this.pid = started.pid;
    // As Node's stdio 'pipe': the child reads descriptor 0 and writes the others; a socket each.
    this.stdio = started.fds.map((fd, i) => new net.Socket({ fd, readable: i !== 0, writable: true }));
    // As Node counts them: the exit, and the close of every descriptor but stdin.
    this.closesNeeded = 1 + Math.max(0, this.stdio.length - 1);
    this.stdio.slice(1).forEach((socket) => socket.once('close', () => this.maybeClose()));
  }

  get stdin(): net.Socket | null {
    return this.stdio[0] ?? null;
  }

  get stdout(): net.Socket | null {
    return this.stdio[1] ?? null;
  }

  get stderr(): net.Socket | null {
    return this.stdio[2] ?? null;
  }

  /** The exit's watch never keeps the event loop alive (the addon unrefs it); the sockets do, and are referenced one by one. */
  ref(): void {}

  unref(): void {}

  private exited(code: number | null, signal: number | null): void {
    this.exitCode = code;
    this.signalCode = signal === null ? null : (SIGNAL_NAMES.get(signal) ?? null);
    // As Node's ChildProcess: stdin goes with the process, and output nobody reads is drained, so
    // that its socket closes and 'close' can follow.
    this.stdin?.destroy();
    this.emit('exit', this.exitCode, this.signalCode);
    process.nextTick(() => {
      for (const socket of this.stdio.slice(1)) if (socket.readable && socket.listenerCount('data') === 0) socket.resume();
    });
    this.maybeClose();
  }

  private maybeClose(): void {
    if (--this.closesNeeded === 0) this.emit('close', this.exitCode, this.signalCode);
  }
}
