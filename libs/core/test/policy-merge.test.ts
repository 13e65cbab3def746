import { describe, expect, it } from 'vitest';
import { encodeMessage, messageType } from '@sandgate/protocols';
import { Code, GatewayError, applyMergeOperations, decodePolicy, encodePolicy, type SandboxPolicy } from '@sandgate/core';

const rule = (r: object) => encodeMessage(messageType('openshell.sandbox.v1.NetworkPolicyRule'), r);
const base = decodePolicy(encodePolicy({ network_policies: { web: { endpoints: [{ host: 'a.example.com', ports: [80, 443] }] } } } as unknown as SandboxPolicy));

function refusal(fn: () => unknown): GatewayError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(GatewayError);
    return err as GatewayError;
  }
  throw new Error('expected a GatewayError');
}

describe('merge operations', () => {
  it('remove_endpoint takes one port; the last port takes the endpoint and an empty rule goes', () => {
    const one = applyMergeOperations(base, [{ remove_endpoint: { host: 'A.example.com', port: 80 } }]);
    expect(one.network_policies.web!.endpoints[0]!.ports).toEqual([443]);
    const none = applyMergeOperations(one, [{ remove_endpoint: { rule_name: 'web', host: 'a.example.com', port: 443 } }]);
    expect(none.network_policies).toEqual({});
    expect(base.network_policies.web!.endpoints[0]!.ports).toEqual([80, 443]); // the input is not modified
  });

  it('shape errors with upstream texts, checked before anything is applied', () => {
    const cases: [object, string][] = [
      [{ add_rule: { rule_name: ' ' } }, 'merge_operations[1].add_rule.rule_name is required'],
      [{ add_rule: { rule_name: 'x', rule: rule({ endpoints: [] }) } }, 'merge_operations[1].add_rule.rule must contain at least one endpoint'],
      [{ remove_endpoint: { host: 'a.example.com' } }, 'merge_operations[1].remove_endpoint requires host and non-zero port'],
      [{ remove_rule: {} }, 'merge_operations[1].remove_rule.rule_name is required'],
      [{ add_rule: { rule_name: '_provider_x', rule: rule({ endpoints: [{ host: 'b.example.com', port: 1 }] }) } }, "merge operation add_rule rule_name '_provider_x' uses reserved '_provider_' prefix for provider composition"],
      [{ remove_binary: { rule_name: 'web', binary_path: '/bin/x' } }, 'merge_operations[1].remove_binary is not supported by sandgate (rules cannot be scoped to executables)'],
    ];
    for (const [op, message] of cases) {
      const err = refusal(() => applyMergeOperations(base, [{ remove_rule: { rule_name: 'web' } }, op]));
      expect([err.code, err.message]).toEqual([Code.INVALID_ARGUMENT, message]);
    }
  });

  it('always-blocked hosts and allowed_ips are refused when added', () => {
    for (const host of ['127.0.0.1', '169.254.169.254', 'localhost', '::1', 'metadata.google.internal']) {
      expect(refusal(() => applyMergeOperations(base, [{ add_rule: { rule_name: 'x', rule: rule({ endpoints: [{ host, port: 80 }] }) } }])).message).toMatch(/^proposed rule endpoint host/);
    }
    expect(
      refusal(() => applyMergeOperations(base, [{ add_rule: { rule_name: 'x', rule: rule({ endpoints: [{ host: 'b.example.com', port: 80, allowed_ips: ['127.0.0.0/8'] }] }) } }])).message,
    ).toMatch(/^proposed rule contains always-blocked `allowed_ips` entry '127\.0\.0\.0\/8'/);
  });

  it('an unknown field inside an added rule is refused, not dropped', () => {
    const withUnknown = Buffer.concat([rule({ endpoints: [{ host: 'b.example.com', port: 1 }] }), Buffer.from([0x48, 0x01])]); // field 9
    expect(refusal(() => applyMergeOperations(base, [{ add_rule: { rule_name: 'x', rule: withUnknown } }])).message).toBe(
      'merge_operations[0].add_rule.rule field number 9 is not a field sandgate knows: it cannot be enforced',
    );
  });
});
