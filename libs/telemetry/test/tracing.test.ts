// The propagation helpers (tracing.ts) and the env rules (otel.ts), against a real SDK tracer
// provider with an in-memory exporter: W3C carriers in and out, links, spans that fail, and
// nothing at all while tracing is off.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { context, ROOT_CONTEXT, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { propagation } from '@opentelemetry/api';
import {
  extractContext,
  injectContext,
  inSpan,
  linksFromCarrier,
  relaySpans,
  setTracingEnabled,
  SpanKind,
  startSpan,
  tracingEnabled,
  withContext,
} from '../src/tracing.ts';
import { otlpTracesHeaders, otlpTracesProtocol, otlpTracesUrl, tracingConfigured } from '../src/otel.ts';

const TRACEPARENT = /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/;

describe('while tracing is off', () => {
  it('injects nothing, extracts nothing, and spans do not record', () => {
    expect(tracingEnabled()).toBe(false);
    expect(injectContext()).toEqual({});
    const carrier = { traceparent: `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01` };
    expect(extractContext(carrier)).toBe(ROOT_CONTEXT);
    expect(linksFromCarrier(carrier)).toEqual([]);
    expect(startSpan('x').span.isRecording()).toBe(false);
    expect(relaySpans(new Uint8Array([1]))).toBe(false);
  });
});

describe('with a tracer provider', () => {
  const exporter = new InMemorySpanExporter();
  const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
  const relayed: Uint8Array[] = [];
  beforeAll(() => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    trace.setGlobalTracerProvider(provider);
    setTracingEnabled(true, (bytes) => relayed.push(bytes));
  });
  afterAll(async () => {
    setTracingEnabled(false);
    await provider.shutdown();
  });
  const finished = async () => {
    await provider.forceFlush();
    return exporter.getFinishedSpans();
  };

  it('a carrier injected inside a span names that span; extracting it parents the next hop on it', async () => {
    const { span, ctx } = startSpan('entry', { kind: SpanKind.SERVER, parent: ROOT_CONTEXT });
    const carrier = injectContext(ctx);
    expect(carrier.traceparent).toMatch(TRACEPARENT);
    expect(carrier.traceparent).toContain(span.spanContext().traceId);
    expect(carrier.traceparent).toContain(span.spanContext().spanId);
    // The next hop (another process, in life): its span is a child in the same trace.
    const hop = startSpan('owner', { parent: extractContext(carrier) });
    hop.span.end();
    span.end();
    const spans = await finished();
    const owner = spans.find((s) => s.name === 'owner')!;
    expect(owner.spanContext().traceId).toBe(span.spanContext().traceId);
    expect(owner.parentSpanContext?.spanId).toBe(span.spanContext().spanId);
  });

  it('the active context is what injectContext uses by default; tracestate rides along', () => {
    const carrier = { traceparent: `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01`, tracestate: 'vendor=x' };
    const out = withContext(extractContext(carrier), () => injectContext());
    expect(out).toEqual(carrier);
  });

  it('a carrier with no traceparent (or none at all) leaves the base context alone', () => {
    expect(extractContext({})).toBe(ROOT_CONTEXT);
    expect(extractContext(undefined)).toBe(ROOT_CONTEXT);
    expect(extractContext({ traceparent: 'garbage' })).toSatisfy((c: typeof ROOT_CONTEXT) => trace.getSpanContext(c) === undefined);
  });

  it('a job span links to its enqueue span, in a trace of its own', async () => {
    exporter.reset();
    const { span: enqueue, ctx } = startSpan('enqueue', { kind: SpanKind.PRODUCER, parent: ROOT_CONTEXT });
    const carrier = injectContext(ctx);
    enqueue.end();
    const { span: job } = startSpan('job', { kind: SpanKind.CONSUMER, parent: ROOT_CONTEXT, links: linksFromCarrier(carrier) });
    job.end();
    const done = (await finished()).find((s) => s.name === 'job')!;
    expect(done.links.map((l) => l.context.spanId)).toEqual([enqueue.spanContext().spanId]);
    expect(done.spanContext().traceId).not.toBe(enqueue.spanContext().traceId);
  });

  it('inSpan ends its span, makes it active, and marks it failed when fn throws', async () => {
    exporter.reset();
    const inner = await inSpan('ok', {}, async () => injectContext());
    await expect(inSpan('bad', {}, async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    const spans = await finished();
    const ok = spans.find((s) => s.name === 'ok')!;
    expect(inner.traceparent).toContain(ok.spanContext().spanId);
    const bad = spans.find((s) => s.name === 'bad')!;
    expect(bad.status).toMatchObject({ code: 2, message: 'boom' });
    expect(bad.events.map((e) => e.name)).toContain('exception');
  });

  it('relaySpans hands bytes to the sink otel.ts registered', () => {
    expect(relaySpans(new Uint8Array([7]))).toBe(true);
    expect(relayed.at(-1)).toEqual(new Uint8Array([7]));
  });
});

describe('OTEL_* rules', () => {
  it('tracing is configured by an OTLP endpoint or a traces exporter, and OTEL_SDK_DISABLED wins', () => {
    expect(tracingConfigured({})).toBe(false);
    expect(tracingConfigured({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' })).toBe(true);
    expect(tracingConfigured({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/v1/traces' })).toBe(true);
    expect(tracingConfigured({ OTEL_TRACES_EXPORTER: 'console' })).toBe(true);
    expect(tracingConfigured({ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' })).toBe(false);
    expect(tracingConfigured({ OTEL_SDK_DISABLED: 'true', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' })).toBe(false);
    expect(tracingConfigured({ OTEL_SDK_DISABLED: 'false', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' })).toBe(true);
  });

  it('the traces URL: the signal endpoint as is, else the base endpoint plus /v1/traces', () => {
    expect(otlpTracesUrl({})).toBeNull();
    expect(otlpTracesUrl({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318/' })).toBe('http://c:4318/v1/traces');
    expect(otlpTracesUrl({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://t/x' })).toBe('http://t/x');
    expect(otlpTracesProtocol({})).toBe('http/protobuf');
    expect(otlpTracesProtocol({ OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' })).toBe('http/json');
    expect(otlpTracesProtocol({ OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json' })).toBe('http/json');
    expect(otlpTracesHeaders({ OTEL_EXPORTER_OTLP_HEADERS: 'a=1,b=x%20y', OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'a=2' })).toEqual({ a: '2', b: 'x y' });
  });
});
