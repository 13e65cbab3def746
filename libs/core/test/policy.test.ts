import { describe, expect, it } from 'vitest';
import {
  Code,
  GatewayError,
  assertLiveUpdateAllowed,
  checkPolicy,
  decodePolicy,
  encodePolicy,
  policyHash,
  validateCreate,
  workloadUserFor,
  type SandboxPolicy,
} from '@sandgate/core';

/** The error `fn` throws; fails the test when it throws nothing or something else. */
function refusal(fn: () => unknown): GatewayError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(GatewayError);
    return err as GatewayError;
  }
  throw new Error('expected a GatewayError');
}

type PolicyInput = Partial<Omit<SandboxPolicy, 'network_policies'>> & { network_policies?: Record<string, { name?: string; endpoints?: object[]; binaries?: object[] }> };

const bytes = (p: PolicyInput) => encodePolicy(p as SandboxPolicy);
const check = (p: PolicyInput) => checkPolicy(bytes(p));
const refuse = (p: PolicyInput) => refusal(() => check(p));
const web = (endpoint: object) => ({ network_policies: { github: { endpoints: [{ host: 'api.github.com', port: 443, ...endpoint }] } } });

describe('policy: what sandgate enforces is accepted', () => {
  it('an L4 policy with hosts, globs, ports and allowed_ips', () => {
    const { policy } = check({
      version: 1,
      process: { run_as_user: 'sandbox', run_as_group: '10001' },
      filesystem: { include_workdir: true, read_only: [], read_write: [] },
      network_policies: {
        github: { endpoints: [{ host: 'api.github.com', port: 443 }, { host: '*.githubusercontent.com', ports: [443, 80] }] },
        internal: { name: 'corp', endpoints: [{ host: '**.corp.example.com', port: 8080, protocol: 'TCP', allowed_ips: ['10.0.0.0/8', 'fd00::1'] }] },
        ip: { endpoints: [{ host: '10.1.2.3', port: 22, enforcement: 'enforce' }] },
      },
    });
    expect(Object.keys(policy.network_policies)).toEqual(['github', 'internal', 'ip']);
  });

  it('an empty but present policy (deny all egress)', () => {
    expect(checkPolicy(Buffer.alloc(0)).policy.network_policies).toEqual({});
  });

  it('clears the gateway-owned provider_credentialed marker instead of storing it', () => {
    const { bytes: stored } = check(web({ provider_credentialed: true }));
    expect(decodePolicy(stored).network_policies.github!.endpoints[0]!.provider_credentialed).toBeUndefined();
  });
});

describe('policy: every field sandgate does not enforce is refused by name', () => {
  const cases: [string, PolicyInput, string][] = [
    ['rules', web({ rules: [{ allow: { method: 'GET', path: '/' } }] }), 'spec.policy.network_policies["github"].endpoints[0].rules is not supported by sandgate (only L4 host/port/ports/allowed_ips rules are enforced)'],
    ['deny_rules', web({ deny_rules: [{ method: 'POST' }] }), '.endpoints[0].deny_rules is not supported'],
    ['access', web({ access: 'read-only' }), '.endpoints[0].access is not supported'],
    ['protocol rest', web({ protocol: 'rest' }), '.endpoints[0].protocol is not supported'],
    ['tls', web({ tls: 'terminate' }), '.endpoints[0].tls is not supported'],
    ['enforcement audit', web({ enforcement: 'audit' }), '.endpoints[0].enforcement is not supported'],
    ['allow_encoded_slash', web({ allow_encoded_slash: true }), '.allow_encoded_slash is not supported'],
    ['persisted_queries', web({ persisted_queries: 'deny' }), '.persisted_queries is not supported'],
    ['graphql_persisted_queries', web({ graphql_persisted_queries: { q: { operation_type: 'query' } } }), '.graphql_persisted_queries is not supported'],
    ['graphql_max_body_bytes', web({ graphql_max_body_bytes: 10 }), '.graphql_max_body_bytes is not supported'],
    ['path', web({ path: '/api/**' }), '.endpoints[0].path is not supported'],
    ['websocket_credential_rewrite', web({ websocket_credential_rewrite: true }), '.websocket_credential_rewrite is not supported'],
    ['request_body_credential_rewrite', web({ request_body_credential_rewrite: true }), '.request_body_credential_rewrite is not supported'],
    ['credential_signing', web({ credential_signing: 'sigv4', signing_service: 's3' }), '.credential_signing is not supported'],
    ['signing_region', web({ signing_region: 'eu-west-1' }), '.signing_region is not supported'],
    ['json_rpc_max_body_bytes', web({ json_rpc_max_body_bytes: 5 }), '.json_rpc_max_body_bytes is not supported'],
    ['mcp', web({ mcp: { strict_tool_names: true } }), '.endpoints[0].mcp is not supported'],
    ['credential_binding', web({ credential_binding: { provider: 'gh' } }), '.credential_binding is not supported'],
    ['allow_uninspected_credentials', web({ allow_uninspected_credentials: true }), '.allow_uninspected_credentials is not supported'],
    ['binaries', { network_policies: { github: { endpoints: [{ host: 'a.example.com', port: 1 }], binaries: [{ path: '/usr/bin/git' }] } } }, 'spec.policy.network_policies["github"].binaries is not supported'],
    ['network_middlewares', { network_middlewares: { m: { middleware: 'x' } } }, 'spec.policy.network_middlewares is not supported'],
    ['landlock', { landlock: { compatibility: 'best_effort' } }, 'spec.policy.landlock is not supported'],
    ['read_only', { filesystem: { include_workdir: true, read_only: ['/usr'], read_write: [] } }, 'spec.policy.filesystem.read_only is not supported'],
    ['read_write', { filesystem: { include_workdir: true, read_only: [], read_write: ['/tmp'] } }, 'spec.policy.filesystem.read_write is not supported'],
    ['include_workdir false', { filesystem: { read_only: [], read_write: [] } }, 'spec.policy.filesystem.include_workdir false is not supported by sandgate'],
    ['hostless allowed_ips', web({ host: '', allowed_ips: ['10.0.0.1'] }), '.endpoints[0].host is required by sandgate'],
    ['bad allowed_ips', web({ allowed_ips: ['10.0.0.0/33'] }), ".endpoints[0].allowed_ips[0] '10.0.0.0/33' is not a valid IP address or CIDR"],
    ['bad host', web({ host: 'exa mple.com' }), ".endpoints[0].host 'exa mple.com' is not a valid host name"],
  ];
  for (const [what, policy, message] of cases) {
    it(what, () => {
      const err = refuse(policy);
      expect(err.code).toBe(Code.INVALID_ARGUMENT);
      expect(err.message).toContain(message);
    });
  }

  it('names every refused field at once', () => {
    const err = refuse(web({ tls: 'terminate', access: 'full' }));
    expect(err.message).toContain('.tls is not supported');
    expect(err.message).toContain('.access is not supported');
  });

  it('a field the schema does not know (a newer client) is refused, not dropped', () => {
    // field 7 of SandboxPolicy (varint 1), which this schema does not declare
    const err = refusal(() => checkPolicy(Buffer.concat([bytes(web({})), Buffer.from([0x38, 0x01])])));
    expect(err.code).toBe(Code.INVALID_ARGUMENT);
    expect(err.message).toBe('spec.policy field number 7 is not a field sandgate knows: it cannot be enforced');
    // ... and inside an endpoint (NetworkEndpoint field 40, varint): map entry → rule → endpoint.
    const ld = (tag: number, body: Buffer) => Buffer.concat([Buffer.from([tag, body.length]), body]);
    const endpoint = Buffer.concat([ld(0x0a, Buffer.from('a.example.com')), Buffer.from([0x10, 0x01, 0xc0, 0x02, 0x01])]);
    const entry = Buffer.concat([ld(0x0a, Buffer.from('k')), ld(0x12, ld(0x12, endpoint))]);
    const deep = refusal(() => checkPolicy(ld(0x2a, entry)));
    expect(deep.message).toBe('spec.policy.network_policies[].endpoints field number 40 is not a field sandgate knows: it cannot be enforced');
  });

  it('bytes that are not a SandboxPolicy', () => {
    const err = refusal(() => checkPolicy(Buffer.from([0x12, 0x05, 0x01])));
    expect(err.code).toBe(Code.INVALID_ARGUMENT);
    expect(err.message).toMatch(/^spec\.policy is not a valid openshell\.sandbox\.v1\.SandboxPolicy/);
  });

  it('reserved _provider_ rule keys (upstream message)', () => {
    const err = refuse({ network_policies: { _provider_gh: { endpoints: [{ host: 'a.example.com', port: 1 }] } } });
    expect(err.message).toMatch(/^network_policies key '_provider_gh' uses reserved '_provider_' prefix for provider composition; use 'openshell policy get <sandbox> --base'/);
  });
});

describe('policy safety validation: upstream texts (openshell-v1-more.md §12)', () => {
  it("the spec's worked example, every violation in order", () => {
    const err = refuse({ process: { run_as_user: 'root' }, filesystem: { read_only: ['usr/lib'], read_write: ['/'] } });
    expect(err.code).toBe(Code.INVALID_ARGUMENT);
    expect(err.message).toBe(
      "policy contains unsafe content: run_as_user must be 'sandbox' or a numeric UID/GID in range [1, 4294967294], got 'root'; path must be absolute (start with '/'): usr/lib; read-write path is overly broad: /",
    );
  });

  it('identities: root, 0, the sentinel and names are refused; sandbox and ids in range pass', () => {
    for (const bad of ['0', 'root', 'nobody', '4294967295', '99999999999', '-1', '0x10', ' 5', '']) {
      if (bad === '') continue; // empty = omitted
      const err = refuse({ process: { run_as_group: bad } });
      expect(err.message).toBe(`policy contains unsafe content: run_as_group must be 'sandbox' or a numeric UID/GID in range [1, 4294967294], got '${bad}'`);
    }
    for (const good of ['sandbox', '1', '+1000', '0010001', '4294967294']) check({ process: { run_as_user: good, run_as_group: good } });
  });

  it('paths: traversal, length, count', () => {
    expect(refuse({ filesystem: { read_only: ['/a/../b'], read_write: [] } }).message).toBe(
      "policy contains unsafe content: path contains '..' traversal component: /a/../b",
    );
    const long = '/' + 'x'.repeat(4100);
    expect(refuse({ filesystem: { read_only: [long], read_write: [] } }).message).toBe(
      `policy contains unsafe content: path exceeds maximum length (4101 > 4096): ${long.slice(0, 77)}...`,
    );
    const many = Array.from({ length: 257 }, (_, i) => `/p${i}`);
    expect(refuse({ filesystem: { read_only: many, read_write: [] } }).message).toBe('policy contains unsafe content: too many filesystem paths (257 > 256)');
    expect(refuse({ filesystem: { read_only: [], read_write: [''] } }).message).toBe(
      "policy contains unsafe content: path must be absolute (start with '/'): ; read-write path is overly broad: ",
    );
  });

  it('endpoints: TLD wildcards, wildcard shape, ports, tcp hosts', () => {
    const msg = (ep: object, name = 'github') => refuse({ network_policies: { [name]: { endpoints: [{ host: 'api.github.com', port: 443, ...ep }] } } }).message;
    expect(msg({ host: '*.com' })).toBe(
      "policy contains unsafe content: network policy 'github': TLD wildcard '*.com' is not allowed; use subdomain wildcards like '*.example.com' instead",
    );
    expect(msg({ host: '**.org' })).toContain("TLD wildcard '**.org' is not allowed");
    expect(msg({ host: '*' })).toBe(
      "policy contains unsafe content: network policy 'github': invalid host wildcard '*'; middle DNS label wildcards must be the entire label '*' and recursive '**' is only allowed as the entire first label",
    );
    expect(msg({ host: 'a.b*.example.com' })).toContain("invalid host wildcard 'a.b*.example.com'");
    expect(msg({ port: 0 })).toBe("policy contains unsafe content: network policy 'github': endpoint 'api.github.com' must declare at least one port");
    expect(msg({ ports: [443, 70000] })).toBe(
      "policy contains unsafe content: network policy 'github': endpoint 'api.github.com' has invalid port 70000; expected 1..=65535",
    );
    expect(msg({ host: '' })).toBe(
      "policy contains unsafe content: network policy 'github': endpoint host must not be empty unless allowed_ips constrains a non-TCP proxy endpoint",
    );
    expect(msg({ protocol: 'tcp', host: '10.0.0.1' })).toContain("protocol tcp endpoint '10.0.0.1' must use a DNS hostname, not an IP literal");
    expect(msg({ protocol: 'tcp', host: 'bad host' })).toContain("protocol tcp endpoint has invalid DNS host selector 'bad host'");
    // The rule's own name wins over its key.
    expect(refuse({ network_policies: { k: { name: 'named', endpoints: [{ host: '*.com', port: 1 }] } } }).message).toContain("network policy 'named'");
    // *.co.uk passes (no public-suffix list), as upstream.
    check(web({ host: '*.co.uk' }));
  });

  it('safety comes before the sandgate refusals (upstream text first)', () => {
    const err = refuse({ filesystem: { read_only: [], read_write: ['/'] } });
    expect(err.message).toBe('policy contains unsafe content: read-write path is overly broad: /');
  });
});

describe('policy: live updates (openshell-v1-more.md §11.5)', () => {
  const base = decodePolicy(bytes({ process: { run_as_user: 'sandbox' }, filesystem: { include_workdir: true, read_only: ['/a'], read_write: [] } }));
  const upd = (p: PolicyInput) => refusal(() => assertLiveUpdateAllowed(base, decodePolicy(bytes(p))));
  it('network may change at will; process, landlock and filesystem removals may not', () => {
    assertLiveUpdateAllowed(base, decodePolicy(bytes({ ...web({}), process: { run_as_user: 'sandbox' }, filesystem: { include_workdir: true, read_only: ['/a', '/b'], read_write: [] } })));
    expect(upd({ process: { run_as_user: '1000' }, filesystem: { include_workdir: true, read_only: ['/a'], read_write: [] } }).message).toBe(
      'process policy cannot be changed on a live sandbox (applied at startup)',
    );
    expect(upd({ process: { run_as_user: 'sandbox' } }).message).toBe('filesystem policy cannot be removed on a live sandbox');
    expect(upd({ process: { run_as_user: 'sandbox' }, filesystem: { read_only: ['/a'], read_write: [] } }).message).toBe(
      'filesystem include_workdir cannot be changed on a live sandbox',
    );
    expect(upd({ process: { run_as_user: 'sandbox' }, filesystem: { include_workdir: true, read_only: [], read_write: ['/a'] } }).message).toBe(
      "filesystem read_only path '/a' cannot be removed on a live sandbox",
    );
    expect(upd({ process: { run_as_user: 'sandbox' }, filesystem: { include_workdir: true, read_only: ['/a'], read_write: [] }, landlock: { compatibility: 'x' } }).message).toBe(
      'landlock policy cannot be changed on a live sandbox (applied at startup)',
    );
  });
  it('presence counts: no process in the baseline, an empty one in the update', () => {
    const noProcess = decodePolicy(bytes(web({})));
    const err = refusal(() => assertLiveUpdateAllowed(noProcess, decodePolicy(bytes({ ...web({}), process: {} }))));
    expect(err.message).toBe('process policy cannot be changed on a live sandbox (applied at startup)');
  });
});

describe('policy: identity and hash', () => {
  it('the workload user: sandbox or unset → 10001, numbers as given', () => {
    expect(workloadUserFor(undefined)).toEqual({ uid: 10001, gid: 10001 });
    expect(workloadUserFor(decodePolicy(bytes({ process: { run_as_user: 'sandbox' } })))).toEqual({ uid: 10001, gid: 10001 });
    expect(workloadUserFor(decodePolicy(bytes({ process: { run_as_user: '2000', run_as_group: '3000' } })))).toEqual({ uid: 2000, gid: 3000 });
  });
  it('the hash ignores map order and is 64 hex digits', () => {
    const a = { network_policies: { a: { endpoints: [{ host: 'a.example.com', port: 1 }] }, b: { endpoints: [{ host: 'b.example.com', port: 2 }] } } };
    const b = { network_policies: { b: a.network_policies.b, a: a.network_policies.a } };
    expect(bytes(a).equals(bytes(b))).toBe(false);
    expect(policyHash(decodePolicy(bytes(a)))).toBe(policyHash(decodePolicy(bytes(b))));
    expect(policyHash(decodePolicy(bytes(a)))).toMatch(/^[0-9a-f]{64}$/);
    expect(policyHash(decodePolicy(bytes(a)))).not.toBe(policyHash(decodePolicy(bytes(web({})))));
  });
});

describe('CreateSandbox validation runs the policy and resources checks', () => {
  const req = (spec: object) => ({ spec: { environment: {}, providers: [], command: [], ...spec }, labels: {}, annotations: {} });
  it('returns the decoded policy and stores the bytes', () => {
    const out = validateCreate(req({ policy: bytes(web({})) }));
    expect(out.policy?.network_policies.github?.endpoints[0]?.host).toBe('api.github.com');
  });
  it('refuses an unsupported field through CreateSandbox', () => {
    const err = refusal(() => validateCreate(req({ policy: bytes(web({ rules: [{}] })) })));
    expect(err.message).toContain('spec.policy.network_policies["github"].endpoints[0].rules is not supported by sandgate');
  });
});
