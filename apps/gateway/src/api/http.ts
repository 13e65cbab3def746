// The replica's HTTP surface: liveness, readiness and metrics. Readiness means this replica can
// do its job: Redis answers and the replica's liveness key is registered.
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
}

export function buildHttp(deps: HttpDeps): FastifyInstance {
  // Typed as the plain-HTTP instance either way: the routes and listen() do not differ.
  // removeAdditional off: a field a schema does not declare is refused (400 naming it), never
  // silently dropped (fastify's default), so no request field is accepted and ignored.
  const ajv = { customOptions: { removeAdditional: false as const } };
  const app = (deps.https ? Fastify({ logger: false, https: deps.https, ajv }) : Fastify({ logger: false, ajv })) as unknown as FastifyInstance;
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
