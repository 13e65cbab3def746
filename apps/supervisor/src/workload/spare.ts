// One native wrapper started ahead of need (`sandgate-launch --spare`), so that an exec on pipes
// does not wait for a fork of the supervisor. Node's spawn() forks this whole process (tens of MiB
// of page tables to copy): BENCHMARKS.md ("A spare wrapper") measured that as most of the time
// between the exec's start frame and its command running. The spare is forked while nothing
// waits on it; an exec takes it, writes its arguments to the spare's descriptor 3, and the spare
// goes on exactly as a freshly spawned wrapper would (native/sandgate-launch.c).
//
// What a spare is while it waits: a root process of the supervisor's own (its cgroup, no network
// namespace entered, no workload environment) blocked in read(2), in its own session and process
// group as every exec leader is. It never outlives the supervisor: when the supervisor dies, or
// retires it, its descriptor 3 reads EOF and it exits. The exec that takes it owns it from then on,
// as it owns a process it spawned (same pid through the exec, same group and session).
//
// The spare itself is started through the native spawn (native-spawn.ts) when the addon is
// there: the supervisor starts one after every exec, and Node's spawn would hold the supervisor's
// event loop through a fork of it each time. If the native spawn fails once (a kernel or a seccomp
// profile without pidfd_open), the spares from then on are spawned by Node, as before.
import { spawn } from 'node:child_process';
import type { Socket } from 'node:net';
import type { NativeSpawn, PipedChild } from './native-spawn.ts';

/** After a take, how soon the next spare is started if the exec has not ended by then. */
const REFILL_AFTER_MS = 20;

export class SpareWrapper {
  private readonly file: string;
  private readonly env: Record<string, string>;
  private waiting: PipedChild | null = null;
  private refillTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private nativeSpawn: NativeSpawn | null;

  /**
   * `file`: the native wrapper; `env`: the environment its root part runs with (the fixed,
   * minimal one); `nativeSpawn`: the addon's spawn, or null to spawn through Node.
   */
  constructor(file: string, env: Record<string, string>, nativeSpawn: NativeSpawn | null) {
    this.file = file;
    this.env = env;
    this.nativeSpawn = nativeSpawn;
  }

  /** How spares are started now, for the log: `posix_spawn` (the addon) or `node`. */
  get spawner(): 'posix_spawn' | 'node' {
    return this.nativeSpawn ? 'posix_spawn' : 'node';
  }

  /** Starts a spare unless one waits already. Never throws: without one, execs spawn as before. */
  fill(): void {
    clearTimeout(this.refillTimer);
    this.refillTimer = undefined;
    if (this.closed || this.waiting) return;
    let child: PipedChild;
    try {
      child = this.start();
    } catch {
      return;
    }
    child.on('error', () => {
      if (this.waiting === child) this.waiting = null;
    });
    // A spare that died before its arguments arrived: the exec sees its exit, not an EPIPE crash.
    child.stdio[3]?.on('error', () => undefined);
    child.on('exit', () => {
      if (this.waiting === child) this.waiting = null;
    });
    // A waiting spare must not keep the supervisor's event loop alive.
    setReferenced(child, false);
    this.waiting = child;
  }

  /**
   * Hands the waiting spare its command (the wrapper's arguments, after the working directory) and
   * returns it, now the exec's process; null when none is ready, and the caller spawns as usual.
   * With the native spawn a spare costs no fork, so when none waits (another exec took it just
   * now) one is started here and handed the command at once. `args` is only built when a spare is
   * there to take it.
   */
  take(cwd: string, args: () => string[]): PipedChild | null {
    if (!this.waiting && this.nativeSpawn) this.fill();
    const child = this.waiting;
    if (!child || child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return null;
    const fields = [cwd, ...args()];
    if (fields.some((f) => f.includes('\0'))) return null;
    this.waiting = null;
    setReferenced(child, true);
    (child.stdio[3] as Socket).end(Buffer.from(`${fields.join('\0')}\0`));
    // The next one: when this exec ends, or shortly after it started if it runs on, so that a
    // second exec rarely finds none and the fork does not compete with this one's start.
    child.once('exit', () => setImmediate(() => this.fill()));
    this.refillTimer ??= setTimeout(() => this.fill(), REFILL_AFTER_MS);
    this.refillTimer.unref();
    return child;
  }

  /** A new spare: its own session and group, descriptors 0-3 on pipes (3 for its arguments). */
  private start(): PipedChild {
    if (this.nativeSpawn) {
      try {
        return this.nativeSpawn(this.file, [this.file, '--spare'], this.env, 4);
      } catch {
        this.nativeSpawn = null;
      }
    }
    return spawn(this.file, ['--spare'], { env: this.env, detached: true, stdio: ['pipe', 'pipe', 'pipe', 'pipe'] });
  }

  /** Retires the waiting spare (it reads EOF and exits) and starts no more. */
  close(): void {
    this.closed = true;
    clearTimeout(this.refillTimer);
    const child = this.waiting;
    this.waiting = null;
    if (child) (child.stdio[3] as Socket).end();
  }
}

function setReferenced(child: PipedChild, referenced: boolean): void {
  if (referenced) child.ref();
  else child.unref();
  for (const stream of child.stdio) {
    const socket = stream as Socket | null;
    if (referenced) socket?.ref?.();
    else socket?.unref?.();
  }
}
