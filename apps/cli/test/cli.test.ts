// The CLI as a process: help, usage errors (exit 2) and an unreachable gateway (exit 1).
import { spawnSync } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const bin = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../bin/sandgate.js');

function sandgate(args: string[], env: Record<string, string> = {}) {
  const r = spawnSync(process.execPath, [bin, ...args], {
    // No diagnostics unless a test asks: SANDGATE_LOG_LEVEL=debug in the caller's environment adds lines to stderr.
    env: { ...process.env, SANDGATE_GATEWAY: '', SANDGATE_LOG_LEVEL: '', ...env },
    input: '',
    encoding: 'utf8',
    timeout: 20_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** A loopback port with nothing listening on it. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe('sandgate CLI', () => {
  it('--help prints usage and exits 0', () => {
    const r = sandgate(['--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('Usage:');
    expect(r.stdout).toContain('sandgate sandbox exec NAME');
  });

  it.each([
    [['sandbox', '--help'], 'sandgate sandbox create'],
    [['sandbox', 'create', '--help'], '--label k=v'],
    [['sandbox', 'exec', 'box', '--help'], '--timeout SECS'],
    [['gateway', '--help'], '--supervisor-endpoint LIST'],
    [['up', '--help'], 'redis-server'],
    [['help', 'sandbox', 'list'], '--selector'],
  ])('%j prints help and exits 0', (args, text) => {
    const r = sandgate(args);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(text);
  });

  it('prints the version', () => {
    const r = sandgate(['--version']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^sandgate \d+\.\d+\.\d+\n$/);
  });

  it.each([
    [[], 'Usage:'],
    [['frobnicate'], "error: unknown command 'frobnicate'"],
    [['sandbox'], 'Usage:'],
    [['sandbox', 'frobnicate'], "error: unknown command 'sandbox frobnicate'"],
    [['--bogus'], "error: unknown option '--bogus'"],
    [['sandbox', 'list', '--bogus'], "error: Unknown option '--bogus'"],
    [['sandbox', 'create', '--env', 'NOEQUALS'], "error: --env 'NOEQUALS' is not KEY=VALUE (missing '=')\nrun 'sandgate sandbox create --help' for usage"],
    [['sandbox', 'get'], 'error: a sandbox NAME is required'],
    [['sandbox', 'delete'], 'error: at least one sandbox NAME is required'],
    [['sandbox', 'exec', 'box'], 'error: a command is required'],
    [['sandbox', 'list', '--limit', 'lots'], 'error: --limit must be an integer'],
    [['--gateway', 'https://gw:443', '--ca', '/nonexistent/ca.pem', 'sandbox', 'list'], 'error: --ca /nonexistent/ca.pem: cannot read it'],
    [['gateway', '--grpc-port', 'x'], 'error: --grpc-port must be an integer'],
  ])('%j is a usage error (exit 2)', (args, text) => {
    const r = sandgate(args);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(text);
  });

  it('reports an unreachable gateway with exit 1', async () => {
    const port = await closedPort();
    for (const args of [['sandbox', 'list'], ['--gateway', `127.0.0.1:${port}`, 'sandbox', 'get', 'x'], ['sandbox', 'exec', 'x', '--', 'true']]) {
      const r = sandgate(args, { SANDGATE_GATEWAY: `http://127.0.0.1:${port}` });
      expect(r.code, args.join(' ')).toBe(1);
      expect(r.stderr).toMatch(new RegExp(`^error: cannot reach the gateway at 127\\.0\\.0\\.1:${port}: .*ECONNREFUSED`));
    }
  });

  it('writes diagnostics as JSON log lines only with SANDGATE_LOG_LEVEL=debug, the error line unchanged', async () => {
    const port = await closedPort();
    for (const level of ['', 'info', 'warn']) {
      const quiet = sandgate(['sandbox', 'list', '-o', 'json'], { SANDGATE_GATEWAY: `http://127.0.0.1:${port}`, SANDGATE_LOG_LEVEL: level });
      expect(quiet.stderr, `level ${level}`).toMatch(/^error: cannot reach the gateway at [^\n]*\n$/);
    }
    const r = sandgate(['sandbox', 'list', '-o', 'json'], { SANDGATE_GATEWAY: `http://127.0.0.1:${port}`, SANDGATE_TOKEN: 'sgt_secret', SANDGATE_LOG_LEVEL: 'debug' });
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    const lines = r.stderr.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(r.stderr).toContain(`error: cannot reach the gateway at 127.0.0.1:${port}: `);
    expect(r.stderr).not.toContain('sgt_secret');
    for (const l of lines) expect(l).toMatchObject({ level: 'debug', component: 'cli', command: 'sandbox list', ts: expect.any(String) });
    expect(lines.find((l) => l.msg === 'connection')).toMatchObject({ endpoint: `127.0.0.1:${port}`, tls: false, token: true });
    expect(lines.find((l) => l.msg === 'command failed')).toMatchObject({
      err: { grpc_code: 14, grpc_status: 'UNAVAILABLE', details: expect.stringContaining('ECONNREFUSED'), stack: expect.any(String) },
    });
  });
});
