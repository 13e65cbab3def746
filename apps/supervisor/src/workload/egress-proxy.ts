// The sandbox's only way out: an HTTP proxy the supervisor serves on a socket inside the
// workload's network namespace (127.0.0.1:<port> there, handed over by the netns agent), while
// its outgoing connections leave from the supervisor's own namespace. Workloads have no route
// anywhere else, so every connection out of the sandbox passes the policy check here.
//
// Why HTTP CONNECT (plus absolute-form `http://` requests): it is what HTTP_PROXY/HTTPS_PROXY
// make every common client speak, with the target named before any byte is relayed, so refusing
// is a status line sent at once (403 + reason), never a hang. Enforcement is L4: once allowed,
// bytes are relayed untouched to the checked address and nowhere else, so a client reusing the
// connection for another request can only ever reach that same address.
//
// The name is checked before any DNS lookup (a refused host costs nothing and leaks no query);
// the addresses it resolves to are checked next, and the proxy connects to exactly those
// addresses: no second lookup that a rebinding DNS server could answer with 127.0.0.1.
// The policy is swapped atomically (setPolicy): each connection is decided on the policy current
// when its request arrived; established connections are left alone.
import dns from 'node:dns/promises';
import net from 'node:net';
import os from 'node:os';
import { decideEgress, formatIp, parseIp, type EgressPolicy } from '@sandgate/core/egress';
import { sandboxPolicyCodec } from '@sandgate/protocols/supervisor-wire';
import type { Logger } from '@sandgate/telemetry/log';

const MAX_HEAD_BYTES = 16 * 1024;
const HEAD_TIMEOUT_MS = 30_000;
const CONNECT_TIMEOUT_MS = 10_000;
const LOOKUP_TIMEOUT_MS = 10_000;
/** Connections the proxy serves at once: a workload opening sockets in a loop must not exhaust the supervisor's descriptors. */
export const MAX_PROXY_CONNECTIONS = 1024;

const policyCodec = sandboxPolicyCodec<EgressPolicy>();

/** Decodes SandboxPolicy bytes (empty: no policy, which denies everything). Throws on bad bytes. */
export function decodePolicy(bytes: Uint8Array): EgressPolicy {
  if (bytes.byteLength === 0) return {};
  return policyCodec.decode(bytes);
}

export interface Target {
  host: string;
  port: number;
  /** CONNECT tunnel, or a plain request forwarded as is. */
  tunnel: boolean;
}

/** Parses the request line of a proxy request; a string is the reason it cannot be served. */
export function parseProxyRequest(line: string): Target | string {
  const m = /^([A-Z]+) (\S+) HTTP\/1\.[01]$/.exec(line);
  if (!m) return 'malformed request line';
  const [, method, target] = m;
  if (method === 'CONNECT') {
    const t = /^(\[[0-9A-Fa-f:.]+\]|[^:[\]/]+):(\d{1,5})$/.exec(target!);
    if (!t) return 'CONNECT needs host:port';
    return { host: t[1]!.replace(/^\[|\]$/g, ''), port: Number(t[2]), tunnel: true };
  }
  const u = /^http:\/\/(\[[0-9A-Fa-f:.]+\]|[^:[\]/?#@]+)(?::(\d{1,5}))?(?:[/?#]|$)/i.exec(target!);
  if (!u) return 'only CONNECT and absolute-form http:// requests are proxied';
  return { host: u[1]!.replace(/^\[|\]$/g, ''), port: u[2] ? Number(u[2]) : 80, tunnel: false };
}

const REASONS: Record<number, string> = {
  400: 'Bad Request',
  403: 'Forbidden',
  408: 'Request Timeout',
  431: 'Request Header Fields Too Large',
  502: 'Bad Gateway',
  504: 'Gateway Timeout',
};

function answer(socket: net.Socket, status: number, message: string): void {
  const body = `sandgate: ${message}\n`;
  try {
    socket.end(
      `HTTP/1.1 ${status} ${REASONS[status]}\r\nContent-Type: text/plain; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  } catch {
    socket.destroy();
  }
  // The client may not read its answer: do not keep the socket for ever.
  setTimeout(() => socket.destroy(), 5_000).unref();
}

/** Ends our side; a peer that never closes its own is dropped after a while. */
function endThenDrop(socket: net.Socket): void {
  socket.end();
  setTimeout(() => socket.destroy(), 30_000).unref();
}

/** The addresses of the supervisor's host (its namespace's interfaces), read at each decision. */
function localAddresses(): string[] {
  try {
    return Object.values(os.networkInterfaces())
      .flatMap((list) => list ?? [])
      .map((a) => a.address.replace(/%.*$/, ''));
  } catch {
    return [];
  }
}

async function resolve(host: string): Promise<string[]> {
  const literal = parseIp(host);
  if (literal) return [formatIp(literal)];
  let timer: NodeJS.Timeout | undefined;
  try {
    const found = await Promise.race([
      dns.lookup(host, { all: true, verbatim: true }),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error('lookup timed out')), LOOKUP_TIMEOUT_MS);
      }),
    ]);
    return found.map((a) => a.address);
  } finally {
    clearTimeout(timer);
  }
}

function connectFirst(addresses: string[], port: number): Promise<net.Socket> {
  return new Promise((resolvePromise, reject) => {
    const deadline = Date.now() + CONNECT_TIMEOUT_MS;
    let lastError: Error = new Error('no address');
    const attempt = (i: number) => {
      if (i >= addresses.length || Date.now() >= deadline) return reject(lastError);
      const s = net.connect({ host: addresses[i]!, port, allowHalfOpen: true });
      const timer = setTimeout(() => s.destroy(Object.assign(new Error('connect timed out'), { code: 'ETIMEDOUT' })), deadline - Date.now());
      s.once('connect', () => {
        clearTimeout(timer);
        s.removeAllListeners('error');
        resolvePromise(s);
      });
      s.once('error', (err) => {
        clearTimeout(timer);
        lastError = err;
        attempt(i + 1);
      });
    };
    attempt(0);
  });
}

export class EgressProxy {
  private policy: EgressPolicy;
  private readonly server: net.Server;
  private readonly log: Logger;
  private readonly sockets = new Set<net.Socket>();

  constructor(server: net.Server, policy: EgressPolicy, log: Logger) {
    this.server = server;
    this.policy = policy;
    this.log = log.child({ component: 'egress' });
    // Half-closes pass through (a client that sent its whole request may still read the answer).
    (server as net.Server & { allowHalfOpen: boolean }).allowHalfOpen = true;
    server.maxConnections = MAX_PROXY_CONNECTIONS;
    server.on('connection', (socket: net.Socket) => this.onConnection(socket));
    server.on('error', (err) => this.log.warn('egress proxy socket error', { err }));
  }

  /** New connections follow `policy` from now on. */
  setPolicy(policy: EgressPolicy): void {
    this.policy = policy;
  }

  close(): void {
    this.server.close();
    for (const s of this.sockets) s.destroy();
  }

  private track(socket: net.Socket): void {
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
  }

  private onConnection(client: net.Socket): void {
    this.track(client);
    client.on('error', () => client.destroy());
    let head = Buffer.alloc(0);
    const timer = setTimeout(() => answer(client, 408, 'no complete request in time'), HEAD_TIMEOUT_MS);
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) {
        if (head.length > MAX_HEAD_BYTES) {
          client.off('data', onData);
          clearTimeout(timer);
          answer(client, 431, 'request head too large');
        }
        return;
      }
      client.off('data', onData);
      client.pause();
      clearTimeout(timer);
      const requestLine = head.subarray(0, head.indexOf('\r\n')).toString('latin1');
      void this.serve(client, requestLine, head, end + 4);
    };
    client.on('data', onData);
    client.once('end', () => clearTimeout(timer));
  }

  private async serve(client: net.Socket, requestLine: string, head: Buffer, bodyStart: number): Promise<void> {
    const target = parseProxyRequest(requestLine);
    if (typeof target === 'string') {
      this.log.info('egress request refused', { reason: target });
      return answer(client, 400, target);
    }
    const { host, port } = target;
    const policy = this.policy;
    const local = { localAddresses: localAddresses() };
    const byName = decideEgress(policy, host, port, undefined, local);
    if (!byName.allowed) return this.refuse(client, host, port, byName.reason);

    let addresses: string[];
    try {
      addresses = await resolve(host);
    } catch (err) {
      this.log.info('egress lookup failed', { host, port, err: (err as Error).message });
      return answer(client, 502, `cannot resolve ${host}: ${(err as Error).message}`);
    }
    const decision = decideEgress(policy, host, port, addresses, local);
    if (!decision.allowed) return this.refuse(client, host, port, decision.reason);

    let upstream: net.Socket;
    try {
      upstream = await connectFirst(addresses, port);
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      this.log.info('egress connect failed', { host, port, err: e.message });
      return answer(client, e.code === 'ETIMEDOUT' ? 504 : 502, `cannot connect to ${host}:${port}: ${e.message}`);
    }
    if (client.destroyed) return void upstream.destroy();
    this.track(upstream);
    this.log.debug('egress allowed', { host, port, rule: decision.rule, address: upstream.remoteAddress });
    upstream.on('error', () => upstream.destroy());
    client.on('error', () => upstream.destroy());
    // One side gone: the other gets what is still queued, then an end (never a cut-off answer).
    upstream.once('close', (hadError) => (hadError ? client.destroy() : endThenDrop(client)));
    client.once('close', (hadError) => (hadError ? upstream.destroy() : endThenDrop(upstream)));
    if (target.tunnel) {
      client.write('HTTP/1.1 200 Connection established\r\n\r\n');
      if (head.length > bodyStart) upstream.write(head.subarray(bodyStart));
    } else {
      upstream.write(head);
    }
    client.pipe(upstream);
    upstream.pipe(client);
    client.resume();
  }

  private refuse(client: net.Socket, host: string, port: number, reason: string): void {
    this.log.info('egress refused', { host, port, reason });
    answer(client, 403, `egress refused: ${reason}`);
  }
}
