// main.ts --fill-compile-cache: what a driver runs on the host to fill the supervisors' compile
// cache (the local driver shows it to every sandbox read-only).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { compileCacheEnvironment, SANDBOX_CREDENTIAL_PATH, supervisorEnvironment } from '@sandgate/protocols/contract';
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
    // One entry per compiled module: the supervisor's own and its dependencies' (protobufjs, ssh2…).
    expect(filesUnder(dir).length).toBeGreaterThan(100);
  });

  it('a supervisor launched as the drivers launch it takes every TypeScript file from the cache, its entry point included: none is stripped', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sg-ccache-'));
    dirs.push(dir);
    const fill = spawnSync(process.execPath, [MAIN_TS, '--fill-compile-cache'], { env: { PATH: process.env.PATH, ...compileCacheEnvironment(dir) }, encoding: 'utf8', timeout: 30_000 });
    expect(fill.status, fill.stderr).toBe(0);
    // The environment a driver writes for a launch with the cache (supervisorEnvironment), with
    // Node's report of every cache lookup. The second fill loads what a supervisor's start loads.
    const launchEnv = supervisorEnvironment({ sandboxId: 'sb-cache', gatewayEndpoints: '127.0.0.1:1', credentialFile: SANDBOX_CREDENTIAL_PATH, tty: false, logLevel: 'info', environment: {}, compileCacheDir: dir });
    const r = spawnSync(process.execPath, [MAIN_TS, '--fill-compile-cache'], { env: { PATH: process.env.PATH, ...launchEnv, NODE_DEBUG_NATIVE: 'COMPILE_CACHE' }, encoding: 'utf8', timeout: 30_000 });
    expect(r.status, r.stderr).toBe(0);
    const fromCache = [...r.stderr.matchAll(/retrieving transpile cache for StrippedTypeScript (\S+?)\.\.\.success/g)].map((m) => m[1]!);
    const stripped = [...r.stderr.matchAll(/no transpile cache for StrippedTypeScript (\S+)/g)].map((m) => m[1]!);
    // main.ts loads before it can turn a cache on: only Node's own NODE_COMPILE_CACHE covers it.
    expect(fromCache).toContain(pathToFileURL(path.resolve(MAIN_TS)).href);
    expect(fromCache.length).toBeGreaterThan(50);
    expect(stripped).toEqual([]);
  });

  it('refuses to fill without a directory to fill', () => {
    const r = spawnSync(process.execPath, [MAIN_TS, '--fill-compile-cache'], { env: { PATH: process.env.PATH }, encoding: 'utf8', timeout: 30_000 });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('--fill-compile-cache needs SANDGATE_COMPILE_CACHE');
  });
});
