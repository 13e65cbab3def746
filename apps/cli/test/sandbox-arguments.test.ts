// Parsing the sandbox commands' arguments into requests (no gateway involved).
import { describe, expect, it } from 'vitest';
import { UsageError } from '../src/args.ts';
import { parseCreateArgs } from '../src/commands/sandbox-create.ts';
import { provisionTimeoutMs } from '../src/client-config.ts';
import { parseExecArgs } from '../src/commands/sandbox-exec.ts';
import { terminalSize } from '../src/exec-stream.ts';

describe('sandbox create arguments', () => {
  it('maps flags onto the CreateSandbox request', () => {
    const args = parseCreateArgs([
      '--name', 'demo', '--detach', '--env', 'A=1', '--env', 'B=x=y', '--label', 'team=ml', '--image', 'img:1', '--tty', '-o', 'json',
      '--', 'sleep', 'infinity',
    ]);
    expect(args.detach).toBe(true);
    expect(args.json).toBe(true);
    expect(args.request).toEqual({
      name: 'demo',
      labels: { team: 'ml' },
      spec: {
        command: ['sleep', 'infinity'],
        environment: { A: '1', B: 'x=y' },
        template: { image: 'img:1', labels: {}, annotations: {}, environment: {} },
        tty: true,
      },
    });
  });

  it('has sensible defaults', () => {
    const args = parseCreateArgs([]);
    expect(args).toMatchObject({ detach: false, json: false, gateway: undefined });
    expect(args.request).toEqual({ name: undefined, labels: {}, spec: { command: [], environment: {} } });
  });

  it('keeps flag-like words after -- as the command', () => {
    expect(parseCreateArgs(['--', 'sh', '-c', 'x', '--name', 'y']).request.spec!.command).toEqual(['sh', '-c', 'x', '--name', 'y']);
  });

  it.each([
    [['--env', 'NOEQUALS'], "--env 'NOEQUALS' is not KEY=VALUE (missing '=')"],
    [['--label', 'novalue'], "--label 'novalue' is not KEY=VALUE"],
    [['--label', '=v'], 'empty key'],
    [['sleep'], "give the command after '--'"],
    [['-o', 'yaml'], 'unsupported output format'],
    [['--bogus'], "Unknown option '--bogus'"],
  ])('rejects %j', (argv, message) => {
    expect(() => parseCreateArgs(argv)).toThrow(UsageError);
    expect(() => parseCreateArgs(argv)).toThrow(message);
  });

  it('waits SANDGATE_PROVISION_DEADLINE_SECONDS, or its alias SANDGATE_PROVISION_TIMEOUT (default 300)', () => {
    expect(provisionTimeoutMs({})).toBe(300_000);
    expect(provisionTimeoutMs({ SANDGATE_PROVISION_DEADLINE_SECONDS: '7' })).toBe(7_000);
    expect(provisionTimeoutMs({ SANDGATE_PROVISION_TIMEOUT: '5' })).toBe(5_000);
    expect(provisionTimeoutMs({ SANDGATE_PROVISION_DEADLINE_SECONDS: '7', SANDGATE_PROVISION_TIMEOUT: '5' })).toBe(7_000);
    expect(() => provisionTimeoutMs({ SANDGATE_PROVISION_TIMEOUT: 'soon' })).toThrow(UsageError);
    expect(() => provisionTimeoutMs({ SANDGATE_PROVISION_TIMEOUT: 'soon' })).toThrow(/SANDGATE_PROVISION_TIMEOUT must be a positive integer/);
  });
});

describe('sandbox exec arguments', () => {
  it('takes NAME, flags and the command after --', () => {
    expect(parseExecArgs(['box', '--timeout', '10', '--tty', '--workdir', '/w', '--env', 'K=V', '--', 'ls', '-la'])).toEqual({
      name: 'box',
      command: ['ls', '-la'],
      tty: true,
      workdir: '/w',
      environment: { K: 'V' },
      timeoutSeconds: 10,
      gateway: undefined,
      connection: {},
    });
  });

  it('accepts flags after NAME and a command without --', () => {
    expect(parseExecArgs(['--gateway', 'g:1', 'box', 'echo', 'hi'])).toMatchObject({ name: 'box', command: ['echo', 'hi'], gateway: 'g:1', tty: false });
  });

  it.each([
    [[], 'a sandbox NAME is required'],
    [['box'], 'a command is required'],
    [['box', '--'], 'a command is required'],
    [['box', 'echo', '--', 'hi'], "give the whole command after '--'"],
    [['box', '--env', 'NOEQUALS', '--', 'true'], "--env 'NOEQUALS' is not KEY=VALUE"],
    [['box', '--timeout', '-5', '--', 'true'], "Option '--timeout' argument is ambiguous"],
    [['box', '--timeout=-5', '--', 'true'], '--timeout must be an integer'],
  ])('rejects %j', (argv, message) => {
    expect(() => parseExecArgs(argv)).toThrow(UsageError);
    expect(() => parseExecArgs(argv)).toThrow(message);
  });

  it('announces the terminal size, or 80x24 when stdout is not a terminal', () => {
    expect(terminalSize({ isTTY: true, columns: 132, rows: 50 })).toEqual({ cols: 132, rows: 50 });
    expect(terminalSize({ isTTY: false, columns: 132, rows: 50 })).toEqual({ cols: 80, rows: 24 });
    expect(terminalSize({})).toEqual({ cols: 80, rows: 24 });
  });
});
