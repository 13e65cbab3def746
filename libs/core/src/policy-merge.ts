// UpdateConfig merge_operations (openshell-v1-more.md §11.6) for the part of a policy sandgate
// enforces: add a network rule (or endpoints to an existing one), remove an endpoint's port,
// remove a rule. The L7 and binary operations edit what sandgate refuses, so they are refused by
// name. The merged policy then goes through the same checks as a replacement. Pure.
import { isIP } from 'node:net';
import { GatewayError, Code, invalid } from './status.ts';
import { decodeStrict, type NetworkEndpoint, type NetworkPolicyRule, type SandboxPolicy } from './policy.ts';

export interface MergeOperation {
  add_rule?: { rule_name?: string; rule?: Uint8Array };
  remove_endpoint?: { rule_name?: string; host?: string; port?: number };
  remove_rule?: { rule_name?: string };
  add_deny_rules?: { host?: string; port?: number; deny_rules?: unknown[] };
  add_allow_rules?: { host?: string; port?: number; rules?: unknown[] };
  remove_binary?: { rule_name?: string; binary_path?: string };
}

const RESERVED_PREFIX = '_provider_';
const METADATA_HOSTS = new Set(['localhost', 'metadata', 'metadata.google.internal', 'metadata.azure.com', 'instance-data', 'instance-data.ec2.internal']);

/** Loopback, link-local or unspecified: never reachable from a sandbox, whatever the policy says. */
function alwaysBlockedAddress(addr: string): boolean {
  const family = isIP(addr);
  if (family === 4) {
    const [a, b] = addr.split('.').map(Number);
    return a === 127 || a === 0 || (a === 169 && b === 254);
  }
  if (family === 6) {
    const lower = addr.toLowerCase();
    return lower === '::1' || lower === '::' || /^fe[89ab]/.test(lower) || lower.startsWith('::ffff:127.') || lower.startsWith('::ffff:169.254.');
  }
  return false;
}

function decodeRule(bytes: Uint8Array, at: string): NetworkPolicyRule {
  return decodeStrict<NetworkPolicyRule>('openshell.sandbox.v1.NetworkPolicyRule', bytes, at);
}

const portsOf = (e: NetworkEndpoint) => (e.ports.length > 0 ? e.ports : e.port ? [e.port] : []);
const sameHost = (a: string | undefined, b: string) => (a ?? '').toLowerCase() === b.toLowerCase();

/** `policy` with `ops` applied in order; INVALID_ARGUMENT / FAILED_PRECONDITION with the operation's index. */
export function applyMergeOperations(policy: SandboxPolicy, ops: MergeOperation[]): SandboxPolicy {
  // Shapes first, all of them (upstream checks every operation before merging any).
  const rules = ops.map((op, i) => {
    const at = `merge_operations[${i}]`;
    if (op.add_rule) {
      const name = (op.add_rule.rule_name ?? '').trim();
      if (!name) throw invalid(`${at}.add_rule.rule_name is required`);
      const rule = op.add_rule.rule ? decodeRule(op.add_rule.rule, `${at}.add_rule.rule`) : undefined;
      if (!rule || rule.endpoints.length === 0) throw invalid(`${at}.add_rule.rule must contain at least one endpoint`);
      return rule;
    }
    if (op.remove_endpoint) {
      if (!(op.remove_endpoint.host ?? '').trim() || !op.remove_endpoint.port) throw invalid(`${at}.remove_endpoint requires host and non-zero port`);
      return undefined;
    }
    if (op.remove_rule) {
      if (!(op.remove_rule.rule_name ?? '').trim()) throw invalid(`${at}.remove_rule.rule_name is required`);
      return undefined;
    }
    if (op.add_deny_rules) throw invalid(`${at}.add_deny_rules is not supported by sandgate (L7 rules are not enforced; only L4 host/port/ports/allowed_ips rules are)`);
    if (op.add_allow_rules) throw invalid(`${at}.add_allow_rules is not supported by sandgate (L7 rules are not enforced; only L4 host/port/ports/allowed_ips rules are)`);
    if (op.remove_binary) throw invalid(`${at}.remove_binary is not supported by sandgate (rules cannot be scoped to executables)`);
    throw invalid(`${at} is missing an operation`);
  });
  // Server rules on what is added.
  ops.forEach((op, i) => {
    if (!op.add_rule) return;
    const name = op.add_rule.rule_name!.trim();
    if (name.startsWith(RESERVED_PREFIX)) {
      throw invalid(`merge operation add_rule rule_name '${name}' uses reserved '${RESERVED_PREFIX}' prefix for provider composition`);
    }
    for (const ep of rules[i]!.endpoints) {
      const host = (ep.host ?? '').trim();
      if (METADATA_HOSTS.has(host.toLowerCase()) || alwaysBlockedAddress(host)) {
        throw invalid(`proposed rule endpoint host '${host}' is loopback, link-local, unspecified or a cloud metadata service: it is always blocked and can never be reached`);
      }
      for (const entry of ep.allowed_ips) {
        if (alwaysBlockedAddress(entry.split('/')[0]!)) {
          throw invalid(`proposed rule contains always-blocked \`allowed_ips\` entry '${entry}'; loopback, link-local and unspecified addresses are never reachable`);
        }
      }
    }
  });
  const out: SandboxPolicy = { ...policy, network_policies: { ...policy.network_policies } };
  ops.forEach((op, i) => {
    if (op.add_rule) {
      const name = op.add_rule.rule_name!.trim();
      const existing = out.network_policies[name];
      const rule = rules[i]!;
      if (!existing) {
        out.network_policies[name] = rule;
        return;
      }
      // Merge: endpoints already covered (same host and ports) are not repeated.
      const key = (e: NetworkEndpoint) => `${(e.host ?? '').toLowerCase()}|${portsOf(e).join(',')}|${[...e.allowed_ips].sort().join(',')}`;
      const have = new Set(existing.endpoints.map(key));
      out.network_policies[name] = {
        ...existing,
        endpoints: [...existing.endpoints, ...rule.endpoints.filter((e) => !have.has(key(e)))],
        binaries: [...existing.binaries, ...rule.binaries],
      };
    } else if (op.remove_endpoint) {
      const host = op.remove_endpoint.host!.trim();
      const port = op.remove_endpoint.port!;
      const only = (op.remove_endpoint.rule_name ?? '').trim();
      let removed = false;
      for (const [name, rule] of Object.entries(out.network_policies)) {
        if (only && name !== only) continue;
        const endpoints = rule.endpoints.flatMap((e) => {
          if (!sameHost(e.host, host) || !portsOf(e).includes(port)) return [e];
          removed = true;
          const rest = portsOf(e).filter((p) => p !== port);
          return rest.length > 0 ? [{ ...e, port: undefined, ports: rest }] : [];
        });
        if (endpoints.length > 0) out.network_policies[name] = { ...rule, endpoints };
        else delete out.network_policies[name];
      }
      if (!removed) throw new GatewayError(Code.FAILED_PRECONDITION, `merge_operations[${i}].remove_endpoint: no endpoint ${host}:${port}${only ? ` in rule '${only}'` : ''}`);
    } else if (op.remove_rule) {
      const name = op.remove_rule.rule_name!.trim();
      if (!out.network_policies[name]) throw new GatewayError(Code.FAILED_PRECONDITION, `merge_operations[${i}].remove_rule: no rule '${name}'`);
      delete out.network_policies[name];
    }
  });
  return out;
}
