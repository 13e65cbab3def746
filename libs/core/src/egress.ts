// Egress decisions for the sandbox's policy-checked proxy: may a workload connect to host:port?
//
// Only the L4 subset of OpenShell's SandboxPolicy is enforced here (`network_policies[*]
// .endpoints[*]`: `host`, `port`/`ports`, `allowed_ips`); anything else in a policy is refused by
// the gateway at create, so nothing reaches this code that it would silently ignore. The decision
// is made twice by the proxy: once on the name alone (so a refused host costs no DNS lookup and
// answers at once), then on the addresses the name resolved to, which are the ones the proxy
// connects to (no second lookup an attacker's DNS could answer differently).
//
// Addresses are compared as 16 bytes, IPv4 as its IPv4-mapped IPv6 form, so `::ffff:127.0.0.1`
// is loopback exactly like `127.0.0.1`. Loopback, link-local (cloud metadata lives at
// 169.254.169.254) and unspecified addresses are refused whatever the policy says, as upstream
// does: the sandbox's loopback is its own (reached directly, never through the proxy), and the
// host's loopback and metadata service are the first things an escaping workload would try. The
// host's own interface addresses (the caller passes them) are refused for the same reason: a
// connection to one of them reaches the host's services (the gateway, Redis on 0.0.0.0) exactly
// as loopback would, however broad the policy's allowed_ips.

/** The shape of a decoded `openshell.sandbox.v1.NetworkEndpoint` this module reads. */
export interface EgressEndpoint {
  host?: string;
  port?: number;
  ports?: number[];
  allowed_ips?: string[];
}

/** The shape of a decoded `openshell.sandbox.v1.SandboxPolicy` this module reads. */
export interface EgressPolicy {
  network_policies?: Record<string, { name?: string; endpoints?: EgressEndpoint[] } | undefined>;
}

export type EgressDecision = { allowed: true; rule: string } | { allowed: false; reason: string };

/** 16 bytes: an IPv6 address, or an IPv4 one in its IPv4-mapped form (::ffff:a.b.c.d). */
export type IpBytes = Uint8Array;

export interface Cidr {
  bytes: IpBytes;
  /** Prefix length over the 128-bit form (an IPv4 /8 is 96 + 8). */
  bits: number;
}

function parseIpv4(s: string): number[] | null {
  const parts = s.split('.');
  if (parts.length !== 4) return null;
  const out: number[] = [];
  for (const p of parts) {
    // Strict dotted decimal: no octal (`010`), hex or short forms, which resolvers read differently.
    if (!/^(0|[1-9]\d{0,2})$/.test(p)) return null;
    const n = Number(p);
    if (n > 255) return null;
    out.push(n);
  }
  return out;
}

/** Parses an IPv4 or IPv6 literal (no brackets, no zone id) to 16 bytes; null if it is not one. */
export function parseIp(text: string): IpBytes | null {
  const s = text.trim();
  const v4 = parseIpv4(s);
  if (v4) return Uint8Array.from([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ...v4]);
  if (!s.includes(':') || !/^[0-9a-fA-F:.]+$/.test(s)) return null;
  let head = s;
  let tailV4: number[] | null = null;
  const lastColon = s.lastIndexOf(':');
  if (s.slice(lastColon + 1).includes('.')) {
    tailV4 = parseIpv4(s.slice(lastColon + 1));
    if (!tailV4) return null;
    head = s.slice(0, lastColon + 1) + '0:0'; // two placeholder groups, replaced below
  }
  const halves = head.split('::');
  if (halves.length > 2) return null;
  const groups = (h: string) => (h === '' ? [] : h.split(':'));
  const left = groups(halves[0]!);
  const right = halves.length === 2 ? groups(halves[1]!) : [];
  if (halves.length === 1 && left.length !== 8) return null;
  if (halves.length === 2 && left.length + right.length > 7) return null;
  const all = [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right];
  const out = new Uint8Array(16);
  for (let i = 0; i < 8; i++) {
    const g = all[i]!;
    if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return null;
    const n = parseInt(g, 16);
    out[i * 2] = n >> 8;
    out[i * 2 + 1] = n & 0xff;
  }
  if (tailV4) out.set(tailV4, 12);
  return out;
}

function isMappedV4(b: IpBytes): boolean {
  for (let i = 0; i < 10; i++) if (b[i] !== 0) return false;
  return b[10] === 0xff && b[11] === 0xff;
}

/** The canonical text of an address: dotted IPv4 for IPv4 and IPv4-mapped, else compressed-ish IPv6. */
export function formatIp(b: IpBytes): string {
  if (isMappedV4(b)) return `${b[12]}.${b[13]}.${b[14]}.${b[15]}`;
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((b[i]! << 8) | b[i + 1]!).toString(16));
  return groups.join(':').replace(/(^|:)0(:0)+(:|$)/, '::');
}

/** `10.0.0.0/8`, `fd00::/8`, or a bare address (a /32 or /128). Null if malformed. */
export function parseCidr(text: string): Cidr | null {
  const s = text.trim();
  const slash = s.indexOf('/');
  const addr = slash < 0 ? s : s.slice(0, slash);
  const bytes = parseIp(addr);
  if (!bytes) return null;
  const v4 = parseIpv4(addr.trim()) !== null;
  const max = v4 ? 32 : 128;
  let bits = max;
  if (slash >= 0) {
    const p = s.slice(slash + 1);
    if (!/^\d{1,3}$/.test(p) || Number(p) > max) return null;
    bits = Number(p);
  }
  return { bytes, bits: v4 ? 96 + bits : bits };
}

export function inCidr(ip: IpBytes, cidr: Cidr): boolean {
  let bits = cidr.bits;
  for (let i = 0; i < 16 && bits > 0; i++, bits -= 8) {
    const mask = bits >= 8 ? 0xff : (0xff << (8 - bits)) & 0xff;
    if ((ip[i]! & mask) !== (cidr.bytes[i]! & mask)) return false;
  }
  return true;
}

const BLOCKED: Array<{ cidr: Cidr; what: string }> = [
  ['0.0.0.0/8', 'unspecified'],
  ['127.0.0.0/8', 'loopback'],
  ['169.254.0.0/16', 'link-local (cloud metadata)'],
  ['::/128', 'unspecified'],
  ['::1/128', 'loopback'],
  ['fe80::/10', 'link-local'],
].map(([c, what]) => ({ cidr: parseCidr(c!)!, what: what! }));

/** Why an address is never a permitted egress target (loopback, link-local, unspecified), or null. */
export function blockedAddress(ip: IpBytes): string | null {
  for (const b of BLOCKED) if (inCidr(ip, b.cidr)) return b.what;
  return null;
}

function normaliseHost(host: string): string {
  let h = host.trim().toLowerCase();
  if (h.startsWith('[') && h.endsWith(']')) h = h.slice(1, -1);
  if (h.endsWith('.')) h = h.slice(0, -1);
  return h;
}

/**
 * A pattern whose fixed part is a single label (`*.com`, `**.internal`, `*`): it would allow a
 * whole top-level domain. Such patterns never match here; the gateway refuses them at create.
 */
export function isTldWildcard(pattern: string): boolean {
  const p = normaliseHost(pattern);
  if (!p.includes('*')) return false;
  const fixed = p.replace(/^\*\*?\.?/, '');
  return fixed === '' || !fixed.includes('.');
}

/**
 * Host pattern matching: exact (case-insensitive, a trailing dot ignored); `*.example.com` is
 * exactly one label before `example.com`; `**.example.com` one or more. An IP literal pattern
 * matches the same address however it is written. Wildcards anywhere else match nothing.
 */
export function hostMatches(pattern: string, host: string): boolean {
  const p = normaliseHost(pattern);
  const h = normaliseHost(host);
  if (!p || !h) return false;
  const pIp = parseIp(p);
  if (pIp) {
    const hIp = parseIp(h);
    return hIp !== null && pIp.every((b, i) => b === hIp[i]);
  }
  if (!p.includes('*')) return p === h;
  if (isTldWildcard(p)) return false;
  let multi: boolean;
  let suffix: string;
  if (p.startsWith('**.')) {
    multi = true;
    suffix = p.slice(3);
  } else if (p.startsWith('*.')) {
    multi = false;
    suffix = p.slice(2);
  } else return false;
  if (suffix.includes('*')) return false;
  if (!h.endsWith('.' + suffix)) return false;
  const prefix = h.slice(0, h.length - suffix.length - 1);
  const labels = prefix.split('.');
  if (labels.some((l) => l === '')) return false;
  return multi ? labels.length >= 1 : labels.length === 1;
}

export function portMatches(endpoint: EgressEndpoint, port: number): boolean {
  if (endpoint.port && endpoint.port === port) return true;
  return (endpoint.ports ?? []).includes(port);
}

function validPort(port: number): boolean {
  return Number.isInteger(port) && port >= 1 && port <= 65535;
}

interface Match {
  rule: string;
  endpoint: EgressEndpoint;
}

function matchingEndpoints(policy: EgressPolicy | undefined, host: string, port: number): Match[] {
  const out: Match[] = [];
  for (const [key, rule] of Object.entries(policy?.network_policies ?? {})) {
    for (const endpoint of rule?.endpoints ?? []) {
      if (!portMatches(endpoint, port)) continue;
      // A host-less endpoint is an address rule: it matches any name, and its allowed_ips
      // (required, else it allows nothing) decide on the resolved addresses.
      const hostOk = endpoint.host ? hostMatches(endpoint.host, host) : (endpoint.allowed_ips ?? []).length > 0;
      if (hostOk) out.push({ rule: rule?.name || key, endpoint });
    }
  }
  return out;
}

function endpointAllows(endpoint: EgressEndpoint, ips: IpBytes[]): boolean {
  const allowed = endpoint.allowed_ips ?? [];
  if (allowed.length === 0) return true;
  const cidrs = allowed.map(parseCidr).filter((c): c is Cidr => c !== null);
  return ips.every((ip) => cidrs.some((c) => inCidr(ip, c)));
}

/**
 * Whether a workload may open a TCP connection to `host:port`. Without `addresses`, decides on
 * the name alone (a refusal is final, an allowance still needs the addresses); with them (what
 * `host` resolved to, or `[host]` for an IP literal), decides for real: some endpoint must match
 * the host and port, every address must lie in that endpoint's `allowed_ips` when it lists any,
 * and no address may be loopback, link-local or unspecified. No policy, or no network rule:
 * everything is refused.
 */
export function decideEgress(
  policy: EgressPolicy | undefined,
  host: string,
  port: number,
  addresses?: readonly string[],
  opts: { localAddresses?: readonly string[] } = {},
): EgressDecision {
  const local = (opts.localAddresses ?? []).map(parseIp).filter((b): b is IpBytes => b !== null);
  const isLocal = (ip: IpBytes) => local.some((l) => l.every((b, i) => b === ip[i]));
  const target = `${normaliseHost(host)}:${port}`;
  if (!normaliseHost(host) || !validPort(port)) return { allowed: false, reason: `invalid target ${JSON.stringify(`${host}:${port}`)}` };
  const hostIp = parseIp(normaliseHost(host));
  if (hostIp) {
    const blocked = blockedAddress(hostIp);
    if (blocked) return { allowed: false, reason: `${target}: ${blocked} addresses are never reachable from a sandbox` };
    if (isLocal(hostIp)) return { allowed: false, reason: `${target}: the sandbox host's own addresses are never reachable from a sandbox` };
  }
  const matches = matchingEndpoints(policy, host, port);
  if (matches.length === 0) return { allowed: false, reason: `no network policy allows ${target}` };
  if (addresses === undefined) return { allowed: true, rule: matches[0]!.rule };

  if (addresses.length === 0) return { allowed: false, reason: `${target}: the name resolved to no address` };
  const ips: IpBytes[] = [];
  for (const a of addresses) {
    const ip = parseIp(a);
    if (!ip) return { allowed: false, reason: `${target}: unusable address ${JSON.stringify(a)}` };
    const blocked = blockedAddress(ip);
    if (blocked) return { allowed: false, reason: `${target} resolves to ${formatIp(ip)}, a ${blocked} address, never reachable from a sandbox` };
    if (isLocal(ip)) return { allowed: false, reason: `${target} resolves to ${formatIp(ip)}, an address of the sandbox's host, never reachable from a sandbox` };
    ips.push(ip);
  }
  const ok = matches.find((m) => endpointAllows(m.endpoint, ips));
  if (ok) return { allowed: true, rule: ok.rule };
  return {
    allowed: false,
    reason: `${target} resolves to ${ips.map(formatIp).join(', ')}, outside the allowed_ips of ${[...new Set(matches.map((m) => m.rule))].join(', ')}`,
  };
}
