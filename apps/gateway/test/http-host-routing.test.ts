// The HTTP port's split by host (api/http.ts): requests and WebSocket upgrades for service hosts go
// to the service proxy alone, everything else (the API's WebSocket routes included) to fastify
// alone, over plain HTTP and over TLS.
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import type { Duplex } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import websocket from '@fastify/websocket';
import { createCertificateAuthority } from '@sandgate/pki';
import { Metrics } from '@sandgate/telemetry';
import { isServiceHost } from '@sandgate/core';
import { buildHttp, type HostRouted } from '../src/api/http.ts';

/** A stand-in proxy: answers requests and upgrades of `*.openshell.localhost` and records them. */
function fakeProxy() {
  const seen: string[] = [];
  const routed: HostRouted = {
    claims: (req: IncomingMessage) => isServiceHost(req.headers.host, 'openshell.localhost'),
    handleRequest: (req: IncomingMessage, res: ServerResponse) => {
      seen.push(`request ${req.url}`);
      res.end('from the proxy');
    },
    handleUpgrade: (req: IncomingMessage, socket: Duplex) => {
      seen.push(`upgrade ${req.url}`);
      socket.end('HTTP/1.1 418 I am the proxy\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
    },
  };
  return { routed, seen };
}

const closers: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  while (closers.length) await closers.pop()!();
});

async function start(tls: { cert: Buffer; key: Buffer } | null) {
  const proxy = fakeProxy();
  const app = buildHttp({ https: tls, replicaId: 'r', metrics: new Metrics(), debugBreaks: [], ready: async () => ({ ok: true, detail: 'ok' }), serviceProxy: proxy.routed });
  await app.register(websocket);
  await app.register(async (scope) => {
    scope.get('/v1/echo', { websocket: true }, (socket) => {
      socket.on('message', (m: Buffer) => socket.send(`api: ${m.toString()}`));
    });
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  closers.push(() => app.close());
  return { port: (app.server.address() as { port: number }).port, seen: proxy.seen, server: app.server as http.Server };
}

function get(port: number, host: string, path: string, tls: { ca: string } | null): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const mod = (tls ? https : http) as typeof http;
    const req = mod.get({ host: '127.0.0.1', port, path, headers: { host }, ...(tls ? { ca: tls.ca, servername: 'localhost' } : {}) }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
  });
}

function wsTry(url: string, host: string, tls: { ca: string } | null): Promise<string> {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, { headers: { host }, ...(tls ? { ca: tls.ca, servername: 'localhost' } : {}) });
    ws.on('open', () => ws.send('hi'));
    ws.on('message', (m) => {
      resolve(`message ${m.toString()}`);
      ws.close();
    });
    ws.on('unexpected-response', (_req, res) => resolve(`status ${res.statusCode}`));
    ws.on('error', (err) => resolve(`error ${err.message}`));
  });
}

describe.each([
  ['plain HTTP', false],
  ['TLS', true],
])('the HTTP port split by host (%s)', (_name, withTls) => {
  it('service hosts reach only the proxy; other hosts only fastify, upgrades included', async () => {
    let tls: { cert: Buffer; key: Buffer } | null = null;
    let trust: { ca: string } | null = null;
    if (withTls) {
      const ca = await createCertificateAuthority('routing test CA');
      const pair = await ca.issue({ commonName: 'gw', dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'], usage: 'server' });
      tls = { cert: Buffer.from(pair.cert), key: Buffer.from(pair.key) };
      trust = { ca: ca.cert };
    }
    const { port, seen, server } = await start(tls);
    // fastify's own server settings hold for the factory's server: no overall request deadline.
    expect(server.requestTimeout).toBe(0);
    const scheme = withTls ? 'wss' : 'ws';
    const svc = `default--box--web.openshell.localhost:${port}`;

    expect(await get(port, svc, '/healthz', trust)).toEqual({ status: 200, body: 'from the proxy' });
    expect((await get(port, `127.0.0.1:${port}`, '/healthz', trust)).status).toBe(200);
    expect(JSON.parse((await get(port, `127.0.0.1:${port}`, '/healthz', trust)).body)).toMatchObject({ status: 'ok' });

    // The API's WebSocket route answers for other hosts, and never sees a service host's upgrade.
    expect(await wsTry(`${scheme}://127.0.0.1:${port}/v1/echo`, `127.0.0.1:${port}`, trust)).toBe('message api: hi');
    expect(await wsTry(`${scheme}://127.0.0.1:${port}/v1/echo`, svc, trust)).toBe('status 418');
    expect(seen).toEqual(['request /healthz', 'upgrade /v1/echo']);
  });
});
