// Policy and limits over real gRPC against two in-process replicas on one real Redis: create-time
// refusals, GetSandboxConfig, and UpdateConfig pushing the new policy to a supervisor held by the
// *other* replica (Peer.PushPolicy) and returning only once it confirmed. The supervisor is the
// test itself speaking sandgate.v1.SupervisorGateway/Control to the replica, as a real one does;
// the sandbox records are written straight into Redis, so no compute is involved.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { credentials, makeGenericClientConstructor, Metadata, type ClientDuplexStream, type ServiceError } from '@grpc/grpc-js';
import type { RedisClient } from '@sandgate/store';
import { startReplica, type ReplicaConfig, type RunningReplica } from '@sandgate/gateway';
import { encodeMessage, encodeStruct, messageType, serviceDefinition, type GatewayMessage, type Sandbox, type SupervisorMessage } from '@sandgate/protocols';
import { Code, decodePolicy, encodePolicy, policyHash, type SandboxPolicy } from '@sandgate/core';
import { SandboxStore } from '@sandgate/store';
import { openShellClient, unaryCall, type AnyClient } from '@sandgate/test-harness/grpc-client';
import { redisForFile } from '@sandgate/test-harness/redis-per-file';
import { waitFor } from '@sandgate/test-harness/wait';
import { inProcessReplicaConfig } from './in-process-replica.ts';
import { hashCredential } from '../src/sessions/credentials.ts';

let redis: RedisClient;
let redisUrl = '';
redisForFile((server) => {
  redis = server.client();
  redisUrl = server.url;
});

let stateDir: string;
let r1: RunningReplica;
let r2: RunningReplica;
let c1: AnyClient;
let c2: AnyClient;

function config(replicaId: string): ReplicaConfig {
  return inProcessReplicaConfig(
    { replicaId, redisUrl, stateDir },
    {
      // No reconcile sweep: these records have no compute on purpose.
      workers: false,
      // Policy, not authentication, is under test here (test/e2e/auth.test.ts covers the door).
      auth: false,
    },
  );
}

beforeAll(async () => {
  stateDir = mkdtempSync(path.join(os.tmpdir(), 'sg-policy-'));
  r1 = await startReplica(config('pol-r1'));
  r2 = await startReplica(config('pol-r2'));
  c1 = openShellClient(r1.grpcAddress);
  c2 = openShellClient(r2.grpcAddress);
});
afterAll(async () => {
  c1?.close();
  c2?.close();
  await r1?.close();
  await r2?.close();
  rmSync(stateDir, { recursive: true, force: true });
});

type PolicyInput = { process?: object; filesystem?: object; landlock?: object; network_policies?: Record<string, { endpoints: object[] }> };
const policyBytes = (p: PolicyInput) => encodePolicy({ network_policies: {}, network_middlewares: {}, ...p } as unknown as SandboxPolicy);
const allow = (host: string, port: number, extra: object = {}) => policyBytes({ process: { run_as_user: 'sandbox' }, network_policies: { web: { endpoints: [{ host, port, ...extra }] } } });

async function rejection(p: Promise<unknown>): Promise<ServiceError> {
  try {
    await p;
  } catch (err) {
    return err as ServiceError;
  }
  throw new Error('expected the call to fail');
}

const CREDENTIAL = 'policy-test-credential';

/** A sandbox record as CreateSandbox would have stored it, without compute. */
async function insertSandbox(name: string, policy?: Buffer): Promise<string> {
  const id = randomUUID();
  const sandbox: Sandbox = {
    metadata: { id, name, workspace: 'default', labels: {}, annotations: {}, created_at_ms: Date.now(), resource_version: 0 },
    spec: { environment: {}, providers: [], command: ['sleep', 'infinity'], ...(policy ? { policy } : {}) },
    status: { conditions: [], phase: 1 },
  };
  await new SandboxStore(redis).create(sandbox, hashCredential(CREDENTIAL));
  return id;
}

const SupervisorClient = makeGenericClientConstructor(serviceDefinition('sandgate.v1.SupervisorGateway'), 'SupervisorGateway');

/** The supervisor side of a Control stream, driven by the test. */
class FakeSupervisor {
  readonly received: GatewayMessage[] = [];
  private readonly client: InstanceType<typeof SupervisorClient>;
  private readonly call: ClientDuplexStream<SupervisorMessage, GatewayMessage>;
  constructor(address: string, sandboxId: string) {
    this.client = new SupervisorClient(address, credentials.createInsecure());
    const md = new Metadata();
    md.set('x-sandgate-sandbox-id', sandboxId);
    md.set('x-sandgate-credential', CREDENTIAL);
    this.call = (this.client as unknown as { Control(md: Metadata): ClientDuplexStream<SupervisorMessage, GatewayMessage> }).Control(md);
    this.call.on('data', (m: GatewayMessage) => this.received.push(m));
    this.call.on('error', () => undefined);
    this.call.write({ hello: { sandbox_id: sandboxId, instance_id: randomUUID(), main_pid: 1 } });
  }
  async connected(): Promise<void> {
    await waitFor('hello_ack', async () => this.received.some((m) => m.hello_ack), 10_000, 20);
  }
  updates(): NonNullable<GatewayMessage['policy_update']>[] {
    return this.received.flatMap((m) => (m.policy_update ? [m.policy_update] : []));
  }
  async nextUpdate(after: number): Promise<NonNullable<GatewayMessage['policy_update']>> {
    await waitFor('policy_update', async () => this.updates().length > after, 10_000, 20);
    return this.updates()[after]!;
  }
  applied(revision: number, error = ''): void {
    this.call.write({ policy_applied: { revision, error } });
  }
  close(): void {
    this.call.end();
    this.client.close();
  }
}

const ruleBytes = (rule: object) => encodeMessage(messageType('openshell.sandbox.v1.NetworkPolicyRule'), rule);
const createReq = (spec: object, name = `c-${randomUUID().slice(0, 8)}`) => ({ name, labels: {}, annotations: {}, spec: { environment: {}, providers: [], command: ['true'], ...spec } });

describe('CreateSandbox over gRPC: what sandgate cannot enforce, or is unsafe, is refused by name', () => {
  it.each([
    [{ policy: allow('api.github.com', 443, { rules: [{ allow: { method: 'GET' } }] }) }, 'spec.policy.network_policies["web"].endpoints[0].rules is not supported by sandgate (only L4 host/port/ports/allowed_ips rules are enforced)'],
    [{ policy: allow('api.github.com', 443, { protocol: 'rest' }) }, 'spec.policy.network_policies["web"].endpoints[0].protocol is not supported by sandgate'],
    [{ policy: policyBytes({ landlock: { compatibility: 'best_effort' } }) }, 'spec.policy.landlock is not supported by sandgate'],
    [{ policy: policyBytes({ process: { run_as_user: 'root' } }) }, "policy contains unsafe content: run_as_user must be 'sandbox' or a numeric UID/GID in range [1, 4294967294], got 'root'"],
    [{ policy: allow('*.com', 443) }, "policy contains unsafe content: network policy 'web': TLD wildcard '*.com' is not allowed; use subdomain wildcards like '*.example.com' instead"],
    [{ template: { labels: {}, annotations: {}, environment: {}, resources: encodeStruct({ limits: { memory: '12Q' } }) } }, "spec.template.resources.limits.memory '12Q' is not a valid memory quantity"],
    [{ template: { labels: {}, annotations: {}, environment: {}, resources: encodeStruct({ requests: { cpu: '1' } }) } }, 'spec.template.resources.requests is not supported by sandgate'],
  ])('%#', async (spec, message) => {
    const err = await rejection(unaryCall(c1, 'CreateSandbox', createReq(spec)));
    expect(err.code).toBe(Code.INVALID_ARGUMENT);
    expect(err.details).toContain(message);
  });

  it('a refused create leaves no record behind', async () => {
    const name = `gone-${randomUUID().slice(0, 6)}`;
    await rejection(unaryCall(c1, 'CreateSandbox', createReq({ policy: allow('a.example.com', 1, { tls: 'terminate' }) }, name)));
    const err = await rejection(unaryCall(c1, 'GetSandbox', { name }));
    expect(err.code).toBe(Code.NOT_FOUND);
  });
});

interface ConfigResponse {
  policy?: Buffer;
  version?: number;
  policy_hash?: string;
  settings: Record<string, object>;
  policy_source?: number;
  workspace?: string;
  policy_validation_failure_mode?: string;
  config_revision?: number;
}

describe('GetSandboxConfig', () => {
  it('returns the create-time policy as revision 1 with its hash, and the four setting keys unset', async () => {
    const policy = allow('api.github.com', 443);
    const id = await insertSandbox(`g-${randomUUID().slice(0, 6)}`, policy);
    const res = await unaryCall<ConfigResponse>(c2, 'GetSandboxConfig', { sandbox_id: id });
    expect(Buffer.from(res.policy!).equals(policy)).toBe(true);
    expect(res.version).toBe(1);
    expect(res.policy_hash).toBe(policyHash(decodePolicy(policy)));
    expect(res.policy_hash).toMatch(/^[0-9a-f]{64}$/);
    expect(Object.keys(res.settings).sort()).toEqual(['agent_policy_proposals_enabled', 'ocsf_json_enabled', 'proposal_approval_mode', 'providers_v2_enabled']);
    expect(res).toMatchObject({ policy_source: 1, workspace: 'default', policy_validation_failure_mode: 'fail_closed' });
    // Stable while nothing changes.
    expect((await unaryCall<ConfigResponse>(c1, 'GetSandboxConfig', { sandbox_id: id })).config_revision).toBe(res.config_revision);
  });

  it('no policy: version 0, empty hash, no policy field', async () => {
    const id = await insertSandbox(`n-${randomUUID().slice(0, 6)}`);
    const res = await unaryCall<ConfigResponse>(c1, 'GetSandboxConfig', { sandbox_id: id });
    expect(res.policy).toBeUndefined();
    expect(res.version ?? 0).toBe(0);
    expect(res.policy_hash ?? '').toBe('');
  });

  it('unknown or empty id: NOT_FOUND "sandbox not found"', async () => {
    for (const sandbox_id of ['nope', '']) {
      const err = await rejection(unaryCall(c1, 'GetSandboxConfig', { sandbox_id }));
      expect(err.code).toBe(Code.NOT_FOUND);
      expect(err.details).toBe('sandbox not found');
    }
  });
});

describe('UpdateConfig', () => {
  it('replaces the policy of a live sandbox held by another replica: pushed, confirmed, then answered', async () => {
    const name = `u-${randomUUID().slice(0, 6)}`;
    const id = await insertSandbox(name, allow('a.example.com', 443));
    const sup = new FakeSupervisor(r1.grpcAddress, id);
    try {
      await sup.connected();
      // After hello the replica sends the policy in force (revision 1).
      const first = await sup.nextUpdate(0);
      expect(first.revision).toBe(1);
      sup.applied(1);

      const next = allow('b.example.com', 8443);
      let answered = false;
      const update = unaryCall<{ version?: number; policy_hash?: string }>(c2, 'UpdateConfig', { name, policy: next }).finally(() => (answered = true));
      const pushed = await sup.nextUpdate(1);
      expect(pushed.revision).toBe(2);
      expect(Buffer.from(pushed.policy!).equals(next)).toBe(true);
      // Not answered before the supervisor confirmed.
      await new Promise((r) => setTimeout(r, 200));
      expect(answered).toBe(false);
      sup.applied(2);
      const res = await update;
      expect(res.version).toBe(2);
      expect(res.policy_hash).toBe(policyHash(decodePolicy(next)));

      const config = await unaryCall<ConfigResponse>(c1, 'GetSandboxConfig', { sandbox_id: id });
      expect(config.version).toBe(2);
      expect(config.policy_hash).toBe(res.policy_hash);
      expect(Buffer.from(config.policy!).equals(next)).toBe(true);
      // GetSandbox shows what the supervisor confirmed.
      await waitFor('current_policy_version 2', async () => {
        const sb = await unaryCall<{ sandbox: Sandbox }>(c1, 'GetSandbox', { name });
        return sb.sandbox.status?.current_policy_version === 2;
      }, 5_000, 50);

      // The same policy again is no new revision (and nothing to wait for).
      const again = await unaryCall<{ version?: number }>(c1, 'UpdateConfig', { name, policy: next });
      expect(again.version).toBe(2);
    } finally {
      sup.close();
    }
  });

  it('a supervisor that does not confirm: UNAVAILABLE after the bound, the revision stays stored', async () => {
    const name = `s-${randomUUID().slice(0, 6)}`;
    const id = await insertSandbox(name, allow('a.example.com', 443));
    const sup = new FakeSupervisor(r1.grpcAddress, id);
    try {
      await sup.connected();
      const err = await rejection(unaryCall(c2, 'UpdateConfig', { name, policy: allow('c.example.com', 443) }));
      expect(err.code).toBe(Code.UNAVAILABLE);
      expect(err.details).toMatch(/^policy revision 2 is stored, but the sandbox's supervisor did not confirm applying it within 5s/);
      expect((await unaryCall<ConfigResponse>(c1, 'GetSandboxConfig', { sandbox_id: id })).version).toBe(2);
    } finally {
      sup.close();
    }
  });

  it("a supervisor that cannot apply it: INTERNAL with the supervisor's reason", async () => {
    const name = `e-${randomUUID().slice(0, 6)}`;
    const id = await insertSandbox(name, allow('a.example.com', 443));
    const sup = new FakeSupervisor(r1.grpcAddress, id);
    try {
      await sup.connected();
      const update = rejection(unaryCall(c1, 'UpdateConfig', { name, policy: allow('d.example.com', 443) }));
      const pushed = await sup.nextUpdate(1);
      sup.applied(pushed.revision!, 'proxy refused the rules');
      const err = await update;
      expect(err.code).toBe(Code.INTERNAL);
      expect(err.details).toBe("the sandbox's supervisor could not apply policy revision 2: proxy refused the rules");
    } finally {
      sup.close();
    }
  });

  it('no supervisor connected: stored at once, and sent right after the next hello', async () => {
    const name = `d-${randomUUID().slice(0, 6)}`;
    const id = await insertSandbox(name);
    const next = allow('e.example.com', 443);
    const res = await unaryCall<{ version?: number }>(c1, 'UpdateConfig', { name, policy: next });
    // A sandbox created without a policy takes this one as its baseline (revision 1).
    expect(res.version).toBe(1);
    const sb = await unaryCall<{ sandbox: Sandbox }>(c1, 'GetSandbox', { name });
    expect(Buffer.from(sb.sandbox.spec!.policy!).equals(next)).toBe(true);
    const sup = new FakeSupervisor(r2.grpcAddress, id);
    try {
      await sup.connected();
      const pushed = await sup.nextUpdate(0);
      expect(pushed.revision).toBe(1);
      expect(Buffer.from(pushed.policy!).equals(next)).toBe(true);
      // hello_ack first, then the policy: the supervisor's session is up when it arrives.
      expect(sup.received.findIndex((m) => m.hello_ack)).toBeLessThan(sup.received.findIndex((m) => m.policy_update));
    } finally {
      sup.close();
    }
  });

  it('process, landlock and filesystem removals are refused with upstream messages; unsupported fields by name', async () => {
    const name = `r-${randomUUID().slice(0, 6)}`;
    await insertSandbox(name, policyBytes({ process: { run_as_user: 'sandbox' }, filesystem: { include_workdir: true } }));
    const refused = async (policy: Buffer) => rejection(unaryCall(c1, 'UpdateConfig', { name, policy }));
    let err = await refused(policyBytes({ process: { run_as_user: '2000' }, filesystem: { include_workdir: true } }));
    expect([err.code, err.details]).toEqual([Code.INVALID_ARGUMENT, 'process policy cannot be changed on a live sandbox (applied at startup)']);
    err = await refused(policyBytes({ process: { run_as_user: 'sandbox' } }));
    expect([err.code, err.details]).toEqual([Code.INVALID_ARGUMENT, 'filesystem policy cannot be removed on a live sandbox']);
    err = await refused(policyBytes({ process: { run_as_user: 'sandbox' }, filesystem: { include_workdir: true }, landlock: {} }));
    expect([err.code, err.details]).toEqual([Code.INVALID_ARGUMENT, 'landlock policy cannot be changed on a live sandbox (applied at startup)']);
    err = await refused(policyBytes({ process: { run_as_user: 'sandbox' }, filesystem: { include_workdir: true }, network_policies: { x: { endpoints: [{ host: 'a.example.com', port: 1, access: 'full' }] } } }));
    expect([err.code, err.details]).toEqual([Code.INVALID_ARGUMENT, 'policy.network_policies["x"].endpoints[0].access is not supported by sandgate (only L4 host/port/ports/allowed_ips rules are enforced)']);
  });

  it('merge operations edit the policy in force: add a rule, add to it, remove an endpoint port, remove a rule', async () => {
    const name = `m-${randomUUID().slice(0, 6)}`;
    const id = await insertSandbox(name, allow('a.example.com', 443));
    const merge = (...merge_operations: object[]) => unaryCall<{ version?: number }>(c1, 'UpdateConfig', { name, merge_operations });
    const inForce = async () => decodePolicy(Buffer.from((await unaryCall<ConfigResponse>(c2, 'GetSandboxConfig', { sandbox_id: id })).policy!));
    expect((await merge({ add_rule: { rule_name: 'gh', rule: ruleBytes({ endpoints: [{ host: 'api.github.com', ports: [443, 80] }] }) } })).version).toBe(2);
    expect(Object.keys((await inForce()).network_policies).sort()).toEqual(['gh', 'web']);
    await merge({ add_rule: { rule_name: 'gh', rule: ruleBytes({ endpoints: [{ host: 'api.github.com', ports: [443, 80] }, { host: 'raw.githubusercontent.com', port: 443 }] }) } });
    expect((await inForce()).network_policies.gh!.endpoints.map((e) => e.host)).toEqual(['api.github.com', 'raw.githubusercontent.com']);
    await merge({ remove_endpoint: { host: 'api.github.com', port: 80 } }, { remove_rule: { rule_name: 'web' } });
    const after = await inForce();
    expect(Object.keys(after.network_policies)).toEqual(['gh']);
    expect(after.network_policies.gh!.endpoints[0]).toMatchObject({ host: 'api.github.com', ports: [443] });
    // The merged result faces the same checks as a replacement.
    const err = await rejection(merge({ add_rule: { rule_name: 'tld', rule: ruleBytes({ endpoints: [{ host: '*.com', port: 443 }] }) } }));
    expect(err.details).toBe("policy contains unsafe content: network policy 'tld': TLD wildcard '*.com' is not allowed; use subdomain wildcards like '*.example.com' instead");
  });

  it('request shapes sandgate does not support, and malformed ones', async () => {
    const name = `q-${randomUUID().slice(0, 6)}`;
    await insertSandbox(name);
    const call = (req: object) => rejection(unaryCall(c1, 'UpdateConfig', { name, ...req }));
    const cases: [object, number, string | RegExp][] = [
      [{}, Code.INVALID_ARGUMENT, 'one of policy, setting_key, or merge_operations must be provided'],
      [{ policy: allow('a.example.com', 1), setting_key: 'ocsf_json_enabled' }, Code.INVALID_ARGUMENT, 'policy, setting_key, and merge_operations are mutually exclusive'],
      [{ global: true, policy: allow('a.example.com', 1) }, Code.UNIMPLEMENTED, /^UpdateConfig global=true is not supported by sandgate/],
      [{ setting_key: 'ocsf_json_enabled', setting_value: { bool_value: true } }, Code.UNIMPLEMENTED, "UpdateConfig setting_key 'ocsf_json_enabled': runtime settings are not supported by sandgate"],
      [{ merge_operations: [{ remove_rule: { rule_name: 'web' } }] }, Code.FAILED_PRECONDITION, "merge_operations[0].remove_rule: no rule 'web'"],
      [{ merge_operations: [{}] }, Code.INVALID_ARGUMENT, 'merge_operations[0] is missing an operation'],
      [{ merge_operations: [{ add_allow_rules: { host: 'a.example.com', port: 443, rules: [{ allow: { method: 'GET' } }] } }] }, Code.INVALID_ARGUMENT, /^merge_operations\[0\]\.add_allow_rules is not supported by sandgate/],
      [{ merge_operations: [{ add_rule: { rule_name: 'x', rule: ruleBytes({ endpoints: [{ host: 'localhost', port: 80 }] }) } }] }, Code.INVALID_ARGUMENT, /^proposed rule endpoint host 'localhost'/],
      [{ name: '', policy: allow('a.example.com', 1) }, Code.INVALID_ARGUMENT, 'name is required for sandbox-scoped updates'],
      [{ name: 'no-such-box', policy: allow('a.example.com', 1) }, Code.NOT_FOUND, 'sandbox not found'],
      [{ policy: allow('a.example.com', 1), expected_resource_version: 999 }, Code.ABORTED, /^persist policy revision failed due to concurrent modification \(current resource_version: \d+\)$/],
      [{ policy: allow('a.example.com', 1), annotations: { 'bad key!': 'v' } }, Code.INVALID_ARGUMENT, /^annotation key 'bad key!' is invalid/],
    ];
    for (const [req, code, message] of cases) {
      const err = await call(req);
      expect(err.code, JSON.stringify(req)).toBe(code);
      if (typeof message === 'string') expect(err.details).toBe(message);
      else expect(err.details).toMatch(message);
    }
  });
});
