import { describe, expect, it } from 'vitest';
import {
  blockedAddress,
  decideEgress,
  formatIp,
  hostMatches,
  inCidr,
  isTldWildcard,
  parseCidr,
  parseIp,
  portMatches,
  type EgressPolicy,
} from '@sandgate/core';

const ip = (s: string) => {
  const b = parseIp(s);
  if (!b) throw new Error(`not an ip: ${s}`);
  return b;
};

describe('host patterns', () => {
  it('exact names match case-insensitively, ignoring a trailing dot', () => {
    expect(hostMatches('api.example.com', 'API.Example.COM')).toBe(true);
    expect(hostMatches('api.example.com', 'api.example.com.')).toBe(true);
    expect(hostMatches('api.example.com', 'example.com')).toBe(false);
    expect(hostMatches('api.example.com', 'xapi.example.com')).toBe(false);
    expect(hostMatches('example.com', 'example.com.evil.net')).toBe(false);
  });

  it('*. is exactly one label', () => {
    expect(hostMatches('*.example.com', 'api.example.com')).toBe(true);
    expect(hostMatches('*.example.com', 'a.b.example.com')).toBe(false);
    expect(hostMatches('*.example.com', 'example.com')).toBe(false);
    expect(hostMatches('*.example.com', 'evilexample.com')).toBe(false);
    expect(hostMatches('*.example.com', '.example.com')).toBe(false);
  });

  it('**. is one or more labels', () => {
    expect(hostMatches('**.example.com', 'api.example.com')).toBe(true);
    expect(hostMatches('**.example.com', 'a.b.c.example.com')).toBe(true);
    expect(hostMatches('**.example.com', 'example.com')).toBe(false);
    expect(hostMatches('**.example.com', 'a..example.com')).toBe(false);
    expect(hostMatches('**.example.com', 'example.com.evil.net')).toBe(false);
  });

  it('wildcards elsewhere than the first label match nothing', () => {
    expect(hostMatches('api.*.com', 'api.example.com')).toBe(false);
    expect(hostMatches('a*.example.com', 'ab.example.com')).toBe(false);
    expect(hostMatches('*.*.example.com', 'a.b.example.com')).toBe(false);
  });

  it('TLD-level wildcards never match (and are recognised for the gateway to refuse)', () => {
    for (const p of ['*.com', '**.com', '*', '**', '*.']) {
      expect(isTldWildcard(p)).toBe(true);
      expect(hostMatches(p, 'example.com')).toBe(false);
    }
    expect(isTldWildcard('*.example.com')).toBe(false);
    expect(isTldWildcard('**.co.uk')).toBe(false);
    expect(isTldWildcard('example.com')).toBe(false);
  });

  it('IP literal patterns match the same address however it is written', () => {
    expect(hostMatches('10.200.0.2', '10.200.0.2')).toBe(true);
    expect(hostMatches('10.200.0.2', '10.200.0.3')).toBe(false);
    expect(hostMatches('2001:db8::1', '[2001:DB8:0:0::1]')).toBe(true);
    expect(hostMatches('10.200.0.2', '::ffff:10.200.0.2')).toBe(true);
    // An IP pattern never matches a name, nor a name pattern an IP.
    expect(hostMatches('10.200.0.2', 'host.example')).toBe(false);
  });
});

describe('ports', () => {
  it('port or any of ports; neither means nothing', () => {
    expect(portMatches({ port: 443 }, 443)).toBe(true);
    expect(portMatches({ port: 443 }, 80)).toBe(false);
    expect(portMatches({ ports: [80, 8080] }, 8080)).toBe(true);
    expect(portMatches({ port: 443, ports: [80] }, 80)).toBe(true);
    expect(portMatches({}, 443)).toBe(false);
    expect(portMatches({ port: 0, ports: [] }, 0)).toBe(false);
  });
});

describe('addresses and CIDRs', () => {
  it('parses IPv4 strictly and IPv6 in every form', () => {
    expect(formatIp(ip('10.1.2.3'))).toBe('10.1.2.3');
    expect(parseIp('010.1.2.3')).toBeNull(); // octal reading differs between resolvers
    expect(parseIp('1.2.3')).toBeNull();
    expect(parseIp('256.1.1.1')).toBeNull();
    expect(parseIp('example.com')).toBeNull();
    expect(parseIp('fe80::1%eth0')).toBeNull();
    expect(formatIp(ip('::1'))).toBe('::1');
    expect(formatIp(ip('fe80:0:0:0:0:0:0:1'))).toBe('fe80::1');
    expect(formatIp(ip('::ffff:127.0.0.1'))).toBe('127.0.0.1');
    expect(formatIp(ip('::ffff:7f00:1'))).toBe('127.0.0.1');
    expect(parseIp('1::2::3')).toBeNull();
    expect(parseIp('1:2:3:4:5:6:7:8:9')).toBeNull();
  });

  it('CIDR membership, IPv4 and IPv6, bare addresses as /32 and /128', () => {
    const c = parseCidr('10.200.0.0/16')!;
    expect(inCidr(ip('10.200.7.9'), c)).toBe(true);
    expect(inCidr(ip('10.201.0.1'), c)).toBe(false);
    expect(inCidr(ip('::ffff:10.200.0.1'), c)).toBe(true);
    expect(inCidr(ip('10.0.0.1'), parseCidr('10.0.0.0/9')!)).toBe(true);
    expect(inCidr(ip('10.128.0.1'), parseCidr('10.0.0.0/9')!)).toBe(false);
    expect(inCidr(ip('10.0.0.2'), parseCidr('10.0.0.1')!)).toBe(false);
    expect(inCidr(ip('2001:db8::5'), parseCidr('2001:db8::/32')!)).toBe(true);
    expect(inCidr(ip('2001:db9::5'), parseCidr('2001:db8::/32')!)).toBe(false);
    expect(inCidr(ip('1.2.3.4'), parseCidr('0.0.0.0/0')!)).toBe(true);
    expect(parseCidr('10.0.0.0/33')).toBeNull();
    expect(parseCidr('10.0.0.0/x')).toBeNull();
    expect(parseCidr('nope/8')).toBeNull();
  });

  it('loopback, link-local, metadata and unspecified are blocked in every spelling', () => {
    for (const a of ['127.0.0.1', '127.9.9.9', '::1', '::ffff:127.0.0.1', '169.254.169.254', '::ffff:169.254.169.254', 'fe80::1', 'febf::1', '0.0.0.0', '::', '::ffff:0.0.0.0']) {
      expect(blockedAddress(ip(a)), a).not.toBeNull();
    }
    for (const a of ['10.200.0.2', '8.8.8.8', '2001:db8::1', 'fec0::1', '128.0.0.1', '169.255.0.1']) {
      expect(blockedAddress(ip(a)), a).toBeNull();
    }
  });
});

describe('decideEgress', () => {
  const policy: EgressPolicy = {
    network_policies: {
      web: { name: 'web', endpoints: [{ host: '**.example.com', port: 443 }] },
      lab: { endpoints: [{ host: 'lab.test', ports: [80, 8080], allowed_ips: ['10.200.0.0/24'] }] },
      ip: { endpoints: [{ host: '10.201.0.2', port: 5000 }] },
      nets: { endpoints: [{ port: 9000, allowed_ips: ['10.202.0.0/16'] }] },
      none: { endpoints: [{ host: 'noports.test' }] },
      wild: { endpoints: [{ host: '*.com', port: 443 }] },
    },
  };

  it('empty policy, no policy: everything refused', () => {
    expect(decideEgress(undefined, 'api.example.com', 443, ['93.184.216.34']).allowed).toBe(false);
    expect(decideEgress({}, 'api.example.com', 443, ['93.184.216.34'])).toEqual({
      allowed: false,
      reason: 'no network policy allows api.example.com:443',
    });
  });

  it('allows a matching host and port, with the rule that allowed it', () => {
    expect(decideEgress(policy, 'a.b.example.com', 443)).toEqual({ allowed: true, rule: 'web' });
    expect(decideEgress(policy, 'a.b.example.com', 443, ['93.184.216.34'])).toEqual({ allowed: true, rule: 'web' });
    expect(decideEgress(policy, 'a.b.example.com', 80).allowed).toBe(false);
    expect(decideEgress(policy, 'noports.test', 443).allowed).toBe(false);
    expect(decideEgress(policy, 'x.com', 443).allowed).toBe(false);
  });

  it('allowed_ips: every resolved address must be inside', () => {
    expect(decideEgress(policy, 'lab.test', 8080, ['10.200.0.9']).allowed).toBe(true);
    const out = decideEgress(policy, 'lab.test', 8080, ['10.200.0.9', '10.9.9.9']);
    expect(out).toEqual({ allowed: false, reason: 'lab.test:8080 resolves to 10.200.0.9, 10.9.9.9, outside the allowed_ips of lab' });
    expect(decideEgress(policy, 'lab.test', 8080, []).allowed).toBe(false);
  });

  it('IP literal hosts and host-less address rules', () => {
    expect(decideEgress(policy, '10.201.0.2', 5000, ['10.201.0.2']).allowed).toBe(true);
    expect(decideEgress(policy, '10.201.0.3', 5000, ['10.201.0.3']).allowed).toBe(false);
    expect(decideEgress(policy, 'anything.test', 9000, ['10.202.3.4']).allowed).toBe(true);
    expect(decideEgress(policy, '10.202.3.4', 9000, ['10.202.3.4']).allowed).toBe(true);
    expect(decideEgress(policy, 'anything.test', 9000, ['10.203.3.4']).allowed).toBe(false);
  });

  it('loopback and link-local are refused whatever the policy says', () => {
    const open: EgressPolicy = {
      network_policies: { all: { endpoints: [{ host: '**.example.com', port: 80, allowed_ips: ['0.0.0.0/0', '::/0'] }, { port: 80, allowed_ips: ['0.0.0.0/0', '::/0'] }, { host: '127.0.0.1', port: 80 }, { host: '169.254.169.254', port: 80 }] } },
    };
    // A name resolving to a forbidden address (DNS rebinding to loopback or metadata).
    expect(decideEgress(open, 'evil.example.com', 80, ['127.0.0.1']).allowed).toBe(false);
    expect(decideEgress(open, 'evil.example.com', 80, ['10.0.0.1', '169.254.169.254']).allowed).toBe(false);
    expect(decideEgress(open, 'evil.example.com', 80, ['::ffff:127.0.0.1']).allowed).toBe(false);
    expect(decideEgress(open, 'evil.example.com', 80, ['fe80::1']).allowed).toBe(false);
    // Literal forbidden addresses, even when a rule names them, refused before any lookup.
    for (const h of ['127.0.0.1', '169.254.169.254', '[::1]', '::ffff:127.0.0.1', '0.0.0.0', 'fe80::1']) {
      const d = decideEgress(open, h, 80);
      expect(d.allowed, h).toBe(false);
      if (!d.allowed) expect(d.reason).toMatch(/never reachable from a sandbox/);
    }
    expect(decideEgress(open, 'ok.example.com', 80, ['10.0.0.1']).allowed).toBe(true);
  });

  it("the host's own addresses are refused like loopback, whatever allowed_ips says", () => {
    const open: EgressPolicy = { network_policies: { all: { endpoints: [{ port: 80, allowed_ips: ['0.0.0.0/0'] }, { host: '10.9.0.1', port: 80 }] } } };
    const local = { localAddresses: ['10.9.0.1', '192.168.1.5', 'fe80::1'] };
    expect(decideEgress(open, '10.9.0.1', 80, ['10.9.0.1'], local)).toEqual({
      allowed: false,
      reason: "10.9.0.1:80: the sandbox host's own addresses are never reachable from a sandbox",
    });
    expect(decideEgress(open, 'gw.test', 80, ['::ffff:192.168.1.5'], local).allowed).toBe(false);
    expect(decideEgress(open, 'gw.test', 80, ['192.168.1.6'], local).allowed).toBe(true);
  });

  it('invalid targets are refused with a reason', () => {
    expect(decideEgress(policy, '', 443).allowed).toBe(false);
    expect(decideEgress(policy, 'a.example.com', 0).allowed).toBe(false);
    expect(decideEgress(policy, 'a.example.com', 70000).allowed).toBe(false);
  });
});
