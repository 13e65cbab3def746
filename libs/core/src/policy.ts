// SandboxPolicy (openshell.sandbox.v1, carried as bytes in SandboxSpec.policy): decoding, the
// safety validation upstream runs at CreateSandbox and UpdateConfig (openshell-v1-more.md §12,
// same messages), the refusal of everything sandgate does not enforce (never accepted and
// ignored), the live-update rules of UpdateConfig (§11.5), the workload identity a policy asks
// for, and the content hash GetSandboxConfig and UpdateConfig report. Pure: no I/O.
import { createHash } from 'node:crypto';
import { isIP } from 'node:net';
import protobuf from 'protobufjs';
import { decodeMessage, encodeMessage, messageType } from '@sandgate/protocols';
import { SANDBOX_GID, SANDBOX_UID } from '@sandgate/protocols/contract';
import { GatewayError, Code, invalid } from './status.ts';

// ---- the decoded shape (see libs/protocols/src/load.ts: snake_case, absent scalars undefined) --

export interface FilesystemPolicy {
  include_workdir?: boolean;
  read_only: string[];
  read_write: string[];
}

export interface ProcessPolicy {
  run_as_user?: string;
  run_as_group?: string;
}

export interface NetworkEndpoint {
  host?: string;
  port?: number;
  protocol?: string;
  tls?: string;
  enforcement?: string;
  access?: string;
  rules: unknown[];
  allowed_ips: string[];
  ports: number[];
  deny_rules: unknown[];
  allow_encoded_slash?: boolean;
  persisted_queries?: string;
  graphql_persisted_queries: Record<string, unknown>;
  graphql_max_body_bytes?: number;
  path?: string;
  websocket_credential_rewrite?: boolean;
  request_body_credential_rewrite?: boolean;
  advisor_proposed?: boolean;
  credential_signing?: string;
  signing_service?: string;
  signing_region?: string;
  json_rpc_max_body_bytes?: number;
  mcp?: object;
  credential_binding?: object;
  allow_uninspected_credentials?: boolean;
  provider_credentialed?: boolean;
}

export interface NetworkPolicyRule {
  name?: string;
  endpoints: NetworkEndpoint[];
  binaries: { path?: string; harness?: boolean }[];
}

export interface SandboxPolicy {
  version?: number;
  filesystem?: FilesystemPolicy;
  landlock?: { compatibility?: string };
  process?: ProcessPolicy;
  network_policies: Record<string, NetworkPolicyRule>;
  network_middlewares: Record<string, unknown>;
}

export const SANDBOX_POLICY_TYPE = 'openshell.sandbox.v1.SandboxPolicy';

// ---- limits (upstream's, §12.4) ---------------------------------------------------------------

export const MAX_FILESYSTEM_PATHS = 256;
export const MAX_PATH_LENGTH = 4096;
const MIN_SANDBOX_ID = 1n;
const MAX_SANDBOX_ID = 4294967294n;
const RESERVED_RULE_PREFIX = '_provider_';
/** The one user name a policy may ask for besides a number: the sandbox's own unprivileged user. */
export const SANDBOX_USER_NAME = 'sandbox';

// ---- decoding -----------------------------------------------------------------------------------

/**
 * Decodes policy bytes, refusing anything the schema does not know: protobufjs skips unknown
 * fields silently, and a field sandgate cannot even see would be accepted and ignored.
 */
export function decodePolicy(bytes: Uint8Array, where = 'spec.policy'): SandboxPolicy {
  return decodeStrict<SandboxPolicy>(SANDBOX_POLICY_TYPE, bytes, where);
}

/** Decodes `bytes` as `typeName`, refusing fields the schema does not know (see decodePolicy). */
export function decodeStrict<T>(typeName: string, bytes: Uint8Array, where: string): T {
  const type = messageType(typeName);
  const unknown = unknownField(type, bytes, where);
  if (unknown) throw invalid(`${unknown} is not a field sandgate knows: it cannot be enforced`);
  try {
    return decodeMessage<T>(type, bytes);
  } catch (err) {
    throw invalid(`${where} is not a valid ${typeName}: ${err instanceof Error ? err.message : String(err)}`);
  }
}

export function encodePolicy(policy: SandboxPolicy): Buffer {
  return encodeMessage(messageType(SANDBOX_POLICY_TYPE), policy);
}

/** The path of the first field in `bytes` that `type` does not declare (recursing into messages), or null. */
function unknownField(type: protobuf.Type, bytes: Uint8Array, where: string): string | null {
  const reader = protobuf.Reader.create(bytes);
  try {
    while (reader.pos < reader.len) {
      const tag = reader.uint32();
      const id = tag >>> 3;
      const wireType = tag & 7;
      const field = type.fieldsById[id];
      if (!field) return `${where} field number ${id}`;
      field.resolve();
      const sub = field.resolvedType instanceof protobuf.Type ? field.resolvedType : null;
      if (wireType === 2 && (sub || field.map)) {
        const inner = reader.bytes();
        const path = `${where}.${field.name}`;
        const found = field.map ? unknownInMapEntry(field as unknown as protobuf.MapField, inner, path) : unknownField(sub!, inner, path);
        if (found) return found;
      } else {
        reader.skipType(wireType);
      }
    }
  } catch {
    return null; // malformed: decodeMessage reports it
  }
  return null;
}

function unknownInMapEntry(field: protobuf.MapField, entry: Uint8Array, where: string): string | null {
  const value = field.resolvedType instanceof protobuf.Type ? field.resolvedType : null;
  if (!value) return null;
  const reader = protobuf.Reader.create(entry);
  while (reader.pos < reader.len) {
    const tag = reader.uint32();
    if (tag >>> 3 === 2 && (tag & 7) === 2) {
      const found = unknownField(value, reader.bytes(), `${where}[]`);
      if (found) return found;
    } else reader.skipType(tag & 7);
  }
  return null;
}

// ---- safety validation (upstream's validate_sandbox_policy, §12) ------------------------------

const UNSAFE_PREFIX = 'policy contains unsafe content: ';

/** Every safety violation, in upstream's order (§12.2); empty when the policy is safe. */
export function policySafetyViolations(policy: SandboxPolicy): string[] {
  const out: string[] = [];
  if (policy.process) {
    for (const field of ['run_as_user', 'run_as_group'] as const) {
      const value = policy.process[field] ?? '';
      if (value !== '' && parseIdentity(value) === null) {
        out.push(`${field} must be 'sandbox' or a numeric UID/GID in range [1, 4294967294], got '${value}'`);
      }
    }
  }
  const fs = policy.filesystem;
  if (fs) {
    const total = fs.read_only.length + fs.read_write.length;
    if (total > MAX_FILESYSTEM_PATHS) out.push(`too many filesystem paths (${total} > ${MAX_FILESYSTEM_PATHS})`);
    for (const path of [...fs.read_only, ...fs.read_write]) out.push(...pathViolations(path));
    for (const path of fs.read_write) {
      if (/^\/*$/.test(path)) out.push(`read-write path is overly broad: ${path}`);
    }
  }
  for (const [key, rule] of Object.entries(policy.network_policies)) {
    const name = rule.name || key;
    for (const endpoint of rule.endpoints) out.push(...endpointViolations(name, endpoint));
  }
  return out;
}

/** Throws upstream's INVALID_ARGUMENT "policy contains unsafe content: …" listing every violation. */
export function assertPolicySafe(policy: SandboxPolicy): void {
  const violations = policySafetyViolations(policy);
  if (violations.length > 0) throw invalid(UNSAFE_PREFIX + violations.join('; '));
}

/** 'sandbox' → 'sandbox'; a decimal id in [1, 2^32-2] (leading zeros and one '+' allowed) → that id; else null. */
function parseIdentity(value: string): 'sandbox' | number | null {
  if (value === SANDBOX_USER_NAME) return SANDBOX_USER_NAME;
  if (!/^\+?[0-9]+$/.test(value)) return null;
  const n = BigInt(value.replace(/^\+/, ''));
  return n >= MIN_SANDBOX_ID && n <= MAX_SANDBOX_ID ? Number(n) : null;
}

function pathViolations(path: string): string[] {
  const bytes = Buffer.byteLength(path, 'utf8');
  if (bytes > MAX_PATH_LENGTH) {
    const head = Buffer.from(path, 'utf8').subarray(0, 77).toString('utf8');
    return [`path exceeds maximum length (${bytes} > ${MAX_PATH_LENGTH}): ${head}...`];
  }
  const out: string[] = [];
  if (!path.startsWith('/')) out.push(`path must be absolute (start with '/'): ${path}`);
  if (path.split('/').includes('..')) out.push(`path contains '..' traversal component: ${path}`);
  return out;
}

function endpointViolations(name: string, ep: NetworkEndpoint): string[] {
  const out: string[] = [];
  const rule = `network policy '${name}'`;
  const host = ep.host ?? '';
  const tcp = (ep.protocol ?? '').toLowerCase() === 'tcp';
  if (host.trim() === '') {
    if (tcp) out.push(`${rule}: protocol tcp requires a DNS hostname; hostless allowed_ips endpoints are supported only by the forward proxy`);
    else if (ep.allowed_ips.length === 0) out.push(`${rule}: endpoint host must not be empty unless allowed_ips constrains a non-TCP proxy endpoint`);
  } else if (tcp) {
    if (isIP(host) !== 0) {
      out.push(`${rule}: protocol tcp endpoint '${host}' must use a DNS hostname, not an IP literal; direct IP connections bypass policy DNS and are blocked`);
    } else {
      const problem = dnsSelectorProblem(host);
      if (problem) out.push(`${rule}: protocol tcp endpoint has invalid DNS host selector '${host}': ${problem}`);
    }
  }
  const ports = ep.ports.length > 0 ? ep.ports : ep.port ? [ep.port] : [];
  if (ports.length === 0) out.push(`${rule}: endpoint '${host}' must declare at least one port`);
  for (const port of ports) {
    if (port < 1 || port > 65535) out.push(`${rule}: endpoint '${host}' has invalid port ${port}; expected 1..=65535`);
  }
  const labels = host.split('.');
  if ((host.startsWith('*.') || host.startsWith('**.')) && labels.length <= 2) {
    out.push(`${rule}: TLD wildcard '${host}' is not allowed; use subdomain wildcards like '*.example.com' instead`);
  }
  if (badWildcardShape(host)) {
    out.push(
      `${rule}: invalid host wildcard '${host}'; middle DNS label wildcards must be the entire label '*' and recursive '**' is only allowed as the entire first label`,
    );
  }
  const signing = ep.credential_signing ?? '';
  if (signing !== '') {
    if (!['sigv4', 'sigv4:body', 'sigv4:no_body'].includes(signing)) {
      out.push(`${rule}: endpoint '${host}' has unrecognized credential_signing value '${signing}' (expected sigv4, sigv4:body, or sigv4:no_body)`);
    }
    if (!ep.signing_service) out.push(`${rule}: endpoint '${host}' has credential_signing set but signing_service is empty`);
    if (ep.request_body_credential_rewrite) {
      out.push(`${rule}: endpoint '${host}' has both credential_signing and request_body_credential_rewrite set; these options are mutually exclusive`);
    }
  }
  return out;
}

function badWildcardShape(host: string): boolean {
  if (host === '*' || host === '**') return true;
  const [first, ...rest] = host.split('.');
  if (first!.includes('**') && first !== '**') return true;
  return rest.some((label) => label.includes('**') || (label.includes('*') && label !== '*'));
}

/** Why `host` is not a DNS name or host glob (`*.`/`**.` first label, whole-label `*` later), or null. */
export function dnsSelectorProblem(host: string): string | null {
  if (host !== host.trim()) return 'surrounding whitespace';
  if (host.endsWith('.')) return 'trailing dot';
  if (host.length > 253) return 'longer than 253 characters';
  for (const label of host.split('.')) {
    if (label === '') return 'empty label';
    if (label.length > 63) return `label '${label.slice(0, 20)}…' is longer than 63 characters`;
    if (!/^[A-Za-z0-9*_-]+$/.test(label)) return `label '${label}' has characters other than letters, digits, '-', '_' and '*'`;
    if (label.startsWith('-') || label.endsWith('-')) return `label '${label}' starts or ends with '-'`;
  }
  return null;
}

// ---- what sandgate enforces -----------------------------------------------------------------

/**
 * Every part of the policy sandgate does not enforce, each named by its path: only the L4 subset
 * of network rules (host, port/ports, allowed_ips) and the workload identity are enforced.
 */
export function unsupportedPolicyFields(policy: SandboxPolicy, where = 'spec.policy'): string[] {
  const out: string[] = [];
  const l4 = '(only L4 host/port/ports/allowed_ips rules are enforced)';
  if (Object.keys(policy.network_middlewares).length > 0) {
    out.push(`${where}.network_middlewares is not supported by sandgate (egress middleware is not implemented) ${l4}`);
  }
  if (policy.landlock) out.push(`${where}.landlock is not supported by sandgate (Landlock is not enforced; remove the landlock section)`);
  const fs = policy.filesystem;
  if (fs) {
    // A filesystem section without include_workdir asks for a read-only work directory upstream.
    if (!fs.include_workdir) {
      out.push(`${where}.filesystem.include_workdir false is not supported by sandgate (the sandbox's work directory is always writable: set include_workdir: true or leave the filesystem section out)`);
    }
    for (const field of ['read_only', 'read_write'] as const) {
      if (fs[field].length > 0) {
        out.push(`${where}.filesystem.${field} is not supported by sandgate (per-path filesystem rules are not enforced; only include_workdir is accepted)`);
      }
    }
  }
  for (const [key, rule] of Object.entries(policy.network_policies)) {
    const at = `${where}.network_policies[${JSON.stringify(key)}]`;
    if (rule.binaries.length > 0) out.push(`${at}.binaries is not supported by sandgate (rules cannot be scoped to executables) ${l4}`);
    rule.endpoints.forEach((ep, i) => out.push(...unsupportedEndpointFields(ep, `${at}.endpoints[${i}]`, l4)));
  }
  return out;
}

function unsupportedEndpointFields(ep: NetworkEndpoint, at: string, l4: string): string[] {
  const out: string[] = [];
  const refuse = (field: string) => out.push(`${at}.${field} is not supported by sandgate ${l4}`);
  const protocol = (ep.protocol ?? '').toLowerCase();
  if (protocol !== '' && protocol !== 'tcp') refuse('protocol');
  if (ep.tls) refuse('tls');
  if (ep.enforcement && ep.enforcement !== 'enforce') refuse('enforcement');
  if (ep.access) refuse('access');
  if (ep.rules.length > 0) refuse('rules');
  if (ep.deny_rules.length > 0) refuse('deny_rules');
  if (ep.allow_encoded_slash) refuse('allow_encoded_slash');
  if (ep.persisted_queries) refuse('persisted_queries');
  if (Object.keys(ep.graphql_persisted_queries).length > 0) refuse('graphql_persisted_queries');
  if (ep.graphql_max_body_bytes) refuse('graphql_max_body_bytes');
  if (ep.path) refuse('path');
  if (ep.websocket_credential_rewrite) refuse('websocket_credential_rewrite');
  if (ep.request_body_credential_rewrite) refuse('request_body_credential_rewrite');
  for (const field of ['credential_signing', 'signing_service', 'signing_region'] as const) if (ep[field]) refuse(field);
  if (ep.json_rpc_max_body_bytes) refuse('json_rpc_max_body_bytes');
  if (ep.mcp) refuse('mcp');
  if (ep.credential_binding) refuse('credential_binding');
  if (ep.allow_uninspected_credentials) refuse('allow_uninspected_credentials');
  // The proxy decides by the host a client asks for: a hostless endpoint would have nothing to match.
  const host = ep.host ?? '';
  if (host.trim() === '') out.push(`${at}.host is required by sandgate (hostless allowed_ips endpoints are not supported)`);
  else if (isIP(host) === 0) {
    const problem = dnsSelectorProblem(host);
    if (problem) out.push(`${at}.host '${host}' is not a valid host name, IP address or host glob: ${problem}`);
  }
  ep.allowed_ips.forEach((entry, i) => {
    if (!validIpOrCidr(entry)) out.push(`${at}.allowed_ips[${i}] '${entry}' is not a valid IP address or CIDR`);
  });
  return out;
}

function validIpOrCidr(entry: string): boolean {
  const slash = entry.indexOf('/');
  const addr = slash < 0 ? entry : entry.slice(0, slash);
  const family = isIP(addr);
  if (family === 0) return false;
  if (slash < 0) return true;
  const bits = entry.slice(slash + 1);
  if (!/^[0-9]{1,3}$/.test(bits)) return false;
  return Number(bits) <= (family === 4 ? 32 : 128);
}

// ---- the checks, together -------------------------------------------------------------------

/** A `network_policies` key upstream reserves for provider composition (refused from users). */
function reservedKeyError(policy: SandboxPolicy): GatewayError | null {
  const key = Object.keys(policy.network_policies).find((k) => k.startsWith(RESERVED_RULE_PREFIX));
  if (!key) return null;
  return invalid(
    `network_policies key '${key}' uses reserved '${RESERVED_RULE_PREFIX}' prefix for provider composition; use 'openshell policy get <sandbox> --base' for a round-trippable base policy, or use 'openshell policy get <sandbox> --full' to inspect the effective policy including provider entries`,
  );
}

export interface CheckedPolicy {
  policy: SandboxPolicy;
  /** The bytes to store: the client's own, unless a gateway-owned marker had to be cleared. */
  bytes: Buffer;
}

/**
 * Everything CreateSandbox (and UpdateConfig, after its live-update rules) checks on a policy, in
 * upstream's order where upstream has the check: gateway markers cleared, reserved keys, safety
 * (§12); then what sandgate cannot enforce, refused naming each field.
 */
export function checkPolicy(bytes: Uint8Array, where = 'spec.policy', baseline?: SandboxPolicy): CheckedPolicy {
  const policy = decodePolicy(bytes, where);
  let out: Buffer = Buffer.from(bytes);
  // provider_credentialed belongs to the gateway (upstream clears it on every write).
  let marked = false;
  for (const rule of Object.values(policy.network_policies)) {
    for (const ep of rule.endpoints) {
      if (ep.provider_credentialed) {
        ep.provider_credentialed = undefined;
        marked = true;
      }
    }
  }
  if (marked) out = encodePolicy(policy);
  const reserved = reservedKeyError(policy);
  if (reserved) throw reserved;
  if (baseline) assertLiveUpdateAllowed(baseline, policy);
  assertPolicySafe(policy);
  const unsupported = unsupportedPolicyFields(policy, where);
  if (unsupported.length > 0) throw invalid(unsupported.join('; '));
  return { policy, bytes: out };
}

// ---- UpdateConfig: what may change on a live sandbox (§11.5) ----------------------------------

/** Filesystem may only grow, landlock and process never change (presence included). */
export function assertLiveUpdateAllowed(baseline: SandboxPolicy, next: SandboxPolicy): void {
  const base = baseline.filesystem;
  if (base) {
    const fs = next.filesystem;
    if (!fs) throw invalid('filesystem policy cannot be removed on a live sandbox');
    if (Boolean(base.include_workdir) !== Boolean(fs.include_workdir)) throw invalid('filesystem include_workdir cannot be changed on a live sandbox');
    for (const field of ['read_only', 'read_write'] as const) {
      const kept = new Set(fs[field]);
      const removed = base[field].find((p) => !kept.has(p));
      if (removed !== undefined) throw invalid(`filesystem ${field} path '${removed}' cannot be removed on a live sandbox`);
    }
  }
  if (!sameMessage('openshell.sandbox.v1.LandlockPolicy', baseline.landlock, next.landlock)) {
    throw invalid('landlock policy cannot be changed on a live sandbox (applied at startup)');
  }
  if (!sameMessage('openshell.sandbox.v1.ProcessPolicy', baseline.process, next.process)) {
    throw invalid('process policy cannot be changed on a live sandbox (applied at startup)');
  }
}

function sameMessage(typeName: string, a: object | undefined, b: object | undefined): boolean {
  if (!a || !b) return !a && !b;
  const type = messageType(typeName);
  return encodeMessage(type, a).equals(encodeMessage(type, b));
}

// ---- what the policy asks of the workload -----------------------------------------------------

/** The workload's uid/gid: 'sandbox' or unset → SANDBOX_UID/SANDBOX_GID, a number → that id. */
export function workloadUserFor(policy: SandboxPolicy | undefined): { uid: number; gid: number } {
  const pick = (value: string | undefined, fallback: number): number => {
    if (!value) return fallback;
    const id = parseIdentity(value);
    if (id === null) throw new GatewayError(Code.INVALID_ARGUMENT, `policy identity '${value}' is not 'sandbox' or a numeric id in range`);
    return id === SANDBOX_USER_NAME ? fallback : id;
  };
  return { uid: pick(policy?.process?.run_as_user, SANDBOX_UID), gid: pick(policy?.process?.run_as_group, SANDBOX_GID) };
}

// ---- the content hash -----------------------------------------------------------------------

/**
 * 64 lowercase hex digits of a SHA-256 over the policy's encoding with every map's entries in key
 * order, so a map's wire order never changes the hash (the order of repeated fields does, as
 * upstream's). The same function everywhere a hash is reported: GetSandboxConfig, UpdateConfig.
 */
export function policyHash(policy: SandboxPolicy): string {
  const type = messageType(SANDBOX_POLICY_TYPE);
  return createHash('sha256').update(encodeMessage(type, sortMaps(type, policy as unknown as Record<string, unknown>))).digest('hex');
}

function sortMaps(type: protobuf.Type, value: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, val] of Object.entries(value)) {
    const field = type.fields[key];
    if (!field || val === undefined || val === null) {
      out[key] = val;
      continue;
    }
    field.resolve();
    const sub = field.resolvedType instanceof protobuf.Type ? field.resolvedType : null;
    if (field.map) {
      const entries = Object.entries(val as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      out[key] = Object.fromEntries(entries.map(([k, v]) => [k, sub ? sortMaps(sub, v as Record<string, unknown>) : v]));
    } else if (sub && field.repeated) {
      out[key] = (val as Record<string, unknown>[]).map((v) => sortMaps(sub, v));
    } else if (sub) {
      out[key] = sortMaps(sub, val as Record<string, unknown>);
    } else out[key] = val;
  }
  return out;
}
