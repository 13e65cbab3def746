// The replica's HTTP surface: liveness, readiness and metrics. Readiness means this replica can
// do its job: Redis answers and the replica's liveness key is registered.
import Fastify, { type FastifyInstance } from 'fastify';
import type { Metrics } from '@sandgate/telemetry';

export interface HttpDeps {
  replicaId: string;
  ready: () => Promise<{ ok: boolean; detail: string }>;
  metrics: Metrics;
  /** Debug faults this replica runs with: listed on /readyz so no one mistakes it for a safe one. */
  debugBreaks: readonly string[];
}

export function buildHttp(deps: HttpDeps): FastifyInstance {
  const app = Fastify({ logger: false });
  app.get('/healthz', async () => ({ status: 'ok', replica: deps.replicaId }));
  app.get('/readyz', async (_req, reply) => {
    const r = await deps.ready().catch((err: unknown) => ({ ok: false, detail: err instanceof Error ? err.message : String(err) }));
    reply.code(r.ok ? 200 : 503);
    const body = { status: r.ok ? 'ready' : 'not ready', detail: r.detail, replica: deps.replicaId };
    return deps.debugBreaks.length > 0 ? { ...body, debugBreaks: deps.debugBreaks } : body;
  });
  app.get('/metrics', async (_req, reply) => {
    reply.type('text/plain; version=0.0.4');
    return deps.metrics.render();
  });
  return app;
}
