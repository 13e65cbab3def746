// Issue 14, exposed services: a web app (HTTP + WebSocket echo) inside a sandbox, exposed as
// services, answers through every replica of a 3-replica cluster (streamed responses, a POST body,
// WebSockets), private by default (bearer token of the workspace), public through signed links
// (cookie + redirect; expired, forged and other-service links refused), loads in headless Chromium
// with its WebSocket working; after StopSandbox every replica answers 412, after the delete 404
// and the records are gone. Plus the four gRPC methods' error cases and the REST routes.
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { chromium } from 'playwright-core';
import { credentials as grpcCredentials, makeGenericClientConstructor, status as grpcStatus, type ServiceError } from '@grpc/grpc-js';
import { serviceDefinition } from '@sandgate/protocols';
import { keysFor, type RedisClient } from '@sandgate/store';
import { Cluster, runCli } from '../harness/cluster.ts';
import { startRedis, type TestRedis } from '../harness/redis.ts';
import { bearerInterceptor, openShellClient, unaryCall, type AnyClient } from '../harness/grpc-client.ts';
import { createSandbox, type CreatedSandbox } from '../harness/sandbox.ts';
import { SERVICE_APP, serviceHost, serviceRequest } from '../harness/service-app.ts';
import { waitFor } from '../harness/wait.ts';
import { expectOwnedOperationsServed } from '../harness/openapi-coverage.ts';

const CHROMIUM = '/usr/bin/chromium';
const PORT = 8000;

let redis: TestRedis;
let r: RedisClient;
let cluster: Cluster;
let client: AnyClient;
let sbx: CreatedSandbox;
let otherToken: string;
let memberToken: string;

const gw = (i = 0) => cluster.replicas[i]!.grpcAddress;
const httpUrl = (i: number) => cluster.replicas[i]!.httpUrl;
const host = (i: number, label: string) => serviceHost(httpUrl(i), label);
const web = (i: number) => host(i, 'default--svcapp--web');
const bearer = (token = cluster.token) => ({ authorization: `Bearer ${token}` });
const grpcError = (p: Promise<unknown>) =>
  p.then(
    () => {
      throw new Error('expected the call to fail');
    },
    (err: ServiceError) => ({ code: err.code, details: err.details }),
  );

/** Opens a WebSocket to a service host through replica i, sends `text`, resolves with the answer. */
function wsEcho(i: number, label: string, text: string, headers: Record<string, string>, path = '/ws'): Promise<string> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${httpUrl(i).replace(/^http/, 'ws')}${path}`, { headers: { host: host(i, label), ...headers } });
    const timer = setTimeout(() => reject(new Error('websocket echo timed out')), 10_000);
    ws.on('open', () => ws.send(text));
    ws.on('message', (data) => {
      clearTimeout(timer);
      resolve(data.toString());
      ws.close();
    });
    ws.on('unexpected-response', (_req, res) => {
      clearTimeout(timer);
      reject(new Error(`websocket refused: ${res.statusCode}`));
    });
    ws.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

beforeAll(async () => {
  // Fail loudly, never skip: the browser check is part of the acceptance.
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: install Debian's chromium package (apt-get install -y chromium)`);
  redis = await startRedis();
  r = redis.client();
  cluster = await Cluster.start({ redisUrl: redis.url, replicas: 3 });
  client = openShellClient(gw(0));
  sbx = await createSandbox(gw(0), 'svcapp', [process.execPath, '-e', SERVICE_APP, String(PORT)]);
  for (const service of ['web', 'other', '']) {
    await unaryCall(client, 'ExposeService', { sandbox: 'svcapp', service, target_port: PORT, workspace: 'default' });
  }
  await unaryCall(client, 'CreateWorkspace', { name: 'elsewhere' });
  otherToken = await cluster.tokenFor('elsewhere', 'member', 'other workspace');
  memberToken = await cluster.tokenFor('default', 'member', 'default member');
  // The app inside is up once it answers through the proxy.
  await waitFor('the service app answers', async () => (await serviceRequest(httpUrl(0), web(0), '/hello', { headers: bearer() })).status === 200, 60_000, 200);
}, 180_000);

afterAll(async () => {
  client?.close();
  await cluster?.stop();
  cluster?.cleanup();
  await redis?.stop();
});

describe('an exposed service through every replica', () => {
  it('answers at each of the three replicas, the URL naming the service host', async () => {
    const got = await unaryCall<{ url: string; endpoint: { domain: boolean; target_port: number; metadata: { resource_version: number } } }>(client, 'GetService', {
      sandbox: 'svcapp',
      service: 'web',
    });
    expect(got.url).toBe(`http://default--svcapp--web.openshell.localhost:${new URL(httpUrl(0)).port}/`);
    expect(got.endpoint.domain).toBe(true);
    for (let i = 0; i < 3; i++) {
      const res = await serviceRequest(httpUrl(i), web(i), '/hello', { headers: bearer(memberToken) });
      expect(res.status, `replica ${i}`).toBe(200);
      expect(res.body.toString()).toBe('hello from the sandbox\n');
    }
  });

  it('streams the response: the first bytes arrive while the service still holds the rest', async () => {
    for (let i = 0; i < 3; i++) {
      const base = new URL(httpUrl(i));
      const first = await new Promise<{ res: http.IncomingMessage; chunk: string }>((resolve, reject) => {
        const req = http.get({ host: base.hostname, port: Number(base.port), path: '/stream', headers: { host: web(i), ...bearer() }, agent: false }, (res) => {
          res.once('data', (c: Buffer) => resolve({ res, chunk: c.toString() }));
        });
        req.on('error', reject);
      });
      expect(first.chunk).toBe('first\n');
      let rest = '';
      const ended = new Promise<void>((resolve) => {
        first.res.on('data', (c: Buffer) => (rest += c.toString()));
        first.res.on('end', () => resolve());
      });
      // Released through another replica: the service holds the stream until then.
      expect((await serviceRequest(httpUrl((i + 1) % 3), web((i + 1) % 3), '/release', { headers: bearer() })).status).toBe(200);
      await ended;
      expect(rest).toBe('last\n');
    }
  });

  it('carries a POST body whole (8 MiB) through each replica', async () => {
    const body = randomBytes(8 * 1024 * 1024);
    const sha256 = createHash('sha256').update(body).digest('hex');
    for (let i = 0; i < 3; i++) {
      const res = await serviceRequest(httpUrl(i), web(i), '/echo', { method: 'POST', body, headers: { ...bearer(), 'content-type': 'application/octet-stream' } });
      expect(res.status).toBe(200);
      expect(JSON.parse(res.body.toString())).toEqual({ bytes: body.length, sha256 });
    }
  });

  it('passes WebSocket upgrades through at each replica (text both ways)', async () => {
    for (let i = 0; i < 3; i++) expect(await wsEcho(i, 'default--svcapp--web', `ping ${i}`, bearer())).toBe(`echo: ping ${i}`);
  });

  it("never hands the service the caller's token or the gateway's cookie, and the service cannot set that cookie", async () => {
    const res = await serviceRequest(httpUrl(1), web(1), '/headers', { headers: { ...bearer(), cookie: 'sg_service_link=x.y; app=kept' } });
    const seen = JSON.parse(res.body.toString()) as Record<string, string>;
    expect(seen.authorization).toBeUndefined();
    expect(seen.host).toBe(`127.0.0.1:${PORT}`);
    expect(seen['x-forwarded-host']).toBe(web(1));
    expect(seen.cookie).toBe('app=kept');
    const planted = await serviceRequest(httpUrl(1), web(1), '/set-cookie', { headers: bearer() });
    expect(planted.headers['set-cookie']).toEqual(['app=1; Path=/']);
  });

  it('answers 502 at every replica when nothing listens on the exposed port', async () => {
    await unaryCall(client, 'ExposeService', { sandbox: 'svcapp', service: 'dead', target_port: 8999 });
    for (let i = 0; i < 3; i++) {
      const res = await serviceRequest(httpUrl(i), host(i, 'default--svcapp--dead'), '/', { headers: bearer() });
      expect(res.status, `replica ${i}`).toBe(502);
      expect(res.body.toString()).toBe('Service endpoint is not reachable\n');
    }
    await unaryCall(client, 'DeleteService', { sandbox: 'svcapp', service: 'dead' });
  });

  it('sends upgrades for other hosts to the API (fastify), not to the proxy', async () => {
    const base = new URL(httpUrl(0));
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request({
        host: base.hostname,
        port: Number(base.port),
        path: '/v1/no-such-route',
        headers: { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': randomBytes(16).toString('base64') },
        agent: false,
      });
      req.on('response', (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on('upgrade', () => reject(new Error('upgraded')));
      req.on('error', reject);
      req.end();
    });
    expect(answer.status).toBe(404);
    // The API's JSON error shape (its /v1 not-found handler), not the proxy's plain text.
    expect(answer.body).toContain('"code":"NOT_FOUND"');
  });
});

describe('private by default', () => {
  it('refuses a request without a token (401) and with a bad one (401)', async () => {
    for (let i = 0; i < 3; i++) {
      const none = await serviceRequest(httpUrl(i), web(i), '/hello');
      expect(none.status).toBe(401);
      expect(none.body.toString()).toContain('Authentication required');
      expect((await serviceRequest(httpUrl(i), web(i), '/hello', { headers: bearer('not-a-token') })).status).toBe(401);
    }
    await expect(wsEcho(0, 'default--svcapp--web', 'x', {})).rejects.toThrow('websocket refused: 401');
  });

  it("answers another workspace's token 404, exactly as for an endpoint that does not exist", async () => {
    const theirs = await serviceRequest(httpUrl(2), web(2), '/hello', { headers: bearer(otherToken) });
    expect(theirs.status).toBe(404);
    const missing = await serviceRequest(httpUrl(2), host(2, 'default--svcapp--nothing'), '/hello', { headers: bearer() });
    expect(missing.status).toBe(404);
    expect(theirs.body.toString()).toBe(missing.body.toString());
    await expect(wsEcho(2, 'default--svcapp--web', 'x', bearer(otherToken))).rejects.toThrow('websocket refused: 404');
    // And through the API: their workspace has no such sandbox; naming ours is PERMISSION_DENIED.
    const theirClient = openShellClient(gw(1), { token: otherToken });
    try {
      expect(await grpcError(unaryCall(theirClient, 'GetService', { sandbox: 'svcapp', service: 'web' }))).toEqual({ code: grpcStatus.NOT_FOUND, details: 'service endpoint not found' });
      expect((await grpcError(unaryCall(theirClient, 'GetService', { sandbox: 'svcapp', service: 'web', workspace: 'default' }))).code).toBe(grpcStatus.PERMISSION_DENIED);
    } finally {
      theirClient.close();
    }
  });
});

describe('signed public links', () => {
  let link: URL;

  beforeAll(async () => {
    const res = await runCli(['service', 'url', 'svcapp', 'web', '--expires', '1h', '-o', 'json'], { gateway: gw(1) });
    expect(res.stderr).toBe('');
    link = new URL((JSON.parse(res.stdout.toString()) as { url: string }).url);
  });

  it('a link opens the service without a token at every replica: cookie, redirect to the clean URL, then the page', async () => {
    expect(link.hostname).toBe('default--svcapp--web.openshell.localhost');
    for (let i = 0; i < 3; i++) {
      const first = await serviceRequest(httpUrl(i), web(i), `/hello${link.search}`);
      expect(first.status).toBe(303);
      expect(first.headers.location).toBe('/hello');
      const cookie = String(first.headers['set-cookie']);
      expect(cookie).toMatch(/^sg_service_link=\d+\.[A-Za-z0-9_-]{43}; Path=\/; Max-Age=\d+; HttpOnly; SameSite=Lax$/);
      const page = await serviceRequest(httpUrl(i), web(i), '/hello', { headers: { cookie: cookie.split(';')[0]! } });
      expect(page.status).toBe(200);
      expect(page.body.toString()).toBe('hello from the sandbox\n');
      // A WebSocket carries the cookie too, or the link itself (no redirect possible there).
      expect(await wsEcho(i, 'default--svcapp--web', 'via cookie', { cookie: cookie.split(';')[0]! })).toBe('echo: via cookie');
      expect(await wsEcho(i, 'default--svcapp--web', 'via link', {}, `/ws${link.search}`)).toBe('echo: via link');
    }
  });

  it("refuses the link's cookie on requests another page makes (another service's page is the same site)", async () => {
    const first = await serviceRequest(httpUrl(0), web(0), `/hello${link.search}`);
    const cookie = String(first.headers['set-cookie']).split(';')[0]!;
    const evil = `http://${host(0, 'default--svcapp--other')}`;
    const own = `http://${web(0)}`;
    const attempt = (headers: Record<string, string>) => serviceRequest(httpUrl(0), web(0), '/hello', { headers: { cookie, ...headers } });
    expect((await attempt({ origin: evil })).status).toBe(403);
    expect((await attempt({ origin: 'null' })).status).toBe(403);
    expect((await attempt({ 'sec-fetch-site': 'same-site', 'sec-fetch-mode': 'no-cors' })).status).toBe(403);
    expect((await attempt({ 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'cors', origin: evil })).status).toBe(403);
    await expect(wsEcho(0, 'default--svcapp--web', 'x', { cookie, origin: evil })).rejects.toThrow('websocket refused: 403');
    // The service's own pages, a typed URL, and a link followed from elsewhere still work.
    expect((await attempt({ origin: own, 'sec-fetch-site': 'same-origin', 'sec-fetch-mode': 'cors' })).status).toBe(200);
    expect((await attempt({ 'sec-fetch-site': 'none', 'sec-fetch-mode': 'navigate' })).status).toBe(200);
    expect((await attempt({ 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'navigate' })).status).toBe(200);
    expect(await wsEcho(0, 'default--svcapp--web', 'same origin', { cookie, origin: own })).toBe('echo: same origin');
  });

  it('refuses forged, altered and other-service links (403), and expired ones (401)', async () => {
    const exp = link.searchParams.get('sg_exp')!;
    const sig = link.searchParams.get('sg_sig')!;
    const forged = `?sg_exp=${exp}&sg_sig=${randomBytes(32).toString('base64url')}`;
    expect((await serviceRequest(httpUrl(0), web(0), `/hello${forged}`)).status).toBe(403);
    // A later expiry under the same signature.
    expect((await serviceRequest(httpUrl(0), web(0), `/hello?sg_exp=${Number(exp) + 86_400_000}&sg_sig=${sig}`)).status).toBe(403);
    // The link of `web` does not open `other` or the unnamed endpoint of the same sandbox, as a link or a cookie.
    for (const label of ['default--svcapp--other', 'default--svcapp']) {
      expect((await serviceRequest(httpUrl(1), host(1, label), `/hello${link.search}`)).status, label).toBe(403);
      expect((await serviceRequest(httpUrl(1), host(1, label), '/hello', { headers: { cookie: `sg_service_link=${exp}.${sig}` } })).status, label).toBe(403);
    }
    // A link to an endpoint that does not exist is as refused as a forged one (existence not leaked).
    expect((await serviceRequest(httpUrl(1), host(1, 'default--svcapp--nothing'), `/hello${link.search}`)).status).toBe(403);
    // A real link past its expiry.
    const sandgate = sandgateClient(gw(2));
    const short = await unaryCall<{ url: string }>(sandgate, 'CreateServiceLink', { sandbox: 'svcapp', service: 'web', expires_in_seconds: 1 }).finally(() => sandgate.close());
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const expired = await serviceRequest(httpUrl(2), web(2), `/hello${new URL(short.url).search}`);
    expect(expired.status).toBe(401);
    expect(expired.body.toString()).toContain('expired');
    expect((await serviceRequest(httpUrl(2), web(2), '/hello', { headers: { cookie: `sg_service_link=${new URL(short.url).searchParams.get('sg_exp')}.${new URL(short.url).searchParams.get('sg_sig')}` } })).status).toBe(401);
  });

  it('a page from inside the sandbox loads in headless Chromium through the link, its WebSocket working', async () => {
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
    try {
      const page = await browser.newPage();
      // Through replica 2 (the link names replica 1's port: every replica verifies it).
      const url = `http://${web(2)}/${link.search}`;
      const answer = await page.goto(url);
      expect(answer?.status()).toBe(200);
      expect(new URL(page.url()).search).toBe('');
      // A string, evaluated in the page (this file is not compiled with the DOM's types).
      await page.waitForFunction("document.getElementById('status').textContent !== 'loading'", undefined, { timeout: 15_000 });
      expect(await page.textContent('#status')).toBe('echo: from the browser');
    } finally {
      await browser.close();
    }
  });
});

/** A client of sandgate.v1.Sandgate (CreateServiceLink) with the admin token. */
function sandgateClient(address: string): AnyClient {
  const Ctor = makeGenericClientConstructor(serviceDefinition('sandgate.v1.Sandgate'), 'Sandgate');
  return new Ctor(address, grpcCredentials.createInsecure(), { interceptors: [bearerInterceptor(cluster.token)] }) as unknown as AnyClient;
}

describe('the four gRPC methods (openshell-v1-more.md §7)', () => {
  it('checks names, ports and the sandbox, with upstream messages', async () => {
    const expose = (req: object) => grpcError(unaryCall(client, 'ExposeService', { target_port: 80, ...req }));
    expect(await expose({ sandbox: '' })).toEqual({ code: grpcStatus.INVALID_ARGUMENT, details: 'sandbox is required' });
    expect(await expose({ sandbox: 'a'.repeat(20) })).toEqual({ code: grpcStatus.INVALID_ARGUMENT, details: 'sandbox must be at most 19 characters for sandbox service routing' });
    expect(await expose({ sandbox: 'svcapp', service: 'we--b' })).toEqual({ code: grpcStatus.INVALID_ARGUMENT, details: "service must not contain '--'" });
    expect(await expose({ sandbox: 'svcapp', service: 'Web' })).toEqual({ code: grpcStatus.INVALID_ARGUMENT, details: 'service must be a lowercase DNS label' });
    expect(await expose({ sandbox: 'svcapp', target_port: 0 })).toEqual({ code: grpcStatus.INVALID_ARGUMENT, details: 'target_port must be in 1..=65535' });
    expect(await expose({ sandbox: 'svcapp', target_port: 70000 })).toEqual({ code: grpcStatus.INVALID_ARGUMENT, details: 'target_port must be in 1..=65535' });
    expect(await expose({ sandbox: 'nosuch' })).toEqual({ code: grpcStatus.NOT_FOUND, details: 'sandbox not found' });
    expect(await expose({ sandbox: 'svcapp', workspace: 'ghost' })).toEqual({ code: grpcStatus.NOT_FOUND, details: "workspace 'ghost' not found" });
    expect(await grpcError(unaryCall(client, 'GetService', { sandbox: 'svcapp', service: 'nope' }))).toEqual({ code: grpcStatus.NOT_FOUND, details: 'service endpoint not found' });
    expect(await grpcError(unaryCall(client, 'ListServices', { all_workspaces: true, workspace: 'default' }))).toEqual({
      code: grpcStatus.INVALID_ARGUMENT,
      details: 'all_workspaces and workspace are mutually exclusive',
    });
    expect(await grpcError(unaryCall(client, 'ListServices', { all_workspaces: true, sandbox: 'svcapp' }))).toEqual({
      code: grpcStatus.INVALID_ARGUMENT,
      details: 'sandbox filter is not supported with all_workspaces',
    });
    const member = openShellClient(gw(2), { token: memberToken });
    try {
      expect(await grpcError(unaryCall(member, 'ListServices', { all_workspaces: true }))).toEqual({
        code: grpcStatus.PERMISSION_DENIED,
        details: 'platform admin role required for cross-workspace operations',
      });
    } finally {
      member.close();
    }
    // deleted=false with OK (proto3: the default value is not on the wire).
    expect((await unaryCall<{ deleted?: boolean }>(client, 'DeleteService', { sandbox: 'svcapp', service: 'nope' })).deleted ?? false).toBe(false);
  });

  it('upserts by key (same id, version + 1, domain always true) and lists oldest first', async () => {
    const a = await unaryCall<{ endpoint: { metadata: { id: string; resource_version: number }; domain: boolean } }>(client, 'ExposeService', {
      sandbox: 'svcapp',
      service: 'tmp',
      target_port: 9000,
      domain: false,
    });
    expect(a.endpoint.domain).toBe(true);
    expect(a.endpoint.metadata.resource_version).toBe(1);
    const b = await unaryCall<{ endpoint: { metadata: { id: string; resource_version: number }; target_port: number } }>(client, 'ExposeService', {
      sandbox: 'svcapp',
      service: 'tmp',
      target_port: 9001,
    });
    expect(b.endpoint.metadata).toMatchObject({ id: a.endpoint.metadata.id, resource_version: 2 });
    expect(b.endpoint.target_port).toBe(9001);
    const list = await unaryCall<{ services: { endpoint: { metadata: { name: string } } }[] }>(client, 'ListServices', { sandbox: 'svcapp' });
    expect(list.services.map((s) => s.endpoint.metadata.name)).toEqual(['svcapp--web', 'svcapp--other', 'svcapp', 'svcapp--tmp']);
    expect((await unaryCall<{ services: unknown[] }>(client, 'ListServices', { limit: 1, offset: 1 })).services).toHaveLength(1);
    expect(await unaryCall(client, 'DeleteService', { sandbox: 'svcapp', service: 'tmp' })).toEqual({ deleted: true });
    // Each change is a line of the sandbox's gateway log (upstream's audit event).
    await waitFor('audit lines', async () => {
      const logs = (await runCli(['logs', 'svcapp', '--source', 'gateway', '-n', '500'], { gateway: gw(1) })).stdout.toString();
      return ['svcapp--tmp created: 127.0.0.1:9000', 'svcapp--tmp updated: 127.0.0.1:9001', 'svcapp--tmp deleted'].every((l) => logs.includes(`service endpoint ${l}`));
    });
  });

  it('the CLI: expose prints the URL, list the table, delete of nothing is an error exit', async () => {
    const exposed = await runCli(['service', 'expose', 'svcapp', '8000', 'cli'], { gateway: gw(2) });
    expect(exposed.stdout.toString()).toBe(`Exposed service cli on sandbox svcapp -> 127.0.0.1:8000\nURL: http://default--svcapp--cli.openshell.localhost:${new URL(httpUrl(2)).port}/\n`);
    const list = await runCli(['service', 'list', 'svcapp'], { gateway: gw(0) });
    expect(list.stdout.toString()).toMatch(/^SANDBOX\s+SERVICE\s+TARGET\s+URL\n/);
    expect(list.stdout.toString()).toMatch(/svcapp\s+-\s+127\.0\.0\.1:8000\s+http:\/\/default--svcapp\.openshell\.localhost:\d+\/\n/);
    expect((await runCli(['service', 'delete', 'svcapp', 'cli'], { gateway: gw(1) })).stdout.toString()).toBe('Deleted service cli on sandbox svcapp\n');
    const again = await runCli(['service', 'delete', 'svcapp', 'cli'], { gateway: gw(1) });
    expect(again.code).toBe(1);
    expect(again.stderr).toBe('error: delete service failed: service endpoint not found\n');
    const bad = await runCli(['service', 'expose', 'svcapp', '0'], { gateway: gw(1) });
    expect(bad.stderr).toBe('error: expose service failed: invalid request: target_port must be in 1..=65535\n');
  });
});

describe('REST management routes', () => {
  const api = async (method: string, path: string, body?: unknown, token: string | null = cluster.token) => {
    const res = await fetch(`${httpUrl(1)}/v1${path}`, {
      method,
      headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      body: body !== undefined ? JSON.stringify(body) : undefined,
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };

  it('expose, get, list, link and delete through the same service code as gRPC', async () => {
    const put = await api('PUT', '/sandboxes/svcapp/services/rest', { target_port: PORT });
    expect(put.status).toBe(200);
    expect(put.body.url).toBe(`http://default--svcapp--rest.openshell.localhost:${new URL(httpUrl(1)).port}/`);
    expect((await api('GET', '/sandboxes/svcapp/services/rest')).body).toMatchObject({ endpoint: { service_name: 'rest', target_port: PORT, domain: true } });
    expect((await api('GET', '/sandboxes/svcapp/services/-')).body).toMatchObject({ endpoint: { service_name: '', sandbox_name: 'svcapp' } });
    const listed = (await api('GET', '/sandboxes/svcapp/services')).body.services as { endpoint: { service_name: string } }[];
    expect(listed.map((s) => s.endpoint.service_name)).toContain('rest');
    expect(((await api('GET', '/services')).body.services as unknown[]).length).toBeGreaterThanOrEqual(4);
    const linked = await api('POST', '/sandboxes/svcapp/services/rest/links', { expires_in_seconds: 60 });
    expect(linked.status).toBe(200);
    const search = new URL(linked.body.url as string).search;
    expect((await serviceRequest(httpUrl(0), host(0, 'default--svcapp--rest'), `/hello${search}`)).status).toBe(303);
    expect((await api('DELETE', '/sandboxes/svcapp/services/rest')).body).toEqual({ deleted: true });
    expect((await api('DELETE', '/sandboxes/svcapp/services/rest')).body).toEqual({ deleted: false });
  });

  it('refuses without a token, an unknown field, a bad port and an unknown service, in the one error shape', async () => {
    expect(await api('GET', '/sandboxes/svcapp/services', undefined, null)).toMatchObject({ status: 401, body: { error: { code: 'UNAUTHENTICATED' } } });
    const unknown = await api('PUT', '/sandboxes/svcapp/services/x', { target_port: 1, domain: false });
    expect(unknown).toMatchObject({ status: 400, body: { error: { code: 'INVALID_ARGUMENT' } } });
    expect(JSON.stringify(unknown.body)).toContain('additional properties');
    expect(await api('PUT', '/sandboxes/svcapp/services/x', { target_port: 0 })).toMatchObject({
      status: 400,
      body: { error: { code: 'INVALID_ARGUMENT', message: 'target_port must be in 1..=65535' } },
    });
    expect(await api('GET', '/sandboxes/svcapp/services/nope')).toMatchObject({ status: 404, body: { error: { message: 'service endpoint not found' } } });
    expect(await api('POST', '/sandboxes/svcapp/services/web/links', { expires_in_seconds: 8 * 86400 })).toMatchObject({ status: 400, body: { error: { code: 'INVALID_ARGUMENT' } } });
    expect((await api('GET', '/sandboxes/svcapp/services/web', undefined, otherToken)).status).toBe(404);
  });
});

describe('the one access rule', () => {
  it('after StopSandbox every replica answers 412; after the delete 404 and the records are gone', async () => {
    const stop = await runCli(['sandbox', 'stop', 'svcapp'], { gateway: gw(1) });
    expect(stop.code, stop.stderr).toBe(0);
    await waitFor('stopped', async () => (await serviceRequest(httpUrl(0), web(0), '/hello', { headers: bearer() })).status === 412, 30_000, 200);
    for (let i = 0; i < 3; i++) {
      const res = await serviceRequest(httpUrl(i), web(i), '/hello', { headers: bearer() });
      expect(res.status, `replica ${i}`).toBe(412);
      expect(res.body.toString()).toBe('Sandbox is not ready\n');
      await expect(wsEcho(i, 'default--svcapp--web', 'x', bearer())).rejects.toThrow('websocket refused: 412');
    }
    const del = await runCli(['sandbox', 'delete', 'svcapp'], { gateway: gw(2) });
    expect(del.code, del.stderr).toBe(0);
    await waitFor('deleted', async () => (await serviceRequest(httpUrl(0), web(0), '/hello', { headers: bearer() })).status === 404, 30_000, 200);
    for (let i = 0; i < 3; i++) expect((await serviceRequest(httpUrl(i), web(i), '/hello', { headers: bearer() })).status, `replica ${i}`).toBe(404);
    expect(await unaryCall(client, 'ListServices', {})).toEqual({ services: [] });
    // One EXISTS per key: on a cluster the two are in different slots.
    expect(await r.exists(keysFor(r).sandboxServices(sbx.id))).toBe(0);
    expect(await r.exists(keysFor(r).workspaceServices('default'))).toBe(0);
  });
});

describe('coverage of the API description', () => {
  it('every operation this file owns in /openapi.json was answered with a success', async () => {
    await expectOwnedOperationsServed('services.test.ts', cluster.replicas.map((x) => x.httpUrl));
  });
});
