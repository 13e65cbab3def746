// `sandbox create --policy FILE`: a policy file in upstream OpenShell's YAML shape (JSON is YAML
// too) → openshell.sandbox.v1.SandboxPolicy bytes. As upstream's CLI, unknown keys and parse
// errors fail here; everything else (what sandgate enforces, safety) is the gateway's to judge,
// so a field sandgate refuses is sent as written and refused by name there. Pure but for the read.
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { encodePolicy, type SandboxPolicy } from '@sandgate/core';
import { UsageError } from './args.ts';

type Obj = Record<string, unknown>;

class PolicyFileError extends Error {}

function fail(at: string, message: string): never {
  throw new PolicyFileError(`${at}: ${message}`);
}

function object(value: unknown, at: string): Obj {
  if (value === null || value === undefined) return {};
  if (typeof value !== 'object' || Array.isArray(value)) fail(at, 'expected a mapping');
  return value as Obj;
}

/** The keys of `value`, refusing any not in `known` (upstream's deny_unknown_fields). */
function fields(value: unknown, at: string, known: readonly string[], hints: Record<string, string> = {}): Obj {
  const o = object(value, at);
  for (const key of Object.keys(o)) {
    if (!known.includes(key)) fail(at, `unknown field '${key}'${hints[key] ? ` (${hints[key]})` : ''}; expected one of ${known.join(', ')}`);
  }
  return o;
}

function str(value: unknown, at: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') fail(at, `expected a string, got ${JSON.stringify(value)}`);
  return value;
}

function uint(value: unknown, at: string, max: number): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > max) fail(at, `expected a whole number 0-${max}, got ${JSON.stringify(value)}`);
  return value;
}

function bool(value: unknown, at: string): boolean | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'boolean') fail(at, `expected true or false, got ${JSON.stringify(value)}`);
  return value;
}

function list<T>(value: unknown, at: string, item: (v: unknown, at: string) => T): T[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) fail(at, 'expected a list');
  return value.map((v, i) => item(v, `${at}[${i}]`));
}

const strings = (value: unknown, at: string) => list(value, at, (v, a) => str(v, a) ?? '');

/** L7 rules: sandgate refuses them at the gateway, so only their presence and shape matter here. */
function l7(value: unknown, at: string): Obj {
  const o = object(value, at);
  return {
    method: str(o.method, `${at}.method`),
    path: str(o.path, `${at}.path`),
    command: str(o.command, `${at}.command`),
    operation_type: str(o.operation_type, `${at}.operation_type`),
    operation_name: str(o.operation_name, `${at}.operation_name`),
    fields: o.fields === undefined ? [] : strings(o.fields, `${at}.fields`),
  };
}

const ENDPOINT_FIELDS = [
  'host', 'path', 'port', 'ports', 'protocol', 'tls', 'enforcement', 'access', 'rules', 'allowed_ips', 'deny_rules',
  'allow_encoded_slash', 'websocket_credential_rewrite', 'request_body_credential_rewrite', 'allow_uninspected_credentials',
  'persisted_queries', 'graphql_persisted_queries', 'graphql_max_body_bytes', 'credential_signing', 'signing_service',
  'signing_region', 'json_rpc', 'mcp',
] as const;

function endpoint(value: unknown, at: string): Obj {
  const e = fields(value, at, ENDPOINT_FIELDS);
  const jsonRpc = e.json_rpc === undefined ? undefined : fields(e.json_rpc, `${at}.json_rpc`, ['max_body_bytes']);
  const mcp = e.mcp === undefined ? undefined : fields(e.mcp, `${at}.mcp`, ['max_body_bytes', 'strict_tool_names', 'allow_all_known_mcp_methods']);
  return {
    host: str(e.host, `${at}.host`),
    path: str(e.path, `${at}.path`),
    port: uint(e.port, `${at}.port`, 65535),
    ports: list(e.ports, `${at}.ports`, (v, a) => uint(v, a, 65535) ?? 0),
    protocol: str(e.protocol, `${at}.protocol`),
    tls: str(e.tls, `${at}.tls`),
    enforcement: str(e.enforcement, `${at}.enforcement`),
    access: str(e.access, `${at}.access`),
    rules: list(e.rules, `${at}.rules`, (v, a) => ({ allow: l7(fields(v, a, ['allow']).allow, `${a}.allow`) })),
    allowed_ips: strings(e.allowed_ips, `${at}.allowed_ips`),
    deny_rules: list(e.deny_rules, `${at}.deny_rules`, l7),
    allow_encoded_slash: bool(e.allow_encoded_slash, `${at}.allow_encoded_slash`),
    websocket_credential_rewrite: bool(e.websocket_credential_rewrite, `${at}.websocket_credential_rewrite`),
    request_body_credential_rewrite: bool(e.request_body_credential_rewrite, `${at}.request_body_credential_rewrite`),
    allow_uninspected_credentials: bool(e.allow_uninspected_credentials, `${at}.allow_uninspected_credentials`),
    persisted_queries: str(e.persisted_queries, `${at}.persisted_queries`),
    graphql_persisted_queries: Object.fromEntries(
      Object.entries(object(e.graphql_persisted_queries, `${at}.graphql_persisted_queries`)).map(([k, v]) => [k, l7(v, `${at}.graphql_persisted_queries.${k}`)]),
    ),
    graphql_max_body_bytes: uint(e.graphql_max_body_bytes, `${at}.graphql_max_body_bytes`, 2 ** 32 - 1),
    credential_signing: str(e.credential_signing, `${at}.credential_signing`),
    signing_service: str(e.signing_service, `${at}.signing_service`),
    signing_region: str(e.signing_region, `${at}.signing_region`),
    json_rpc_max_body_bytes: uint(jsonRpc?.max_body_bytes ?? mcp?.max_body_bytes, `${at}.json_rpc.max_body_bytes`, 2 ** 32 - 1),
    ...(mcp
      ? { mcp: { strict_tool_names: bool(mcp.strict_tool_names, `${at}.mcp.strict_tool_names`), allow_all_known_mcp_methods: bool(mcp.allow_all_known_mcp_methods, `${at}.mcp.allow_all_known_mcp_methods`) } }
      : {}),
  };
}

/** A parsed policy document (upstream's YAML schema) → the SandboxPolicy message. */
export function policyFromDocument(doc: unknown): SandboxPolicy {
  const top = fields(doc, 'policy', ['version', 'filesystem_policy', 'landlock', 'process', 'network_policies', 'network_middlewares'], {
    filesystem: 'the policy file calls it filesystem_policy',
  });
  const policy: Obj = { version: uint(top.version, 'version', 2 ** 32 - 1), network_policies: {}, network_middlewares: {} };
  if (top.filesystem_policy !== undefined) {
    const fs = fields(top.filesystem_policy, 'filesystem_policy', ['include_workdir', 'read_only', 'read_write']);
    policy.filesystem = {
      include_workdir: bool(fs.include_workdir, 'filesystem_policy.include_workdir'),
      read_only: strings(fs.read_only, 'filesystem_policy.read_only'),
      read_write: strings(fs.read_write, 'filesystem_policy.read_write'),
    };
  }
  if (top.landlock !== undefined) {
    policy.landlock = { compatibility: str(fields(top.landlock, 'landlock', ['compatibility']).compatibility, 'landlock.compatibility') };
  }
  if (top.process !== undefined) {
    const p = fields(top.process, 'process', ['run_as_user', 'run_as_group']);
    policy.process = { run_as_user: idString(p.run_as_user, 'process.run_as_user'), run_as_group: idString(p.run_as_group, 'process.run_as_group') };
  }
  for (const [key, value] of Object.entries(object(top.network_policies, 'network_policies'))) {
    const at = `network_policies.${key}`;
    const r = fields(value, at, ['name', 'endpoints', 'binaries']);
    (policy.network_policies as Obj)[key] = {
      name: str(r.name, `${at}.name`),
      endpoints: list(r.endpoints, `${at}.endpoints`, endpoint),
      binaries: list(r.binaries, `${at}.binaries`, (v, a) => {
        const b = fields(v, a, ['path', 'harness']);
        return { path: str(b.path, `${a}.path`) };
      }),
    };
  }
  // Middlewares are refused by the gateway; carried by name so the refusal names them.
  for (const [key, value] of Object.entries(object(top.network_middlewares, 'network_middlewares'))) {
    const m = object(value, `network_middlewares.${key}`);
    (policy.network_middlewares as Obj)[key] = { name: key, middleware: str(m.middleware, `network_middlewares.${key}.middleware`) ?? '' };
  }
  return policy as unknown as SandboxPolicy;
}

/** YAML lets `run_as_user: 1000` be a number; the message field is a string. */
function idString(value: unknown, at: string): string | undefined {
  if (typeof value === 'number' && Number.isInteger(value)) return String(value);
  return str(value, at);
}

/** Reads and converts a policy file; any problem is a UsageError naming the file and the place. */
export function readPolicyFile(file: string, read: (file: string) => string = (f) => readFileSync(f, 'utf8'), command = 'sandbox create'): Buffer {
  let text: string;
  try {
    text = read(file);
  } catch (err) {
    throw new UsageError(`--policy ${file}: cannot read it (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, command);
  }
  let doc: unknown;
  try {
    doc = parse(text);
  } catch (err) {
    throw new UsageError(`--policy ${file} is not valid YAML or JSON: ${(err as Error).message.split('\n')[0]}`, command);
  }
  try {
    return encodePolicy(policyFromDocument(doc));
  } catch (err) {
    if (err instanceof PolicyFileError) throw new UsageError(`--policy ${file}: ${err.message}`, command);
    throw err;
  }
}
