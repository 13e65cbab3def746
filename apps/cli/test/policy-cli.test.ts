// The CLI as a process against a real replica (in-process, real Redis, the local driver):
// `sandbox create --policy/--cpu/--memory` reaches the gateway as upstream's CLI sends it, the
// gateway's refusal names the field and the CLI prints it, and `sandbox get -o json` shows the
// policy and the resources decoded.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseReplicaConfig, startReplica, type RunningReplica } from '@sandgate/gateway';
import { redisForFile } from '@sandgate/test-harness/redis-per-file';
import { replicaBaseEnv } from '@sandgate/test-harness/cluster';

const bin = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../bin/sandgate.js');

let redisUrl = '';
redisForFile((server) => (redisUrl = server.url));
let dir: string;
let replica: RunningReplica;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'sg-policy-cli-'));
  replica = await startReplica({
    ...parseReplicaConfig({}, {}, { hostname: 'test', pid: process.pid, homedir: dir, randomHex: () => '0000' }),
    host: '127.0.0.1',
    grpcPort: 0,
    httpPort: 0,
    peerPort: 0,
    redisUrl,
    replicaId: 'policy-cli',
    driver: 'local',
    stateDir: path.join(dir, 'state'),
    supervisorEndpoint: '',
    advertiseHost: '127.0.0.1',
    workers: true,
    // The policy commands, not authentication, are under test here.
    auth: false,
  });
});
afterAll(async () => {
  await replica?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Runs the CLI (asynchronously: the replica serving it lives in this process). */
function sandgate(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    // An explicit environment: nothing exported in the test's shell (a SANDGATE_*) reaches the CLI.
    const child = spawn(process.execPath, [bin, ...args], { env: { ...replicaBaseEnv(), SANDGATE_GATEWAY: replica.grpcAddress } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d));
    child.stderr.on('data', (d: Buffer) => (stderr += d));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

function file(name: string, text: string): string {
  const f = path.join(dir, name);
  writeFileSync(f, text);
  return f;
}

describe('sandbox create --policy / --cpu / --memory against a gateway', () => {
  it("prints the gateway's INVALID_ARGUMENT naming the refused field, and creates nothing", async () => {
    const f = file('l7.yaml', 'version: 1\nnetwork_policies:\n  github:\n    endpoints:\n      - host: api.github.com\n        port: 443\n        rules:\n          - allow: {method: GET, path: "/repos/**"}\n');
    const r = await sandgate(['sandbox', 'create', '--name', 'refused', '--detach', '--policy', f, '--', 'sleep', 'infinity']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('spec.policy.network_policies["github"].endpoints[0].rules is not supported by sandgate (only L4 host/port/ports/allowed_ips rules are enforced)');
    const get = await sandgate(['sandbox', 'get', 'refused']);
    expect(get.code).not.toBe(0);
    expect(get.stderr).toContain('not found');
  });

  it('an unsafe policy gets upstream\'s "policy contains unsafe content" message', async () => {
    const f = file('root.yaml', 'version: 1\nprocess:\n  run_as_user: root\n');
    const r = await sandgate(['sandbox', 'create', '--detach', '--policy', f, '--', 'true']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("policy contains unsafe content: run_as_user must be 'sandbox' or a numeric UID/GID in range [1, 4294967294], got 'root'");
  });

  it('a bad file and a bad quantity are usage errors (exit 2) before any call', async () => {
    const missing = await sandgate(['sandbox', 'create', '--policy', path.join(dir, 'nope.yaml'), '--', 'true']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('nope.yaml: cannot read it (ENOENT)');
    const cpu = await sandgate(['sandbox', 'create', '--cpu', 'fast', '--', 'true']);
    expect(cpu.code).toBe(2);
    expect(cpu.stderr).toContain("--cpu 'fast' is not a valid CPU quantity");
  });

  it('a sandbox created with them shows both in get -o json', async () => {
    const f = file('ok.yaml', 'version: 1\nprocess:\n  run_as_user: sandbox\nnetwork_policies:\n  github:\n    endpoints:\n      - host: api.github.com\n        port: 443\n');
    const created = await sandgate(['sandbox', 'create', '--name', 'limited', '--detach', '--policy', f, '--cpu', '0.5', '--memory', '256Mi', '--', 'sleep', 'infinity']);
    expect(created.stderr).toBe('');
    expect(created.code).toBe(0);
    try {
      const get = await sandgate(['sandbox', 'get', 'limited', '-o', 'json']);
      expect(get.code).toBe(0);
      const json = JSON.parse(get.stdout) as { spec: { policy: unknown; template: { resources: unknown } } };
      expect(json.spec.policy).toEqual({ version: 1, process: { runAsUser: 'sandbox' }, networkPolicies: { github: { endpoints: [{ host: 'api.github.com', port: 443 }] } } });
      expect(json.spec.template.resources).toEqual({ limits: { cpu: '0.5', memory: '256Mi' } });
      const text = await sandgate(['sandbox', 'get', 'limited']);
      expect(text.stdout).toContain('cpu 500m, memory 256Mi');
      expect(text.stdout).toContain('api.github.com:443');

      const inForce = await sandgate(['sandbox', 'policy', 'limited', '-o', 'json']);
      expect(inForce.code).toBe(0);
      expect(JSON.parse(inForce.stdout)).toMatchObject({ version: 1, policy: { networkPolicies: { github: { endpoints: [{ host: 'api.github.com', port: 443 }] } } } });
      // Replaced while stopped (no supervisor to wait for): the next run launches with it.
      expect((await sandgate(['sandbox', 'stop', 'limited'])).code).toBe(0);
      const next = file('next.yaml', 'version: 1\nprocess:\n  run_as_user: sandbox\nnetwork_policies:\n  pypi:\n    endpoints:\n      - host: pypi.org\n        ports: [443]\n');
      const set = await sandgate(['sandbox', 'policy', 'limited', '--policy', next]);
      expect(set.stderr).toBe('');
      expect(set.stdout).toMatch(/^policy revision 2 in force \(hash [0-9a-f]{12}\)\n$/);
      const shown = await sandgate(['sandbox', 'policy', 'limited']);
      expect(shown.stdout).toMatch(/^revision 2 \(hash [0-9a-f]{12}\)\n/);
      expect(shown.stdout).toContain('pypi.org');
      expect((await sandgate(['sandbox', 'get', 'limited'])).stdout).toContain('pypi.org:443 (policy revision 2)');
      // process is immutable on a live sandbox: upstream's message, printed by the CLI.
      const root = file('uid.yaml', 'version: 1\nprocess:\n  run_as_user: "2000"\n');
      const refused = await sandgate(['sandbox', 'policy', 'limited', '--policy', root]);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain('process policy cannot be changed on a live sandbox (applied at startup)');
    } finally {
      await sandgate(['sandbox', 'delete', 'limited']);
    }
  });
});
