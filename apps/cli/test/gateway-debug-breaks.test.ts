// Debug faults through the real CLI: `sandgate gateway`/`up` refuse a switch without
// SANDGATE_DEBUG_UNSAFE=1, and a replica started with one (real redis-server, real process) says
// so on /readyz, /metrics and in its log at ERROR, even with SANDGATE_LOG_LEVEL=error.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type TestRedis } from '@sandgate/test-harness/redis';
import { waitFor } from '@sandgate/test-harness/wait';

const bin = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../bin/sandgate.js');

function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('SANDGATE_')) env[k] = v;
  return { ...env, ...extra };
}

describe('a replica asked for debug faults without SANDGATE_DEBUG_UNSAFE=1', () => {
  it.each([
    [['gateway', '--grpc-port', '0', '--http-port', '0', '--peer-port', '0'], { SANDGATE_DEBUG_BREAK: 'fencing' }],
    [['up', '--grpc-port', '0', '--http-port', '0'], { SANDGATE_DEBUG_BREAK: 'jobs,fencing' }],
    [['gateway'], { SANDGATE_DEBUG_DISABLE_FENCING: '1' }],
    [['gateway'], { SANDGATE_DEBUG_BREAK: 'fencing', SANDGATE_DEBUG_UNSAFE: 'yes' }],
  ])('%j %j refuses to start and says why', (args, env) => {
    const r = spawnSync(process.execPath, [bin, ...args], { env: cleanEnv(env), encoding: 'utf8', timeout: 20_000 });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/^error: debug fault\(s\) .*refusing to start without SANDGATE_DEBUG_UNSAFE=1/);
    expect(r.stdout).toBe('');
  });

  it('an unknown fault is refused even with SANDGATE_DEBUG_UNSAFE=1', () => {
    const r = spawnSync(process.execPath, [bin, 'gateway'], {
      env: cleanEnv({ SANDGATE_DEBUG_BREAK: 'gravity', SANDGATE_DEBUG_UNSAFE: '1' }),
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain("unknown debug fault 'gravity'; known: fencing, jobs");
  });
});

describe('a replica started with SANDGATE_DEBUG_UNSAFE=1 SANDGATE_DEBUG_BREAK=fencing', () => {
  let redis: TestRedis;
  let proc: ChildProcess;
  let stateDir: string;
  let output = '';
  let httpUrl: string;

  beforeAll(async () => {
    redis = await startRedis();
    stateDir = mkdtempSync(path.join(os.tmpdir(), 'sg-debug-'));
    const args = [bin, 'gateway', '--host', '127.0.0.1', '--grpc-port', '0', '--http-port', '0', '--peer-port', '0', '--redis', redis.url, '--replica-id', 'unsafe-1', '--state-dir', stateDir, '--no-workers'];
    proc = spawn(process.execPath, args, {
      env: cleanEnv({ SANDGATE_DEBUG_UNSAFE: '1', SANDGATE_DEBUG_BREAK: 'fencing', SANDGATE_LOG_LEVEL: 'error' }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    proc.stdout!.on('data', (c: Buffer) => (output += c.toString()));
    proc.stderr!.on('data', (c: Buffer) => (output += c.toString()));
    httpUrl = await waitFor('the replica to listen', () => {
      if (proc.exitCode !== null) throw new Error(`replica exited ${proc.exitCode}: ${output}`);
      return /http=(http:\/\/\S+)/.exec(output)?.[1];
    }, 20_000);
  });

  afterAll(async () => {
    if (proc && proc.exitCode === null) {
      const exited = new Promise((resolve) => proc.once('exit', resolve));
      proc.kill('SIGTERM');
      await exited;
    }
    await redis?.stop();
    if (stateDir) rmSync(stateDir, { recursive: true, force: true });
  });

  it('is ready, and /readyz lists the fault', async () => {
    const res = await waitFor('ready', async () => {
      const r = await fetch(`${httpUrl}/readyz`);
      return r.status === 200 ? r : undefined;
    });
    expect(await res.json()).toMatchObject({ status: 'ready', replica: 'unsafe-1', debugBreaks: ['fencing'] });
  });

  it('/metrics shows the fault', async () => {
    const text = await (await fetch(`${httpUrl}/metrics`)).text();
    expect(text).toContain('# TYPE sandgate_debug_break gauge\nsandgate_debug_break{name="fencing"} 1\n');
    expect(text).not.toContain('name="jobs"');
  });

  it('logs the fault at ERROR although the log level is error', () => {
    const lines = output.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>);
    const unsafe = lines.filter((l) => String(l.msg).startsWith('UNSAFE: debug faults are on'));
    expect(unsafe.length).toBeGreaterThanOrEqual(1);
    expect(unsafe[0]).toMatchObject({ level: 'error', debugBreaks: ['fencing'], replica: 'unsafe-1' });
    // SANDGATE_LOG_LEVEL=error reached the logger: the info line about listening is not written.
    expect(lines.some((l) => l.msg === 'replica listening')).toBe(false);
  });
});
