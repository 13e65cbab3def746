// What follows a piped exec's leader exiting (ProcessTree.leaderExited): output held back by the
// consumer's back-pressure is never given up; a pipe held open by a process that escaped the kill is.
// Real processes, and a consumer (the output stream) whose fullness and drain the test decides.
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { createLogger } from '@sandgate/telemetry/log';
import { ProcessTree, spawnPiped, spawnPty } from '../src/exec-process.ts';
import { loadNativePty, type TerminalOptions } from '../src/workload/native-pty.ts';
import type { WorkloadLauncher } from '../src/workload/launcher.ts';
import { killTagged, waitFor } from './helpers.ts';

const prefix = `p${process.pid}-${randomUUID().slice(0, 8)}-`;
let seq = 0;
const log = createLogger({}, 'error');
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A setsid'd, env -i'd sleep: out of the exec's group, session and tag, so no kill finds it. */
const escapees: string[] = [];
function escapee(): string {
  const arg = `30.${process.pid}${++seq}`;
  escapees.push(arg);
  return `setsid env -i sleep ${arg} &`;
}
function killEscapees(): void {
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = fs.readFileSync(`/proc/${entry}/cmdline`, 'latin1').split('\0');
      if (argv[0] === 'sleep' && escapees.includes(argv[1]!)) process.kill(Number(entry), 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
}

afterAll(() => {
  killEscapees();
  killTagged(prefix);
});

/** Runs `script` like an exec does: output to `consumer`, back-pressure while `consumer.full`. */
function start(script: string, consumer: EventEmitter & { full: boolean }, onChunk: () => void = () => {}) {
  const execId = `${prefix}${++seq}`;
  const tree = new ProcessTree(execId, log);
  let running = true;
  const got = { stdout: 0, stderr: 0, leaderExitAt: 0 };
  const output = (which: 'stdout' | 'stderr') => (chunk: Buffer) => {
    got[which] += chunk.length;
    tree.afterOutputWrite(!consumer.full, consumer, () => running);
    onChunk();
  };
  const exit = new Promise<{ code: number | null; at: number }>((resolve, reject) => {
    tree.proc = spawnPiped(
      { argv: ['sh', '-c', script], cwd: process.cwd(), env: { PATH: process.env.PATH ?? '/usr/bin:/bin', SANDGATE_EXEC_ID: execId }, cols: 0, rows: 0 },
      {
        stdout: output('stdout'),
        stderr: output('stderr'),
        childExited: () => {
          got.leaderExitAt = Date.now();
          tree.leaderExited(() => running);
        },
        exit: (code) => {
          running = false;
          resolve({ code, at: Date.now() });
        },
        spawnError: reject,
        stdinDrain: () => {},
      },
    );
  });
  return { got, exit };
}

const consumer = (full: boolean) => Object.assign(new EventEmitter(), { full });

describe('ProcessTree: after the leader exited', () => {
  it('does not give up output held back by back-pressure; once it drains, a pipe an escapee holds is given up shortly after', async () => {
    // The consumer is full from the first chunk on: the rest waits in the pipes (and Node's
    // buffers). Right after the exit it takes one chunk, then stalls again for well over the
    // 200 ms grace; then it takes everything. An escapee keeps the pipes open throughout.
    const c = consumer(true);
    let tookOne = false;
    const { got, exit } = start(`${escapee()} for i in 1 2 3 4 5 6 7; do head -c 8192 /dev/zero; sleep 0.02; done; head -c 8192 /dev/zero >&2`, c, () => {
      if (got.leaderExitAt > 0 && !tookOne) {
        tookOne = true;
        c.emit('drain');
      }
    });
    await waitFor('the leader to exit', () => got.leaderExitAt > 0, 10_000);
    await sleep(800);
    expect(got.stdout + got.stderr).toBeLessThan(8 * 8192); // still held back
    const drainedAt = Date.now();
    c.full = false;
    c.emit('drain');
    const { code, at } = await exit;
    expect(code).toBe(0);
    expect(got.stdout).toBe(7 * 8192);
    expect(got.stderr).toBe(8192);
    // The escapee's pipes are given up again ~200 ms after the drain, not kept forever.
    expect(at - drainedAt).toBeLessThan(2_000);
  });

  it('a consumer full since before the exit does not keep an escapee\'s pipe: Node reads the rest of the pipes at the exit anyway', async () => {
    // The back-pressure flag stays set (no drain ever comes), but the output is not held back:
    // child_process resumes the pipes once the child exited. Waiting for a drain here would let
    // the escapee keep the exec (and its output, into memory) for as long as the client likes.
    const { got, exit } = start(`${escapee()} for i in 1 2 3; do head -c 8192 /dev/zero; sleep 0.02; done`, consumer(true));
    const { code, at } = await exit;
    expect(code).toBe(0);
    expect(got.stdout).toBe(3 * 8192);
    expect(at - got.leaderExitAt).toBeLessThan(2_000);
  });

  it('gives up a pipe an escapee holds ~200 ms after the exit when nothing holds the output back', async () => {
    const { got, exit } = start(`${escapee()} sleep 0.2; echo done`, consumer(false));
    const { code, at } = await exit;
    expect(code).toBe(0);
    expect(got.stdout).toBe(5);
    expect(at - got.leaderExitAt).toBeGreaterThanOrEqual(150);
    expect(at - got.leaderExitAt).toBeLessThan(2_000);
  });
});

describe('ProcessTree on a terminal started through posix_spawn (native-pty.ts)', () => {
  it("kills what a PTY exec's leader left behind at the leader's exit, while the client holds the output back", async () => {
    const nativePty = loadNativePty();
    if (!nativePty) throw new Error('the sandgate-spawn addon was not built (npm install runs apps/supervisor/native/build.sh)');
    // Terminals as the confined launcher starts them: the command itself here, through the addon.
    const launcher = { startTerminal: (argv: string[], env: Record<string, string>, opts: TerminalOptions) => nativePty(`/bin/${argv[0]}`, argv, env, opts) } as unknown as WorkloadLauncher;
    const execId = `${prefix}${++seq}`;
    const marker = `300.${process.pid}${++seq}`;
    const tree = new ProcessTree(execId, log);
    let running = true;
    const proc = spawnPty(
      // SIGHUP ignored, as by nohup: the terminal's hangup at the leader's exit does not end it.
      { argv: ['sh', '-c', `trap "" HUP; sleep ${marker} & exit 0`], cwd: '/', env: { PATH: '/usr/bin:/bin', SANDGATE_EXEC_ID: execId }, cols: 80, rows: 24, launcher },
      {
        stdout: () => {},
        stderr: () => {},
        childExited: () => tree.leaderExited(() => running),
        exit: () => {
          running = false;
        },
        spawnError: (err) => {
          throw err;
        },
        stdinDrain: () => {},
      },
    );
    tree.proc = proc;
    proc.pause(); // the client takes nothing
    const leftover = () =>
      fs.readdirSync('/proc').some((e) => {
        try {
          return /^\d+$/.test(e) && fs.readFileSync(`/proc/${e}/cmdline`, 'latin1').split('\0')[1] === marker;
        } catch {
          return false;
        }
      });
    // Exited and reaped (the addon reaps at once).
    await waitFor('the leader to exit', () => !fs.existsSync(`/proc/${proc.pid}`), 10_000);
    // Before the terminal said when its process exited, nothing killed the tree until the exit
    // was reported, which waits for the held-back output: the sleep lived on.
    await waitFor('the background sleep killed', () => !leftover(), 5_000);
    proc.resume();
    await waitFor('the exit reported', () => !running, 5_000);
  });
});
