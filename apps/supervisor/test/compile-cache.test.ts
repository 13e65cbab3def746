// main.ts --fill-compile-cache: what a driver runs on the host to fill the supervisors' compile
// cache (the local driver shows it to every sandbox read-only).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MAIN_TS } from './helpers.ts';

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

const filesUnder = (dir: string): string[] => fs.readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).map((e) => e.name);

describe('main.ts --fill-compile-cache', () => {
  it('loads the supervisor\'s modules, writes their compiled code and exits 0, without starting anything', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sg-ccache-'));
    dirs.push(dir);
    const r = spawnSync(process.execPath, [MAIN_TS, '--fill-compile-cache'], { env: { PATH: process.env.PATH, SANDGATE_COMPILE_CACHE: dir }, encoding: 'utf8', timeout: 30_000 });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout + r.stderr).toBe(''); // no configuration read, no log line: nothing started
    // One entry per compiled module: the supervisor's own and its dependencies' (grpc-js, protobufjs…).
    expect(filesUnder(dir).length).toBeGreaterThan(100);
  });

  it('refuses to fill without a directory to fill', () => {
    const r = spawnSync(process.execPath, [MAIN_TS, '--fill-compile-cache'], { env: { PATH: process.env.PATH }, encoding: 'utf8', timeout: 30_000 });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('--fill-compile-cache needs SANDGATE_COMPILE_CACHE');
  });
});
