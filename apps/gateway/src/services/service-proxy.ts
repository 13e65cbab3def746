// The exposed-service proxy, on every replica's HTTP port (openshell-v1-behaviour.md §3): a request
// whose Host is `<ws>--<sandbox>[--<service>].<service domain>` is served here, before fastify's
// router (api/http.ts routes it). The host names an endpoint record; the caller must be allowed to
// use the endpoint's workspace (bearer token, private by default) or present a signed public link
// (service-links.ts); the sandbox must be serving (the one access rule); then one TCP channel per
// request goes into the sandbox to 127.0.0.1:<target_port> through ExecRouter.openTcp (relayed to
// the owner replica from any replica) and HTTP/1.1 is spoken over it, streamed both ways.
// WebSocket upgrades pass through: after the sandbox's 101, raw bytes both ways.
//
// Answers of the proxy itself are plain text, as upstream's: 404 unknown endpoint (or a workspace
// the caller may not use: existence is not leaked), 401 no or bad credentials or an expired link,
// 403 a forged link, 412 the sandbox is not serving, 502 the service cannot be reached.
import http, { type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { parseServiceHost, isServiceHost } from '@sandgate/core';
import type { ServiceEndpoint } from '@sandgate/protocols';
import type { StoredSandbox } from '@sandgate/store';
import type { Logger, Metrics } from '@sandgate/telemetry';
import type { Authenticator } from '../auth/authenticator.ts';
import { requireServing, type WorkspaceAccess } from '../api/access.ts';
import { httpCaller } from '../api/rest/gate.ts';
import type { ExecRouter } from '../relay/exec-router.ts';
import { tcpOpenFor } from '../ssh/tcp-target.ts';
import type { ServiceEndpointService } from './service-endpoints.ts';
import {
  LINK_COOKIE,
  LINK_EXPIRY_PARAM,
  LINK_SIGNATURE_PARAM,
  cookieHeaderWithout,
  linkCookieValue,
  parseCookies,
  parseLinkCookie,
  type ServiceLinks,
} from './service-links.ts';
import { TcpPathSocket } from './tcp-path-socket.ts';

export interface ServiceProxyDeps {
  services: ServiceEndpointService;
  links: ServiceLinks;
  authenticator: Authenticator;
  workspaces: WorkspaceAccess;
  router: Pick<ExecRouter, 'openTcp' | 'sessionLive'>;
  /** The configured base domain of service hosts. */
  domain: string;
  /** The public scheme is https: the link cookie is Secure. */
  secureCookies: boolean;
  log: Logger;
  metrics: Metrics;
}

type Decision =
  | { kind: 'refuse'; status: number; message: string; headers?: Record<string, string> }
  | { kind: 'link'; location: string; cookie: string }
  | { kind: 'proxy'; endpoint: ServiceEndpoint; sandbox: StoredSandbox; path: string };

const refuse = (status: number, message: string, headers?: Record<string, string>): Decision => ({ kind: 'refuse', status, message, headers });

/** Hop-by-hop headers (RFC 9110 §7.6.1) and the gateway's own credentials: never forwarded. */
const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade'];
const GATEWAY_CREDENTIALS = ['authorization', 'cf-access-jwt-assertion', 'x-forwarded-client-cert', 'x-ssl-client-cert', 'x-client-cert'];
/** Cookies the service must not see: the gateway's link cookie, and upstream's CF_Authorization. */
const DROPPED_COOKIES = new Set([LINK_COOKIE, 'CF_Authorization']);

const REASONS: Record<number, string> = { 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 412: 'Precondition Failed', 500: 'Internal Server Error', 502: 'Bad Gateway' };

export class ServiceProxy {
  private readonly deps: ServiceProxyDeps;

  constructor(deps: ServiceProxyDeps) {
    this.deps = deps;
  }

  /** Is this request for a service host (then it is the proxy's, whatever it names)? */
  claims(req: IncomingMessage): boolean {
    return isServiceHost(req.headers.host, this.deps.domain);
  }

  /** A plain HTTP request to a service host. */
  handleRequest(req: IncomingMessage, res: ServerResponse): void {
    const started = performance.now();
    res.once('close', () =>
      this.deps.metrics.record('http.server.request.duration', (performance.now() - started) / 1000, {
        'http.request.method': req.method ?? '',
        'http.route': 'service-proxy',
        'http.response.status_code': String(res.statusCode),
      }),
    );
    this.decide(req, false)
      .then(async (decision) => {
        if (decision.kind === 'refuse') return void sendPlain(res, decision.status, decision.message, decision.headers);
        if (decision.kind === 'link') {
          res.writeHead(303, { location: decision.location, 'set-cookie': decision.cookie, 'cache-control': 'no-store', 'content-length': '0' });
          return void res.end();
        }
        await this.forward(req, res, decision);
      })
      .catch((err: unknown) => {
        this.deps.log.warn('service proxy failed', { err });
        if (!res.headersSent) sendPlain(res, 500, 'Service endpoint is not available');
        else res.destroy();
      });
  }

  /** An upgrade (WebSocket) request to a service host: the server's 'upgrade' event, routed here only. */
  handleUpgrade(req: IncomingMessage, client: Duplex, head: Buffer): void {
    client.on('error', () => client.destroy());
    this.decide(req, true)
      .then(async (decision) => {
        if (decision.kind === 'refuse') return writeRawError(client, decision.status, decision.message, decision.headers);
        if (decision.kind === 'link') return writeRawError(client, 500, 'Service endpoint is not available');
        await this.forwardUpgrade(req, client, head, decision);
      })
      .catch((err: unknown) => {
        this.deps.log.warn('service proxy upgrade failed', { err });
        writeRawError(client, 500, 'Service endpoint is not available');
      });
  }

  /** Who may reach what: the host, the credentials (link, cookie or bearer), the endpoint, the access rule. */
  private async decide(req: IncomingMessage, upgrade: boolean): Promise<Decision> {
    const { services, links } = this.deps;
    const address = parseServiceHost(req.headers.host, this.deps.domain);
    if (!address) return refuse(404, 'Service endpoint not found');
    const url = new URL(req.url ?? '/', 'http://service.invalid');
    const host = services.hostOf(address);
    const queryExpiry = url.searchParams.get(LINK_EXPIRY_PARAM);
    const querySignature = url.searchParams.get(LINK_SIGNATURE_PARAM);
    url.searchParams.delete(LINK_EXPIRY_PARAM);
    url.searchParams.delete(LINK_SIGNATURE_PARAM);
    const cleanPath = url.pathname + url.search;

    // A signed link in the query: checked against this host (and the endpoint's id), then turned
    // into the cookie and a redirect to the clean URL; an upgrade cannot follow a redirect and is
    // served on the query's signature directly.
    if (queryExpiry !== null || querySignature !== null) {
      const resolved = await services.resolve(address);
      const check = links.verify(host, resolved.endpoint?.metadata?.id ?? '', queryExpiry ?? '', querySignature ?? '');
      if (!check.ok) return linkRefused(check.reason);
      if (upgrade) return this.servable(resolved, cleanPath);
      const maxAge = Math.max(1, Math.floor((check.expiresAtMs - Date.now()) / 1000));
      const cookie = [
        `${LINK_COOKIE}=${linkCookieValue(check.expiresAtMs, querySignature!)}`,
        'Path=/',
        `Max-Age=${maxAge}`,
        'HttpOnly',
        'SameSite=Lax',
        ...(this.deps.secureCookies ? ['Secure'] : []),
      ].join('; ');
      return { kind: 'link', location: cleanPath, cookie };
    }

    // The link's cookie, unless the caller presents a bearer token (then that decides).
    const cookie = parseCookies(req.headers.cookie).get(LINK_COOKIE);
    if (cookie !== undefined && req.headers.authorization === undefined) {
      // The browser attaches the cookie to requests other pages make too: every service host is
      // the same site (`*.<domain>`), so SameSite=Lax alone would let another service's page
      // send this one requests. Refused, as upstream's loopback listener refuses cross-site ones.
      if (crossOrigin(req, this.deps.secureCookies)) return refuse(403, 'Cross-origin service request rejected');
      const parsed = parseLinkCookie(cookie);
      const resolved = await services.resolve(address);
      const check = links.verify(host, resolved.endpoint?.metadata?.id ?? '', parsed?.expiry ?? '', parsed?.signature ?? '');
      if (!check.ok) return linkRefused(check.reason);
      return this.servable(resolved, cleanPath);
    }

    // Private: a caller allowed to use the endpoint's workspace. Another workspace's endpoint is
    // 404, as if it did not exist.
    let caller;
    try {
      caller = await httpCaller(this.deps.authenticator, req.headers);
    } catch (err) {
      return refuse(401, `Authentication required: send Authorization: Bearer <token> of a caller of workspace '${address.workspace}', or use a signed link (sandgate service url) (${err instanceof Error ? err.message : String(err)})`, {
        'www-authenticate': 'Bearer realm="sandgate"',
      });
    }
    if (!(await this.deps.workspaces.mayUse(caller, address.workspace))) return refuse(404, 'Service endpoint not found');
    return this.servable(await services.resolve(address), cleanPath);
  }

  /** The endpoint exists and its sandbox is serving (the one access rule), or why not. */
  private async servable(resolved: { endpoint: ServiceEndpoint | null; sandbox: StoredSandbox | null }, path: string): Promise<Decision> {
    if (!resolved.endpoint) return refuse(404, 'Service endpoint not found');
    if (!resolved.sandbox) return refuse(404, 'Service endpoint is not available');
    try {
      await requireServing(this.deps.router, resolved.sandbox);
    } catch {
      return refuse(412, 'Sandbox is not ready');
    }
    return { kind: 'proxy', endpoint: resolved.endpoint, sandbox: resolved.sandbox, path };
  }

  /** One TCP channel into the sandbox to the endpoint's port, as a socket. */
  private async connect(endpoint: ServiceEndpoint): Promise<TcpPathSocket> {
    const sandboxId = endpoint.sandbox_id!;
    const target = { kind: 'tcp' as const, host: '127.0.0.1', port: endpoint.target_port! };
    const path = await this.deps.router.openTcp(sandboxId, tcpOpenFor(randomUUID(), sandboxId, target, endpoint.metadata?.id ?? ''));
    return new TcpPathSocket(path);
  }

  private async forward(req: IncomingMessage, res: ServerResponse, target: Extract<Decision, { kind: 'proxy' }>): Promise<void> {
    let socket: TcpPathSocket;
    try {
      socket = await this.connect(target.endpoint);
    } catch (err) {
      this.deps.log.debug('service endpoint not reachable', { sandboxId: target.endpoint.sandbox_id, err });
      return sendPlain(res, 502, 'Service endpoint is not reachable');
    }
    socket.on('error', () => undefined);
    const upstream = http.request({
      method: req.method,
      path: target.path,
      headers: forwardedHeaders(req, target.endpoint.target_port!, false, this.deps.secureCookies),
      createConnection: () => socket as never,
    });
    upstream.on('response', (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.statusMessage, responseHeaders(answer.headers));
      // pipe(): streamed, with back-pressure from the client back into the sandbox.
      answer.pipe(res);
      answer.on('error', () => res.destroy());
    });
    upstream.on('error', (err) => {
      this.deps.log.debug('service request failed', { sandboxId: target.endpoint.sandbox_id, err });
      if (!res.headersSent) sendPlain(res, 502, 'Service endpoint is not reachable');
      else res.destroy();
    });
    // The client going away mid-request or mid-response closes the channel into the sandbox.
    res.once('close', () => {
      if (!res.writableFinished) {
        upstream.destroy();
        socket.destroy();
      }
    });
    req.pipe(upstream);
  }

  private async forwardUpgrade(req: IncomingMessage, client: Duplex, head: Buffer, target: Extract<Decision, { kind: 'proxy' }>): Promise<void> {
    let socket: TcpPathSocket;
    try {
      socket = await this.connect(target.endpoint);
    } catch {
      return writeRawError(client, 502, 'Service endpoint is not reachable');
    }
    socket.on('error', () => undefined);
    if (client.destroyed) return void socket.destroy();
    const upstream = http.request({
      method: req.method,
      path: target.path,
      headers: forwardedHeaders(req, target.endpoint.target_port!, true, this.deps.secureCookies),
      createConnection: () => socket as never,
    });
    upstream.on('upgrade', (answer, upstreamSocket: Duplex, upstreamHead: Buffer) => {
      client.write(rawHead(101, answer.statusMessage || 'Switching Protocols', pairsWithout(answer.rawHeaders, LINK_COOKIE)));
      if (upstreamHead.length > 0) client.write(upstreamHead);
      if (head.length > 0) upstreamSocket.write(head);
      // Raw bytes both ways from here, each side's end or failure closing the other.
      upstreamSocket.pipe(client);
      client.pipe(upstreamSocket);
      upstreamSocket.on('error', () => client.destroy());
      client.on('error', () => upstreamSocket.destroy());
      upstreamSocket.once('close', () => client.destroy());
      client.once('close', () => upstreamSocket.destroy());
    });
    // The service refused the upgrade: its answer goes back as it is, then the connection closes.
    upstream.on('response', (answer) => {
      const headers: string[] = [];
      for (let i = 0; i + 1 < answer.rawHeaders.length; i += 2) {
        if (!HOP_BY_HOP.includes(answer.rawHeaders[i]!.toLowerCase())) headers.push(answer.rawHeaders[i]!, answer.rawHeaders[i + 1]!);
      }
      client.write(rawHead(answer.statusCode ?? 502, answer.statusMessage ?? '', [...pairsWithout(headers, LINK_COOKIE), 'Connection', 'close']));
      answer.pipe(client);
    });
    upstream.on('error', () => writeRawError(client, 502, 'Service endpoint is not reachable'));
    client.once('close', () => {
      upstream.destroy();
      socket.destroy();
    });
    upstream.end();
  }
}

/**
 * A request another origin's page made (a cross-site link's navigation excepted: following a
 * link to the service is how people open it). Fetch metadata where the browser sends it, else the
 * Origin header (WebSockets always carry it).
 */
function crossOrigin(req: IncomingMessage, https: boolean): boolean {
  const site = req.headers['sec-fetch-site'];
  const navigation = req.headers['sec-fetch-mode'] === 'navigate' && (req.method === 'GET' || req.method === 'HEAD');
  if (typeof site === 'string' && site !== 'same-origin' && site !== 'none' && !navigation) return true;
  const origin = req.headers.origin;
  if (typeof origin === 'string' && !navigation) {
    // 'null' is an opaque origin (a sandboxed frame, a data: page): never this service's.
    if (origin === 'null') return true;
    try {
      const o = new URL(origin);
      return o.host.toLowerCase() !== (req.headers.host ?? '').toLowerCase() || o.protocol !== (https ? 'https:' : 'http:');
    } catch {
      return true;
    }
  }
  return false;
}

function linkRefused(reason: 'expired' | 'invalid'): Decision {
  return reason === 'expired'
    ? refuse(401, 'This service link has expired: ask for a new one (sandgate service url)')
    : refuse(403, 'This service link is not valid for this service');
}

/** The request's headers as the sandbox's service gets them (upstream's rewrite rules). */
function forwardedHeaders(req: IncomingMessage, port: number, upgrade: boolean, https: boolean): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || name === 'host' || name === 'cookie') continue;
    if (GATEWAY_CREDENTIALS.includes(name)) continue;
    if (HOP_BY_HOP.includes(name) && !(upgrade && (name === 'upgrade' || name === 'connection'))) continue;
    out[name] = value;
  }
  const cookie = cookieHeaderWithout(req.headers.cookie, DROPPED_COOKIES);
  if (cookie) out.cookie = cookie;
  out.host = `127.0.0.1:${port}`;
  out['x-forwarded-host'] = req.headers.host ?? '';
  out['x-forwarded-proto'] = https ? 'https' : 'http';
  if (req.socket.remoteAddress) out['x-forwarded-for'] = req.socket.remoteAddress;
  return out;
}

/** The service's response headers as the client gets them: no hop-by-hop, no link cookie set by the service. */
function responseHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || HOP_BY_HOP.includes(name)) continue;
    if (name === 'set-cookie') {
      const kept = (value as string[]).filter((c) => !c.trim().startsWith(`${LINK_COOKIE}=`));
      if (kept.length > 0) out[name] = kept;
      continue;
    }
    out[name] = value;
  }
  return out;
}

/** rawHeaders pairs without a Set-Cookie of the link cookie. */
function pairsWithout(raw: string[], cookie: string): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (raw[i]!.toLowerCase() === 'set-cookie' && raw[i + 1]!.trim().startsWith(`${cookie}=`)) continue;
    out.push(raw[i]!, raw[i + 1]!);
  }
  return out;
}

/** A response head written on a raw socket: the status line and `rawHeaders` pairs as given. */
function rawHead(status: number, reason: string, rawHeaders: string[]): string {
  let head = `HTTP/1.1 ${status} ${reason}\r\n`;
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) head += `${rawHeaders[i]}: ${rawHeaders[i + 1]}\r\n`;
  return head + '\r\n';
}

function sendPlain(res: ServerResponse, status: number, message: string, headers: Record<string, string> = {}): void {
  const body = `${message}\n`;
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', 'content-length': String(Buffer.byteLength(body)), 'cache-control': 'no-store', ...headers });
  res.end(body);
}

/** An error answer on a raw (upgrade) socket, then close. */
function writeRawError(client: Duplex, status: number, message: string, headers: Record<string, string> = {}): void {
  if (client.destroyed) return;
  const body = `${message}\n`;
  const extra = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('');
  client.end(
    `HTTP/1.1 ${status} ${REASONS[status] ?? 'Error'}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}Connection: close\r\n\r\n${body}`,
  );
}

