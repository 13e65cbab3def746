// HTTP SERVER spans for the replica's fastify port (OTel HTTP semantic conventions): parented on
// the caller's `traceparent` header, named `METHOD route`, ended with the response's status.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { extractContext, failSpan, SpanKind, startSpan, tracingEnabled, type Span, type TraceCarrier } from '@sandgate/telemetry';

const spans = new WeakMap<FastifyRequest, Span>();

export function installHttpTracing(app: FastifyInstance): void {
  app.addHook('onRequest', async (req) => {
    if (!tracingEnabled()) return;
    const carrier: TraceCarrier = {};
    if (typeof req.headers.traceparent === 'string') carrier.traceparent = req.headers.traceparent;
    if (typeof req.headers.tracestate === 'string') carrier.tracestate = req.headers.tracestate;
    const route = req.routeOptions.url ?? req.url.split('?')[0]!;
    const { span } = startSpan(`${req.method} ${route}`, {
      kind: SpanKind.SERVER,
      parent: extractContext(carrier),
      attributes: { 'http.request.method': req.method, 'http.route': route, 'url.path': req.url.split('?')[0]!, 'url.scheme': req.protocol },
    });
    spans.set(req, span);
  });
  app.addHook('onResponse', async (req, reply) => {
    const span = spans.get(req);
    if (!span) return;
    spans.delete(req);
    span.setAttribute('http.response.status_code', reply.statusCode);
    if (reply.statusCode >= 500) failSpan(span, { details: `HTTP ${reply.statusCode}` });
    span.end();
  });
}
