// `sandbox create --policy FILE` and `--cpu/--memory`: files in upstream's policy shape become
// SandboxPolicy bytes, quantities the resources Struct upstream's CLI sends; mistakes are usage errors.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { decodePolicy } from '@sandgate/core';
import { decodeStruct } from '@sandgate/protocols';
import { usageError } from './usage-error.ts';
import { parseCreateArgs } from '../src/commands/sandbox-create.ts';
import { readPolicyFile } from '../src/policy-file.ts';
import { sandboxJson } from '../src/output.ts';

const dir = mkdtempSync(path.join(os.tmpdir(), 'sg-policy-file-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
function file(text: string, ext = 'yaml'): string {
  const f = path.join(dir, `p${n++}.${ext}`);
  writeFileSync(f, text);
  return f;
}

const YAML = `version: 1
process:
  run_as_user: sandbox
  run_as_group: 10001
filesystem_policy:
  include_workdir: true
network_policies:
  github:
    name: github
    endpoints:
      - host: api.github.com
        port: 443
      - host: "*.githubusercontent.com"
        ports: [80, 443]
        allowed_ips: [185.199.108.0/22]
`;

describe('--policy FILE', () => {
  it('reads upstream YAML into a SandboxPolicy', () => {
    const policy = decodePolicy(readPolicyFile(file(YAML)));
    expect(policy.version).toBe(1);
    expect(policy.process).toEqual({ run_as_user: 'sandbox', run_as_group: '10001' });
    expect(policy.filesystem?.include_workdir).toBe(true);
    expect(policy.network_policies.github!.endpoints).toEqual([
      expect.objectContaining({ host: 'api.github.com', port: 443, ports: [], allowed_ips: [] }),
      expect.objectContaining({ host: '*.githubusercontent.com', ports: [80, 443], allowed_ips: ['185.199.108.0/22'] }),
    ]);
  });

  it('reads JSON too', () => {
    const policy = decodePolicy(readPolicyFile(file(JSON.stringify({ network_policies: { a: { endpoints: [{ host: 'a.example.com', port: 80 }] } } }), 'json')));
    expect(policy.network_policies.a!.endpoints[0]!.host).toBe('a.example.com');
  });

  it('carries fields sandgate refuses, so the gateway names them', () => {
    const policy = decodePolicy(readPolicyFile(file('network_policies:\n  g:\n    endpoints:\n      - host: a.example.com\n        port: 443\n        protocol: rest\n        rules:\n          - allow: {method: GET, path: /}\n')));
    expect(policy.network_policies.g!.endpoints[0]!.protocol).toBe('rest');
    expect(policy.network_policies.g!.endpoints[0]!.rules).toHaveLength(1);
  });

  it.each([
    ['network_policies:\n  g:\n    endpoints:\n      - hots: a.example.com\n', "network_policies.g.endpoints[0]: unknown field 'hots'"],
    ['filesystem:\n  read_only: [/usr]\n', "policy: unknown field 'filesystem' (the policy file calls it filesystem_policy)"],
    ['network_policies:\n  g:\n    endpoints:\n      - host: a.example.com\n        port: 70000\n', 'network_policies.g.endpoints[0].port: expected a whole number 0-65535, got 70000'],
    ['network_policies: [1]\n', 'network_policies: expected a mapping'],
    ['version: [\n', 'is not valid YAML or JSON'],
  ])('%j is a usage error', (text, message) => {
    expect(usageError(() => readPolicyFile(file(text))).message).toContain(message);
  });

  it('a missing file is a usage error naming it', () => {
    expect(usageError(() => readPolicyFile(path.join(dir, 'nope.yaml'))).message).toMatch(/^--policy .*nope\.yaml: cannot read it \(ENOENT\)$/);
  });
});

describe('--cpu / --memory', () => {
  it('become template.resources {limits: {cpu, memory}} as upstream sends them', () => {
    const args = parseCreateArgs(['--cpu', '0.5', '--memory', '256Mi', '--policy', file(YAML)]);
    const template = args.request.spec!.template!;
    expect(decodeStruct(template.resources!)).toEqual({ limits: { cpu: '0.5', memory: '256Mi' } });
    expect(template.image).toBeUndefined();
    expect(decodePolicy(args.request.spec!.policy!).network_policies.github).toBeDefined();
  });

  it.each([
    [['--cpu', 'lots'], "--cpu 'lots' is not a valid CPU quantity: use cores or millicores, for example 2, 0.5 or 500m"],
    [['--cpu', '1m'], "--cpu '1m' is below the minimum 10m"],
    [['--memory', '12Q'], "--memory '12Q' is not a valid memory quantity"],
    [['--memory', '1Mi'], "--memory '1Mi' is below the minimum 16Mi"],
  ])('%j is a usage error', (argv, message) => {
    expect(usageError(() => parseCreateArgs(argv)).message).toContain(message);
  });
});

describe('sandbox get -o json', () => {
  it('shows the policy and the resources decoded, as proto3 JSON', () => {
    const args = parseCreateArgs(['--cpu', '500m', '--memory', '1Gi', '--policy', file(YAML)]);
    const json = sandboxJson({ metadata: { id: 'i', name: 'n', labels: {}, annotations: {} }, spec: { ...args.request.spec!, providers: [], environment: {}, command: [] } }) as {
      spec: { policy: { networkPolicies: Record<string, { endpoints: object[] }>; process: object }; template: { resources: object } };
    };
    expect(json.spec.policy.process).toEqual({ runAsUser: 'sandbox', runAsGroup: '10001' });
    expect(json.spec.policy.networkPolicies.github!.endpoints[1]).toEqual({ host: '*.githubusercontent.com', allowedIps: ['185.199.108.0/22'], ports: [80, 443] });
    expect(json.spec.template.resources).toEqual({ limits: { cpu: '500m', memory: '1Gi' } });
  });
});
