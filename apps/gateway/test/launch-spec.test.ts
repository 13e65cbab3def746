// What every driver launch gets from a sandbox record: the limits of template.resources, the
// policy in force and the workload user it names (pure; the record shapes CreateSandbox stores).
import { describe, expect, it } from 'vitest';
import { encodeStruct, type Sandbox } from '@sandgate/protocols';
import { encodePolicy, type SandboxPolicy } from '@sandgate/core';
import { policyInForce } from '@sandgate/store';
import { launchSpecFor } from '../src/sandboxes/lifecycle-service.ts';

const policy = (p: object) => encodePolicy({ network_policies: {}, network_middlewares: {}, ...p } as SandboxPolicy);

function sandbox(spec: Partial<NonNullable<Sandbox['spec']>>): Sandbox {
  return {
    metadata: { id: 'sbx-1', name: 'n', labels: {}, annotations: {} },
    spec: { environment: { A: '1' }, providers: [], command: ['sleep', '1'], ...spec },
    status: { conditions: [] },
  };
}

describe('launchSpecFor', () => {
  it('carries limits, policy and the default workload user', () => {
    const p = policy({ network_policies: { web: { endpoints: [{ host: 'a.example.com', port: 443 }] } } });
    const spec = launchSpecFor(
      sandbox({ policy: p, template: { labels: {}, annotations: {}, environment: {}, resources: encodeStruct({ limits: { cpu: '0.25', memory: '64Mi' } }) } }),
      'cred',
      'gw:1',
      '',
    );
    expect(spec.limits).toEqual({ cpuMillis: 250, memoryBytes: 64 * 2 ** 20 });
    expect(Buffer.from(spec.policy!).equals(p)).toBe(true);
    expect(spec.workloadUser).toEqual({ uid: 10001, gid: 10001 });
  });

  it('no policy and no resources: no egress policy, no limits but the driver default pids, user 10001', () => {
    const spec = launchSpecFor(sandbox({}), 'cred', 'gw:1', '');
    expect(spec.policy).toBeUndefined();
    expect(spec.limits).toEqual({});
    expect(spec.workloadUser).toEqual({ uid: 10001, gid: 10001 });
  });

  it('a numeric run_as_user/run_as_group is the workload identity', () => {
    const spec = launchSpecFor(sandbox({ policy: policy({ process: { run_as_user: '2000', run_as_group: '3000' } }) }), 'c', 'g', '');
    expect(spec.workloadUser).toEqual({ uid: 2000, gid: 3000 });
  });

  it('after UpdateConfig, a new run launches with the policy in force, not the create-time one', () => {
    const created = policy({ network_policies: { a: { endpoints: [{ host: 'a.example.com', port: 1 }] } } });
    const updated = policy({ network_policies: { b: { endpoints: [{ host: 'b.example.com', port: 2 }] } } });
    const sb = sandbox({ policy: created });
    const inForce = policyInForce({ sandbox: sb, policy: updated, policyRevision: 2 });
    expect(inForce.revision).toBe(2);
    expect(Buffer.from(launchSpecFor(sb, 'c', 'g', '', inForce.bytes).policy!).equals(updated)).toBe(true);
    expect(policyInForce({ sandbox: sb, policy: null, policyRevision: 0 })).toEqual({ bytes: created, revision: 1 });
  });
});
