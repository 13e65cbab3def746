// The supervisor's tracing (otel.ts startRelayedTracing): finished spans become OTLP JSON
// ExportTraceServiceRequests handed to `send`; while send refuses (no live session) they stay
// buffered, up to the bound, past which they are dropped and counted.
import { describe, expect, it } from 'vitest';
import { startRelayedTracing } from '../src/otel.ts';
import { extractContext, injectContext, startSpan } from '../src/tracing.ts';

describe('relayed tracing', () => {
  it('serialises spans as OTLP JSON for the control session, buffers while it is down, and drops past the bound', async () => {
    const sent: Uint8Array[] = [];
    let up = false;
    const tracing = await startRelayedTracing({
      attributes: { 'sandgate.sandbox.id': 'sbx-1', 'service.instance.id': 'run-1' },
      send: (bytes) => {
        if (!up) return false;
        sent.push(bytes);
        return true;
      },
      maxBuffered: 3,
      flushIntervalMs: 60_000,
    });
    try {
      const parent = { traceparent: `00-${'c'.repeat(32)}-${'d'.repeat(16)}-01` };
      for (let i = 0; i < 5; i++) startSpan(`s${i}`, { parent: extractContext(parent) }).span.end();
      tracing.flush();
      expect(sent).toHaveLength(0);
      expect(tracing.dropped()).toBe(2);
      up = true;
      tracing.flush();
      expect(sent).toHaveLength(1);
      const body = JSON.parse(Buffer.from(sent[0]!).toString('utf8')) as {
        resourceSpans: { resource: { attributes: { key: string; value: { stringValue?: string } }[] }; scopeSpans: { spans: { name: string; traceId: string; parentSpanId: string }[] }[] }[];
      };
      const resource = Object.fromEntries(body.resourceSpans[0]!.resource.attributes.map((a) => [a.key, a.value.stringValue]));
      expect(resource).toMatchObject({ 'service.name': 'sandgate-supervisor', 'sandgate.sandbox.id': 'sbx-1', 'service.instance.id': 'run-1' });
      const spans = body.resourceSpans[0]!.scopeSpans.flatMap((s) => s.spans);
      expect(spans.map((s) => s.name)).toEqual(['s0', 's1', 's2']);
      expect(spans.every((s) => s.traceId === 'c'.repeat(32) && s.parentSpanId === 'd'.repeat(16))).toBe(true);
      // The supervisor passes its exec's context on (an SSH channel, say) the same way.
      const { ctx } = startSpan('x', { parent: extractContext(parent) });
      expect(injectContext(ctx).traceparent).toMatch(new RegExp(`^00-${'c'.repeat(32)}-`));
    } finally {
      await tracing.shutdown();
    }
  });
});
