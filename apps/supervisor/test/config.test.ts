// The supervisor's configuration: what it reads from its environment and credential file.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig, mainArgvFrom, parseEndpoints, stripSupervisorEnv, ConfigError } from '../src/config.ts';

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
