// The replica's HTTP surface: liveness, readiness and metrics (and, registered by rest/index.ts,
// the /v1 API). Readiness means this replica can do its job: Redis answers and the replica's
// liveness key is registered. Requests for exposed-service hosts never reach fastify: the server
// hands them, upgrades included, to the service proxy first (services/service-proxy.ts).
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import type { Duplex } from 'node:stream';
import Fastify, { type FastifyInstance } from 'fastify';
import type { Metrics } from '@sandgate/telemetry';
import { installHttpTracing } from './http-tracing.ts';

export interface HttpDeps {
  /** The replica's certificate and key: the port serves HTTPS; null: plain HTTP. */
  https?: { cert: Buffer; key: Buffer } | null;
  replicaId: string;
  ready: () => Promise<{ ok: boolean; detail: string }>;
  metrics: Metrics;
  /** Debug faults this replica runs with: listed on /readyz so no one mistakes it for a safe one. */
  debugBreaks: readonly string[];
  /** Serves requests for exposed-service hosts (absent: every request is fastify's). */
  serviceProxy?: HostRouted;
}

/** What takes the requests of some hosts away from fastify. */
export interface HostRouted {
  claims(req: IncomingMessage): boolean;
  handleRequest(req: IncomingMessage, res: ServerResponse): void;
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void;
}

/**
 * The server under fastify: requests and upgrades whose host `routed` claims go to it alone; every
 * other request and upgrade to fastify alone. Upgrades are split at `emit`, so @fastify/websocket's
 * 'upgrade' listener never sees a service host's, and the proxy never sees the API's.
 */
function hostRoutingServer(tls: { cert: Buffer; key: Buffer } | null | undefined, routed: HostRouted) {
  return (
    fastifyHandler: (req: IncomingMessage, res: ServerResponse) => void,
    opts: { keepAliveTimeout?: number; requestTimeout?: number; connectionTimeout?: number; maxRequestsPerSocket?: number },
  ) => {
    const listener = (req: IncomingMessage, res: ServerResponse) => (routed.claims(req) ? routed.handleRequest(req, res) : fastifyHandler(req, res));
    const server = tls ? https.createServer(tls, listener) : http.createServer(listener);
    // The timeouts fastify gives a server it makes itself (a factory's server gets none of them):
    // no overall request deadline, so long uploads and streams are not cut.
    if (opts.keepAliveTimeout !== undefined) server.keepAliveTimeout = opts.keepAliveTimeout;
    if (opts.requestTimeout !== undefined) server.requestTimeout = opts.requestTimeout;
    if (opts.connectionTimeout !== undefined) server.setTimeout(opts.connectionTimeout);
    if (opts.maxRequestsPerSocket) server.maxRequestsPerSocket = opts.maxRequestsPerSocket;
    const emit = server.emit.bind(server) as (event: string | symbol, ...args: unknown[]) => boolean;
    server.emit = ((event: string | symbol, ...args: unknown[]) => {
      if (event === 'upgrade' && routed.claims(args[0] as IncomingMessage)) {
        routed.handleUpgrade(args[0] as IncomingMessage, args[1] as Duplex, args[2] as Buffer);
        return true;
      }
      return emit(event, ...args);
    }) as typeof server.emit;
    // Node treats a request as an upgrade only while 'upgrade' has a listener: this one keeps
    // service hosts' upgrades coming even before @fastify/websocket registers its own, and closes
    // other upgrades when nobody else would take them.
    server.on('upgrade', (_req: IncomingMessage, socket: Duplex) => {
      if (server.listenerCount('upgrade') === 1) socket.destroy();
    });
    return server;
  };
}

export function buildHttp(deps: HttpDeps): FastifyInstance {
  // Typed as the plain-HTTP instance either way: the routes and listen() do not differ.
  // Never accept a field and ignore it: ajv must refuse what a schema does not declare instead of
  // quietly dropping it (fastify's default removes such fields).
  const base = { logger: false, ajv: { customOptions: { removeAdditional: false } } } as const;
  const app = (
    deps.serviceProxy
      ? Fastify({ ...base, serverFactory: hostRoutingServer(deps.https, deps.serviceProxy) })
      : deps.https
        ? Fastify({ ...base, https: deps.https })
        : Fastify(base)
  ) as unknown as FastifyInstance;
  installHttpTracing(app);
  // http.server.request.duration; the route is the matched pattern (absent for a 404: no
  // unbounded label values from whatever paths a scanner tries).
  app.addHook('onResponse', async (req, reply) => {
    const route = req.routeOptions.url;
    deps.metrics.record('http.server.request.duration', reply.elapsedTime / 1000, {
      'http.request.method': req.method,
      ...(route ? { 'http.route': route } : {}),
      'http.response.status_code': String(reply.statusCode),
    });
  });
  app.get('/healthz', async () => ({ status: 'ok', replica: deps.replicaId }));
  app.get('/readyz', async (_req, reply) => {
    const r = await deps.ready().catch((err: unknown) => ({ ok: false, detail: err instanceof Error ? err.message : String(err) }));
    reply.code(r.ok ? 200 : 503);
    const body = { status: r.ok ? 'ready' : 'not ready', detail: r.detail, replica: deps.replicaId };
    return deps.debugBreaks.length > 0 ? { ...body, debugBreaks: deps.debugBreaks } : body;
  });
  app.get('/metrics', async (_req, reply) => {
    reply.type('text/plain; version=0.0.4');
    return await deps.metrics.render();
  });
  return app;
}
