// An idle supervisor gives back the memory it no longer uses (memory-trim.ts): the addon's
// malloc_trim, when the supervisor trims and when it leaves itself alone, and a real supervisor
// started with gc exposed (SUPERVISOR_NODE_FLAGS has it; libs/compute's tests check so) doing it
// after its start.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SupervisorEnv } from '@sandgate/protocols/contract';
import { afterEach, describe, expect, it } from 'vitest';
import type { Logger } from '@sandgate/telemetry/log';
import { startIdleTrim } from '../src/memory-trim.ts';
import { NATIVE_SPAWN_ADDON } from '../src/workload/native-spawn.ts';
import { FakeGateway, MAIN_TS, REPO_ROOT, startSupervisor, waitFor } from './helpers.ts';

type Line = { level: string; msg: string; fields?: Record<string, unknown> };

function recordingLog(lines: Line[]): Logger {
  const at = (level: string) => (msg: string, fields?: Record<string, unknown>) => void lines.push({ level, msg, fields });
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'), child: () => recordingLog(lines) } as unknown as Logger;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('idle memory trim', () => {
  const cleanups: Array<() => unknown> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  }, 20_000);

  it("the addon's trimMemory gives freed C heap below the heap's top back to the kernel", () => {
    // A fresh Node: 96 MiB in 64 KiB buffers (malloc'd, below glibc's mmap threshold), all freed
    // but the last, which keeps the heap's top in use, so glibc cannot give anything back itself.
    const script = `
      const addon = require(${JSON.stringify(NATIVE_SPAWN_ADDON)});
      const rss = () => process.memoryUsage.rss() / 1048576;
      // In a function: what a script evaluated by -e binds at its top level is never collected.
      const allocate = () => {
        const held = [];
        for (let i = 0; i < 1536; i++) held.push(Buffer.allocUnsafeSlow(65536).fill(1));
        return held[held.length - 1];
      };
      const top = allocate();
      gc(); gc();
      // V8 frees the buffers' memory on a background thread after the collection.
      setTimeout(() => {
        const freed = rss();
        const released = addon.trimMemory();
        console.log(JSON.stringify({ freed, trimmed: rss(), released, top: top.length }));
      }, 300);`;
    const run = spawnSync(process.execPath, ['--expose-gc', '-e', script], { encoding: 'utf8' });
    expect(run.status, run.stderr).toBe(0);
    const { freed, trimmed, released } = JSON.parse(run.stdout) as { freed: number; trimmed: number; released: boolean };
    // Freed but still resident: what the trim is for (without it this memory stays).
    expect(freed).toBeGreaterThan(96);
    expect(released).toBe(true);
    expect(freed - trimmed, run.stdout).toBeGreaterThan(64);
  });

  it('trims when the event loop was idle, not while it is busy, and again only after growth', async () => {
    const lines: Line[] = [];
    let collects = 0;
    let trims = 0;
    const order: string[] = [];
    const trimmer = startIdleTrim({
      log: recordingLog(lines),
      collect: () => void (collects++, order.push('collect')),
      dropCompileCache: () => void order.push('drop compile cache'),
      trim: () => (trims++, order.push('trim'), true),
      checkEveryMs: 100,
      trimAgainAfterMs: 0,
    });
    expect(trimmer).not.toBeNull();
    cleanups.push(() => trimmer!.stop());
    // Busy from the start: every look sees the loop occupied, so nothing is done.
    const until = Date.now() + 450;
    while (Date.now() < until) {
      // the event loop is held here
    }
    await sleep(50);
    expect(collects + trims).toBe(0);
    // Idle: the first look after that trims, once, and says so at info.
    await waitFor('first trim', () => trims === 1, 5_000);
    expect(collects).toBe(1);
    const first = lines.find((l) => l.msg === 'idle: unused memory returned to the kernel');
    expect(first?.level).toBe('info');
    expect(first?.fields).toMatchObject({ v8_collected: true, c_heap_released: true, compile_cache_dropped: true, trims: 1 });
    // The compile cache's entries are freed before the C heap's trim, which gives their pages back.
    expect(order).toEqual(['collect', 'drop compile cache', 'trim']);
    // Idle, but nothing grew: no second trim.
    await sleep(500);
    expect(trims).toBe(1);
    // Grown by 8 MiB (touched, so resident), then idle: trimmed again, at debug level.
    const grown = Buffer.alloc(8 * 1024 * 1024, 1);
    await waitFor('second trim', () => trims === 2, 5_000);
    expect(grown.length).toBe(8 * 1024 * 1024);
    expect(lines.filter((l) => l.msg === 'idle: unused memory returned to the kernel').map((l) => l.level)).toEqual(['info', 'debug']);
  });

  it('only trims the C heap while the V8 collection may not run (an unclaimed warm-pool member)', async () => {
    const lines: Line[] = [];
    let collects = 0;
    let trims = 0;
    let claimed = false;
    const trimmer = startIdleTrim({ log: recordingLog(lines), collect: () => void collects++, trim: () => (trims++, true), collectNow: () => claimed, checkEveryMs: 100, trimAgainAfterMs: 0 });
    cleanups.push(() => trimmer!.stop());
    await waitFor('first trim', () => trims === 1, 5_000);
    expect(collects).toBe(0);
    expect(lines[0]?.fields).toMatchObject({ v8_collected: false, c_heap_released: true });
    // Still unclaimed and nothing grew: no second trim.
    await sleep(500);
    expect(trims).toBe(1);
    // Claimed: the next idle look collects (and trims), though nothing grew, once.
    claimed = true;
    await waitFor('the owed collection', () => collects === 1, 5_000);
    expect(trims).toBe(2);
    await sleep(500);
    expect([collects, trims]).toEqual([1, 2]);
  });

  it('does nothing, and says so, with neither gc nor the addon', () => {
    const lines: Line[] = [];
    expect(startIdleTrim({ log: recordingLog(lines), collect: null, trim: null })).toBeNull();
    expect(lines[0]?.msg).toMatch(/idle memory trim off/);
  });

  it('a supervisor started with gc exposed (as the drivers start it) returns memory once idle after its start', async () => {
    const gw = await new FakeGateway({ heartbeatIntervalMs: 1000 }).start();
    cleanups.push(() => gw.stop());
    const sup = startSupervisor({ endpoints: [gw.address], sandboxId: 'sb-idle-trim', mainArgv: ['sleep', '1000'], nodeFlags: ['--expose-gc'] });
    cleanups.push(() => sup.stop());
    await gw.waitHello(1, 15_000);
    const line = await waitFor('the idle trim', () => sup.logs().find((l) => l.msg === 'idle: unused memory returned to the kernel'), 20_000);
    expect(line).toMatchObject({ level: 'info', v8_collected: true, c_heap_released: true, trims: 1 });
    expect(line.rss_after_mib as number).toBeLessThan(line.rss_before_mib as number);
  }, 30_000);

  it('a supervisor started from a filled compile cache drops the entries it read, at its idle trim', async () => {
    // As the drivers run it: the cache filled first by --fill-compile-cache, then a supervisor
    // started from it. Node says when it drops the entries it read (NODE_DEBUG_NATIVE).
    const cache = fs.mkdtempSync(path.join(os.tmpdir(), 'sg-trim-cache-'));
    cleanups.push(() => fs.rmSync(cache, { recursive: true, force: true }));
    const cacheEnv = { [SupervisorEnv.compileCache]: cache, NODE_COMPILE_CACHE: cache };
    const fill = spawnSync(process.execPath, ['--expose-gc', MAIN_TS, '--fill-compile-cache'], { cwd: REPO_ROOT, encoding: 'utf8', timeout: 60_000, env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...cacheEnv } });
    expect(fill.status, fill.stderr).toBe(0);
    const gw = await new FakeGateway({ heartbeatIntervalMs: 1000 }).start();
    cleanups.push(() => gw.stop());
    const sup = startSupervisor({ endpoints: [gw.address], sandboxId: 'sb-cache-drop', mainArgv: ['sleep', '1000'], nodeFlags: ['--expose-gc'], env: { ...cacheEnv, NODE_DEBUG_NATIVE: 'COMPILE_CACHE' } });
    cleanups.push(() => sup.stop());
    await gw.waitHello(1, 15_000);
    // Read from the cache, not compiled here: the entries exist to be dropped.
    expect(sup.stderr()).toMatch(/\[compile cache\] reading cache from .*supervisor\.ts\.\.\..*success/);
    expect(sup.stderr()).not.toMatch(/Clear deserialized cache/);
    const line = await waitFor('the idle trim', () => sup.logs().find((l) => l.msg === 'idle: unused memory returned to the kernel'), 20_000);
    expect(line).toMatchObject({ compile_cache_dropped: true });
    await waitFor('the entries dropped', () => /Clear deserialized cache/.test(sup.stderr()), 5_000);
  }, 60_000);
});
