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
import { spawn, type ChildProcess } from 'node:child_process';
import type { Socket } from 'node:net';

/** After a take, how soon the next spare is started if the exec has not ended by then. */
const REFILL_AFTER_MS = 20;

export class SpareWrapper {
  private readonly file: string;
  private readonly env: Record<string, string>;
  private waiting: ChildProcess | null = null;
  private refillTimer: NodeJS.Timeout | undefined;
  private closed = false;

  /** `file`: the native wrapper; `env`: the environment its root part runs with (the fixed, minimal one). */
  constructor(file: string, env: Record<string, string>) {
    this.file = file;
    this.env = env;
  }

  /** Starts a spare unless one waits already. Never throws: without one, execs spawn as before. */
  fill(): void {
    clearTimeout(this.refillTimer);
    this.refillTimer = undefined;
    if (this.closed || this.waiting) return;
    let child: ChildProcess;
    try {
      child = spawn(this.file, ['--spare'], { env: this.env, detached: true, stdio: ['pipe', 'pipe', 'pipe', 'pipe'] });
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
   * `args` is only built when a spare is there to take it.
   */
  take(cwd: string, args: () => string[]): ChildProcess | null {
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

  /** Retires the waiting spare (it reads EOF and exits) and starts no more. */
  close(): void {
    this.closed = true;
    clearTimeout(this.refillTimer);
    const child = this.waiting;
    this.waiting = null;
    if (child) (child.stdio[3] as Socket).end();
  }
}

function setReferenced(child: ChildProcess, referenced: boolean): void {
  if (referenced) child.ref();
  else child.unref();
  for (const stream of child.stdio) {
    const socket = stream as Socket | null;
    if (referenced) socket?.ref?.();
    else socket?.unref?.();
  }
}
