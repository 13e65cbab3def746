// The egress proxy's refusals over real sockets (its listening socket on the host's loopback here,
// as the netns agent would hand it over), and request parsing. What it lets through is proven
// against a real server in a network namespace by workload.test.ts.
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeMessage, messageType } from '@sandgate/protocols';
import { createLogger } from '@sandgate/telemetry/log';
import { decodePolicy, EgressProxy, parseProxyRequest } from '../src/workload/egress-proxy.ts';

describe('parseProxyRequest', () => {
  it('reads CONNECT host:port, IPv6 in brackets, and absolute-form http:// targets', () => {
    expect(parseProxyRequest('CONNECT api.example.com:443 HTTP/1.1')).toEqual({ host: 'api.example.com', port: 443, tunnel: true });
    expect(parseProxyRequest('CONNECT [2001:db8::1]:8443 HTTP/1.1')).toEqual({ host: '2001:db8::1', port: 8443, tunnel: true });
    expect(parseProxyRequest('GET http://example.com/x?y HTTP/1.1')).toEqual({ host: 'example.com', port: 80, tunnel: false });
    expect(parseProxyRequest('POST http://10.0.0.1:8080 HTTP/1.0')).toEqual({ host: '10.0.0.1', port: 8080, tunnel: false });
  });

  it('refuses everything else with a reason', () => {
    expect(parseProxyRequest('GET /relative HTTP/1.1')).toMatch(/only CONNECT/);
    expect(parseProxyRequest('GET https://example.com/ HTTP/1.1')).toMatch(/only CONNECT/);
    expect(parseProxyRequest('CONNECT example.com HTTP/1.1')).toMatch(/host:port/);
    // Userinfo tricks: the host is what follows '@', which a naive parser would get wrong.
    expect(parseProxyRequest('GET http://allowed.test@evil.test/ HTTP/1.1')).toMatch(/only CONNECT/);
    expect(parseProxyRequest('garbage')).toBe('malformed request line');
  });
});

describe('decodePolicy', () => {
  it('empty bytes are no policy; bad bytes throw', () => {
    expect(decodePolicy(new Uint8Array())).toEqual({});
    expect(() => decodePolicy(Buffer.from([0xff, 0xff, 0xff]))).toThrow();
  });
});

/** Sends `request` to the proxy; resolves with everything it answered until it closed. */
function ask(port: number, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    let out = '';
    s.on('data', (d) => (out += d));
    s.on('close', () => resolve(out));
    s.on('error', reject);
    s.write(request);
  });
}

describe('EgressProxy refusals', () => {
  let server: net.Server;
  let proxy: EgressProxy;
  let port = 0;
  let target: net.Server;
  let targetPort = 0;
  const policyType = messageType('openshell.sandbox.v1.SandboxPolicy');

  beforeAll(async () => {
    target = net.createServer((c) => c.end('must-not-be-reached\n'));
    await new Promise<void>((r) => target.listen(0, '127.0.0.1', r));
    targetPort = (target.address() as net.AddressInfo).port;
    server = net.createServer();
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as net.AddressInfo).port;
    proxy = new EgressProxy(server, {}, createLogger({}, 'error'));
  });

  afterAll(() => {
    proxy.close();
    target.close();
  });

  it('an empty policy refuses everything at once, naming the target', async () => {
    const answer = await ask(port, 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n');
    expect(answer).toMatch(/^HTTP\/1\.1 403 Forbidden\r\n/);
    expect(answer).toContain('sandgate: egress refused: no network policy allows example.com:443');
  });

  it('a policy naming a host that resolves to loopback still refuses it (no DNS games)', async () => {
    proxy.setPolicy(
      decodePolicy(encodeMessage(policyType, { network_policies: { r: { endpoints: [{ host: 'localhost', port: targetPort }, { host: '127.0.0.1', port: targetPort }] } } })),
    );
    const byName = await ask(port, `CONNECT localhost:${targetPort} HTTP/1.1\r\n\r\n`);
    expect(byName).toMatch(/^HTTP\/1\.1 403/);
    expect(byName).toMatch(/resolves to (127\.0\.0\.1|::1), a loopback address/);
    const plain = await ask(port, `GET http://localhost:${targetPort}/ HTTP/1.1\r\nHost: localhost\r\n\r\n`);
    expect(plain).toMatch(/^HTTP\/1\.1 403/);
    const literal = await ask(port, `CONNECT 127.0.0.1:${targetPort} HTTP/1.1\r\n\r\n`);
    expect(literal).toMatch(/loopback addresses are never reachable from a sandbox/);
    for (const a of [byName, plain, literal]) expect(a).not.toContain('must-not-be-reached');
  });

  it('answers requests it cannot serve with 400 and oversized heads with 431', async () => {
    expect(await ask(port, 'GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n')).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n[\s\S]*only CONNECT/);
    expect(await ask(port, `GET http://x/ HTTP/1.1\r\nX: ${'a'.repeat(20_000)}`)).toMatch(/^HTTP\/1\.1 431/);
  });
});
