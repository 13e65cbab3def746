// `sandgate pool set|list|delete` and `sandbox create --pool`: their arguments become SetPool and
// CreateSandbox requests (no gateway involved); a pool's resources are byte for byte what
// `sandbox create --cpu/--memory` sends; mistakes are usage errors naming the command.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { POOL_ANNOTATION as CORE_POOL_ANNOTATION, decodePolicy } from '@sandgate/core';
import { decodeStruct, encodeStruct } from '@sandgate/protocols';
import { UsageError } from '../src/args.ts';
import { usageError } from './usage-error.ts';
import { formatPoolTable, parsePoolSize, parseSetArgs, poolJson } from '../src/commands/pool.ts';
import { parseCreateArgs, POOL_ANNOTATION, RETENTION_ANNOTATION, resourcesStruct } from '../src/commands/sandbox-create.ts';
import { readPolicyFile } from '../src/policy-file.ts';

const dir = mkdtempSync(path.join(os.tmpdir(), 'sg-pool-args-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const POLICY = `version: 1
network_policies:
  github:
    endpoints:
      - host: api.github.com
        port: 443
`;
const policyFile = path.join(dir, 'policy.yaml');
writeFileSync(policyFile, POLICY);

describe('pool set arguments', () => {
  it('maps NAME and the flags onto the SetPool request', () => {
    const args = parseSetArgs(['warm', '--size', '3', '--image', 'img:1', '--cpu', '500m', '--memory', '256Mi', '--policy', policyFile, '--auto-match', '-o', 'json', '--gateway', 'g:1']);
    expect(args.json).toBe(true);
    expect(args.connection).toEqual({ gateway: 'g:1' });
    expect(args.request).toMatchObject({ name: 'warm', size: 3, image: 'img:1', auto_match: true });
    expect(decodeStruct(args.request.resources!)).toEqual({ limits: { cpu: '500m', memory: '256Mi' } });
    expect(args.request.policy).toEqual(readPolicyFile(policyFile));
    expect(Object.keys(decodePolicy(args.request.policy!).network_policies)).toEqual(['github']);
  });

  it('sends only what was given: no image, resources or policy by default', () => {
    const args = parseSetArgs(['warm', '--size', '0']);
    expect(args.request).toEqual({ name: 'warm', size: 0 });
    expect(args.json).toBe(false);
  });

  it('builds the resources exactly as sandbox create --cpu/--memory does', () => {
    for (const flags of [['--cpu', '2'], ['--memory', '1Gi'], ['--cpu', '0.5', '--memory', ' 512M '], ['--memory', '256Mi', '--cpu', '250m']]) {
      const pool = parseSetArgs(['warm', '--size', '1', ...flags]).request.resources;
      const create = parseCreateArgs(flags).request.spec?.template?.resources;
      expect(pool, flags.join(' ')).toBeDefined();
      expect(Buffer.compare(pool!, create!), flags.join(' ')).toBe(0);
    }
    expect(resourcesStruct('1', '64Mi', undefined, 'pool set')).toEqual(encodeStruct({ limits: { cpu: '1', memory: '64Mi' } }));
  });

  it.each([
    [['warm'], '--size is required'],
    [['warm', '--size=-1'], "--size must be a non-negative integer (0 to 64), got '-1'"],
    [['warm', '--size', '1.5'], "--size must be a non-negative integer (0 to 64), got '1.5'"],
    [['warm', '--size', 'three'], "--size must be a non-negative integer (0 to 64), got 'three'"],
    [['warm', '--size', ''], '--size must be a non-negative integer'],
    [['warm', '--size', '65'], "--size must be at most 64, got '65'"],
    [['--size', '1'], 'a pool NAME is required'],
    [['a', 'b', '--size', '1'], "unexpected argument 'b'"],
    [['warm', '--size', '1', '--cpu', 'lots'], "--cpu 'lots' is not a valid CPU quantity"],
    [['warm', '--size', '1', '--memory', '1Ki'], "--memory '1Ki' is below the minimum"],
    [['warm', '--size', '1', '--disk', '1Gi'], "Unknown option '--disk'"],
    [['warm', '--size', '1', '--policy', path.join(dir, 'missing.yaml')], 'cannot read it'],
    [['warm', '--size', '1', '-o', 'yaml'], 'unsupported output format'],
  ])('refuses %j', (argv, message) => {
    const err = usageError(() => parseSetArgs(argv));
    expect(err.message).toContain(message);
  });

  it('names pool set in its usage errors (the --help hint)', () => {
    for (const argv of [['warm'], ['warm', '--size', 'x'], ['warm', '--size', '1', '--cpu', '1m'], ['warm', '--size', '1', '--policy', path.join(dir, 'missing.yaml')]]) {
      expect(usageError(() => parseSetArgs(argv)).command, argv.join(' ')).toBe('pool set');
    }
  });

  it('--size -1 (a value that looks like a flag) is refused too', () => {
    expect(() => parseSetArgs(['warm', '--size', '-1'])).toThrow(UsageError);
    expect(() => parseSetArgs(['warm', '--size', '-1'])).toThrow(/--size/);
  });

  it('parsePoolSize takes 0 to 64', () => {
    expect(parsePoolSize('0')).toBe(0);
    expect(parsePoolSize(' 64 ')).toBe(64);
    expect(() => parsePoolSize('-0')).toThrow(/non-negative integer/);
  });
});

describe('sandbox create --pool', () => {
  it('asks for the pool with the sandgate.dev/pool annotation', () => {
    expect(POOL_ANNOTATION).toBe('sandgate.dev/pool');
    expect(POOL_ANNOTATION).toBe(CORE_POOL_ANNOTATION);
    const args = parseCreateArgs(['--pool', 'warm', '--name', 'a', '--', 'sleep', 'infinity']);
    expect(args.request.annotations).toEqual({ [POOL_ANNOTATION]: 'warm' });
    expect(args.request.spec).toEqual({ command: ['sleep', 'infinity'], environment: {} });
  });

  it('keeps the --no-keep annotation beside it', () => {
    expect(parseCreateArgs(['--pool', 'warm', '--no-keep', '--detach']).request.annotations).toEqual({ [POOL_ANNOTATION]: 'warm', [RETENTION_ANNOTATION]: 'ephemeral' });
  });

  it('adds no annotation without it', () => {
    expect(parseCreateArgs([]).request.annotations).toBeUndefined();
  });

  it('refuses an empty pool name', () => {
    const err = usageError(() => parseCreateArgs(['--pool', '']));
    expect(err.message).toContain('--pool needs the name of a pool');
    expect(err.command).toBe('sandbox create');
  });
});

describe('pool output', () => {
  const resources = encodeStruct({ limits: { cpu: '500m', memory: '256Mi' } });
  const policy = readPolicyFile(policyFile);

  it('lists NAME SIZE READY STARTING IMAGE CPU MEMORY GENERATION AUTO-MATCH FAILURES, - for a limit not set', () => {
    const text = formatPoolTable([
      { name: 'warm', size: 2, ready: 1, starting: 1, image: 'img:1', resources, generation: 3, auto_match: true },
      // As the gateway's answer decodes with defaults omitted: zeros and empty strings absent.
      { name: 'cold', generation: 1, resources: encodeStruct({ limits: { memory: '1Gi' } }) },
    ]);
    expect(text).toBe(
      [
        'NAME   SIZE   READY   STARTING   IMAGE   CPU    MEMORY   GENERATION   AUTO-MATCH   FAILURES',
        'warm   2      1       1          img:1   500m   256Mi    3            yes          0',
        'cold   0      0       0          -       -      1Gi      1            no           0',
        '',
      ].join('\n'),
    );
  });

  it('says under the table why a failing pool cannot start members, and when it is tried next', () => {
    const text = formatPoolTable([
      { name: 'ok', size: 1, ready: 1, generation: 1 },
      { name: 'broken', size: 2, image: 'nope:1', generation: 2, consecutive_failures: 3, retry_at_ms: Date.UTC(2026, 11, 5, 12), last_error: 'no such image: nope:1' },
    ]);
    expect(text.split('\n').slice(-2)).toEqual(['pool broken: members cannot start (3 failures in a row), next try 2026-12-05T12:00:00.000Z: no such image: nope:1', '']);
    expect(text).not.toMatch(/pool ok:/);
  });

  it('prints the Pool as proto3 JSON with its resources and policy decoded', () => {
    const json = poolJson({ name: 'warm', size: 2, ready: 2, image: 'img:1', resources, policy, generation: 3, created_at_ms: 1_700_000_000_000 }) as Record<string, unknown>;
    expect(json).toMatchObject({ name: 'warm', size: 2, ready: 2, image: 'img:1', generation: '3', createdAtMs: '1700000000000' });
    expect(json.resources).toEqual({ limits: { cpu: '500m', memory: '256Mi' } });
    expect(json.policy).toMatchObject({ networkPolicies: { github: { endpoints: [{ host: 'api.github.com', port: 443 }] } } });
  });

  it('prints every scalar, zeros included, and no empty bytes field', () => {
    expect(JSON.stringify(poolJson({ name: 'cold' }))).toBe('{"name":"cold","size":0,"image":"","generation":"0","ready":0,"starting":0,"createdAtMs":"0","consecutiveFailures":0,"retryAtMs":"0","lastError":"","autoMatch":false}');
  });

  it('leaves undecodable bytes as base64', () => {
    const json = poolJson({ name: 'odd', resources: Buffer.from([0xff, 0xff]) }) as Record<string, unknown>;
    expect(json.resources).toBe(Buffer.from([0xff, 0xff]).toString('base64'));
  });
});
