import { describe, expect, it } from 'vitest';
import { UsageError, normaliseEndpoint, parseCommand, parseInteger, parseKeyValues, parseOutput } from '../src/args.ts';
import { resolveEndpoint } from '../src/client-config.ts';

describe('normaliseEndpoint', () => {
  it.each([
    ['127.0.0.1:8080', '127.0.0.1:8080'],
    ['localhost:9000', 'localhost:9000'],
    ['http://10.0.0.1:9000', '10.0.0.1:9000'],
    ['grpc://gw.example:9000', 'gw.example:9000'],
    ['HTTP://gw:9000/', 'gw:9000'],
    ['http://gw:9000/some/path?q=1', 'gw:9000'],
    ['gw', 'gw:8080'],
    ['http://gw', 'gw:8080'],
    ['http://gw:80', 'gw:80'],
    ['  gw:1234  ', 'gw:1234'],
    ['[::1]:9000', '[::1]:9000'],
    ['[::1]', '[::1]:8080'],
    ['::1', '[::1]:8080'],
    ['unix:/run/sandgate.sock', 'unix:/run/sandgate.sock'],
    ['https://gw:9443', 'gw:9443'],
    ['grpcs://gw:9443/', 'gw:9443'],
    ['https://gw', 'gw:443'],
  ])('%s → %s', (input, expected) => {
    expect(normaliseEndpoint(input)).toBe(expected);
  });

  it.each([
    ['', /empty/],
    ['ftp://gw:21', /unsupported scheme/],
    ['gw:notaport', /port must be an integer/],
    ['gw:0', /between 1 and 65535/],
    ['gw:70000', /between 1 and 65535/],
    [':8080', /no host/],
    ['[::1', /unterminated/],
  ])('rejects %j', (input, message) => {
    expect(() => normaliseEndpoint(input)).toThrow(UsageError);
    expect(() => normaliseEndpoint(input)).toThrow(message);
  });
});

describe('resolveEndpoint', () => {
  it('prefers the flag, then SANDGATE_GATEWAY, then the default', () => {
    expect(resolveEndpoint('grpc://a:1', { SANDGATE_GATEWAY: 'b:2' })).toBe('a:1');
    expect(resolveEndpoint(undefined, { SANDGATE_GATEWAY: 'http://b:2' })).toBe('b:2');
    expect(resolveEndpoint(undefined, {})).toBe('127.0.0.1:8080');
    expect(resolveEndpoint(undefined, { SANDGATE_GATEWAY: '' })).toBe('127.0.0.1:8080');
  });
});

describe('parseKeyValues', () => {
  it('builds a map; values may be empty or contain =; a later duplicate wins', () => {
    expect(parseKeyValues(['A=1', 'B=', 'C=x=y', 'A=2'], '--env')).toEqual({ A: '2', B: '', C: 'x=y' });
    expect(parseKeyValues(undefined, '--env')).toEqual({});
  });

  it('rejects an item without = with a clear message', () => {
    expect(() => parseKeyValues(['NOEQUALS'], '--env')).toThrow(UsageError);
    expect(() => parseKeyValues(['NOEQUALS'], '--env')).toThrow("--env 'NOEQUALS' is not KEY=VALUE (missing '=')");
    expect(() => parseKeyValues(['app'], '--label')).toThrow("--label 'app' is not KEY=VALUE");
  });

  it('rejects an empty key', () => {
    expect(() => parseKeyValues(['=v'], '--label')).toThrow(/empty key/);
  });
});

describe('parseInteger / parseOutput', () => {
  it('parses bounded integers', () => {
    expect(parseInteger('42', '--limit', 0, 100)).toBe(42);
    expect(() => parseInteger('-1', '--limit', 0, 100)).toThrow(/--limit must be an integer/);
    expect(() => parseInteger('1.5', '--limit', 0, 100)).toThrow(/integer/);
    expect(() => parseInteger('101', '--limit', 0, 100)).toThrow(/between 0 and 100/);
  });

  it('accepts only json (and text)', () => {
    expect(parseOutput(undefined)).toBe(false);
    expect(parseOutput('text')).toBe(false);
    expect(parseOutput('json')).toBe(true);
    expect(() => parseOutput('yaml')).toThrow(/unsupported output format 'yaml'/);
  });
});

describe('parseCommand', () => {
  const options = { name: { type: 'string' }, env: { type: 'string', multiple: true }, tty: { type: 'boolean' } } as const;

  it('splits positionals from the words after --', () => {
    const r = parseCommand(['box', '--tty', '--env', 'A=1', '--', 'sh', '-c', 'echo --name x'], options, 'sandbox exec');
    expect(r.positionals).toEqual(['box']);
    expect(r.rest).toEqual(['sh', '-c', 'echo --name x']);
    expect(r.terminated).toBe(true);
    expect(r.values.tty).toBe(true);
    expect(r.values.env).toEqual(['A=1']);
  });

  it('reports unknown flags as usage errors naming the command', () => {
    try {
      parseCommand(['--bogus'], options, 'sandbox create');
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(UsageError);
      expect((err as UsageError).message).toMatch(/Unknown option '--bogus'/);
      expect((err as UsageError).command).toBe('sandbox create');
    }
  });

  it('reports a missing flag value as a usage error', () => {
    expect(() => parseCommand(['--name'], options, 'x')).toThrow(UsageError);
  });
});
