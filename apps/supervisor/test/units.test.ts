// Unit tests of the supervisor's small pure-ish modules.
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { backoffDelay } from '../src/backoff.ts';
import { loadConfig, mainArgvFrom, parseEndpoints, stripSupervisorEnv, ConfigError } from '../src/config.ts';
import { findTaggedProcesses, killExecTree, readProcStat } from '../src/kill-tree.ts';
import { createLogger } from '../src/log.ts';
import { preflight } from '../src/preflight.ts';
import { RingBuffer } from '../src/ring-buffer.ts';
import { killTagged, taggedPids, waitFor } from './helpers.ts';

describe('RingBuffer', () => {
  it('keeps everything until full, then only the most recent bytes', () => {
    const rb = new RingBuffer(8);
    rb.write(Buffer.from('abc'));
    expect(rb.snapshot().toString()).toBe('abc');
    rb.write(Buffer.from('defgh'));
    expect(rb.snapshot().toString()).toBe('abcdefgh');
    rb.write(Buffer.from('ij'));
    expect(rb.snapshot().toString()).toBe('cdefghij');
    rb.write(Buffer.from('0123456789xyz'));
    expect(rb.snapshot().toString()).toBe('56789xyz');
    expect(rb.size).toBe(8);
    expect(rb.totalWritten).toBe(23);
    rb.clear();
    expect(rb.snapshot().length).toBe(0);
  });

  it('defaults to 1 MiB and never grows', () => {
    const rb = new RingBuffer();
    for (let i = 0; i < 40; i++) rb.write(Buffer.alloc(64 * 1024, i));
    expect(rb.capacity).toBe(1024 * 1024);
    const snap = rb.snapshot();
    expect(snap.length).toBe(1024 * 1024);
    expect(snap[0]).toBe(24);
    expect(snap[snap.length - 1]).toBe(39);
  });
});

describe('backoffDelay', () => {
  it('grows exponentially from 100 ms, caps at 2 s, with jitter in the upper half', () => {
    expect(backoffDelay(0, undefined, () => 0)).toBe(50);
    expect(backoffDelay(0, undefined, () => 1)).toBe(100);
    expect(backoffDelay(3, undefined, () => 1)).toBe(800);
    expect(backoffDelay(10, undefined, () => 1)).toBe(2000);
    expect(backoffDelay(1000, undefined, () => 0)).toBe(1000);
  });
});

describe('config', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-cfg-'));
  const cred = path.join(dir, 'cred');
  fs.writeFileSync(cred, 's3cret\n');
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('parses the driver contract', () => {
    const cfg = loadConfig(
      {
        SANDGATE_GATEWAY: ' a:1, b:2 ,',
        SANDGATE_SANDBOX_ID: 'sb',
        SANDGATE_CREDENTIAL_FILE: cred,
        SANDGATE_MAIN_TTY: '1',
        SANDGATE_LOG_LEVEL: 'DEBUG',
        PATH: '/bin',
        FOO: 'bar',
      },
      ['--', 'sh', '-c', 'x -- y'],
    );
    expect(cfg.endpoints).toEqual(['a:1', 'b:2']);
    expect(cfg.credential).toBe('s3cret');
    expect(cfg.mainTty).toBe(true);
    expect(cfg.logLevel).toBe('debug');
    expect(cfg.mainArgv).toEqual(['sh', '-c', 'x -- y']);
    expect(cfg.sandboxEnv).toEqual({ PATH: '/bin', FOO: 'bar' });
  });

  it('rejects what the driver got wrong', () => {
    const base = { SANDGATE_GATEWAY: 'a:1', SANDGATE_SANDBOX_ID: 'sb', SANDGATE_CREDENTIAL_FILE: cred };
    expect(() => loadConfig({ ...base, SANDGATE_GATEWAY: '' }, ['--', 'x'])).toThrow(ConfigError);
    expect(() => loadConfig({ ...base, SANDGATE_SANDBOX_ID: '' }, ['--', 'x'])).toThrow(ConfigError);
    expect(() => loadConfig({ ...base, SANDGATE_CREDENTIAL_FILE: path.join(dir, 'nope') }, ['--', 'x'])).toThrow(ConfigError);
    expect(() => loadConfig(base, ['x'])).toThrow(ConfigError);
    expect(() => loadConfig(base, ['--'])).toThrow(ConfigError);
  });

  it('takes debug faults only with SANDGATE_DEBUG_UNSAFE=1, and keeps what it read for the refusal', () => {
    const base = { SANDGATE_GATEWAY: 'a:1', SANDGATE_SANDBOX_ID: 'sb', SANDGATE_CREDENTIAL_FILE: cred };
    expect(loadConfig(base, ['--', 'x']).debugBreaks).toEqual(new Set());
    expect(loadConfig({ ...base, SANDGATE_DEBUG_BREAK: '', SANDGATE_DEBUG_UNSAFE: '0' }, ['--', 'x']).debugBreaks).toEqual(new Set());
    expect(loadConfig({ ...base, SANDGATE_DEBUG_BREAK: 'exec-kill', SANDGATE_DEBUG_UNSAFE: '1' }, ['--', 'x']).debugBreaks).toEqual(
      new Set(['exec-kill']),
    );
    let refused: unknown;
    try {
      loadConfig({ ...base, SANDGATE_LOG_LEVEL: 'warn', SANDGATE_DEBUG_BREAK: 'exec-kill' }, ['--', 'x']);
    } catch (err) {
      refused = err;
    }
    expect(refused).toBeInstanceOf(ConfigError);
    expect(refused).toMatchObject({ message: expect.stringContaining('SANDGATE_DEBUG_UNSAFE=1'), logLevel: 'warn', sandboxId: 'sb' });
    expect(() => loadConfig({ ...base, SANDGATE_DEBUG_BREAK: 'nope', SANDGATE_DEBUG_UNSAFE: '1' }, ['--', 'x'])).toThrow(/unknown debug fault/);
  });

  it('helpers', () => {
    expect(mainArgvFrom(['--', '--', 'a'])).toEqual(['--', 'a']);
    expect(parseEndpoints(undefined)).toEqual([]);
    expect(stripSupervisorEnv({ SANDGATE_X: '1', SANDGATEWAY: '2', A: undefined })).toEqual({ SANDGATEWAY: '2' });
  });
});

describe('preflight', () => {
  const env = { PATH: '/usr/bin:/bin' };
  it('accepts runnable commands', () => {
    expect(preflight('sh', '/', env)).toEqual({ ok: true });
    expect(preflight('/bin/sh', '/', env)).toEqual({ ok: true });
    expect(preflight('./sh', '/bin', env)).toEqual({ ok: true });
  });
  it('reports like a shell', () => {
    expect(preflight('nope-xyz', '/', env)).toEqual({ ok: false, exitCode: 127, message: 'nope-xyz: command not found' });
    expect(preflight('/nope/xyz', '/', env)).toEqual({ ok: false, exitCode: 127, message: '/nope/xyz: No such file or directory' });
    expect(preflight('/tmp', '/', env)).toEqual({ ok: false, exitCode: 126, message: '/tmp: Is a directory' });
    expect(preflight('sh', '/nope', env)).toEqual({ ok: false, exitCode: 126, message: 'sh: /nope: No such file or directory' });
    expect(preflight('', '/', env)).toMatchObject({ ok: false, exitCode: 127 });
    // The exec's PATH decides, not the supervisor's.
    expect(preflight('sh', '/', { PATH: '/nonexistent' })).toMatchObject({ ok: false, exitCode: 127 });
  });
});

describe('log', () => {
  it('writes one JSON line per event with the base fields, filtered by level', () => {
    const lines: string[] = [];
    const log = createLogger({ level: 'info', base: { sandbox_id: 'sb' }, write: (l) => lines.push(l) });
    log.debug('hidden');
    log.child({ exec_id: 'e1' }).warn('boom', { err: new Error('bad') });
    expect(lines).toHaveLength(1);
    expect(lines[0].endsWith('\n')).toBe(true);
    const rec = JSON.parse(lines[0]);
    expect(rec).toMatchObject({ level: 'warn', msg: 'boom', sandbox_id: 'sb', exec_id: 'e1', err: { message: 'bad' } });
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    expect(() => log.info('circular', { circular })).not.toThrow();
  });
});

describe('killExecTree', () => {
  const prefix = `k${process.pid}-${randomUUID().slice(0, 8)}-`;
  afterAll(() => killTagged(prefix));

  function startTree(id: string, script: string) {
    const child = spawn('sh', ['-c', script], {
      detached: true,
      stdio: 'ignore',
      env: { PATH: process.env.PATH, SANDGATE_EXEC_ID: id },
    });
    return child;
  }

  it('kills the group, setsid escapees and double-forked orphans', async () => {
    const id = `${prefix}1`;
    const child = startTree(id, 'setsid sleep 700 & (sleep 701 &) ; sleep 702');
    await waitFor('tree', () => taggedPids(id).length >= 4);
    expect(findTaggedProcesses(id).size).toBe(taggedPids(id).length);
    expect(await killExecTree(id, child.pid)).toBe(true);
    expect(taggedPids(id)).toEqual([]);
  });

  it('SIGKILLs processes that ignore SIGTERM after the grace period', async () => {
    const id = `${prefix}2`;
    const child = startTree(id, "trap '' TERM; setsid sh -c \"trap '' TERM; sleep 703\" & sleep 704");
    await waitFor('tree', () => taggedPids(id).length >= 3);
    const started = Date.now();
    expect(await killExecTree(id, child.pid, { graceMs: 300 })).toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    expect(taggedPids(id)).toEqual([]);
  });

  it('kills group members that scrubbed their environment', async () => {
    const id = `${prefix}3`;
    const child = startTree(id, 'env -i /bin/sleep 705 & sleep 706');
    await waitFor('tree', () => taggedPids(id).length >= 2);
    const groupPids = () =>
      fs
        .readdirSync('/proc')
        .filter((e) => /^\d+$/.test(e))
        .filter((e) => readProcStat(Number(e))?.pgrp === child.pid && readProcStat(Number(e))?.state !== 'Z');
    await waitFor('scrubbed child', () => groupPids().length >= 3);
    expect(await killExecTree(id, child.pid)).toBe(true);
    expect(groupPids()).toEqual([]);
  });

  it('does nothing harmful for an unknown exec', async () => {
    expect(await killExecTree(`${prefix}none`, undefined)).toBe(true);
  });
});
