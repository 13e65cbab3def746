// Tracing as the rest of sandgate uses it: the `sandgate` tracer, W3C trace context in and out of
// plain carriers (`Record<string,string>`: gRPC metadata, proto `trace_context` maps, BullMQ job
// data), span helpers and the attribute names. Only `@opentelemetry/api` here: when no SDK was
// started (otel.ts) every call below is a no-op costing a flag check, so hot paths stay as they were.
import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Link,
  type Span,
  type TextMapGetter,
  isSpanContextValid,
} from '@opentelemetry/api';
import { readTraceIdsWith } from './log-core.ts';

export { SpanKind, SpanStatusCode, context as otelContext, trace as otelTrace, type Span, type Context, type Attributes };

// Log lines written inside an active span carry its ids (nothing outside a span, nor inside a
// non-sampled placeholder with no ids).
readTraceIdsWith(() => {
  const span = trace.getActiveSpan();
  if (!span) return {};
  const ctx = span.spanContext();
  return isSpanContextValid(ctx) ? { trace_id: ctx.traceId, span_id: ctx.spanId } : {};
});

/** The tracer every sandgate span comes from. */
export const TRACER_NAME = 'sandgate';

/** A W3C trace context carrier: `traceparent` and, when there is one, `tracestate`. */
export type TraceCarrier = Record<string, string>;

/** Span attribute names (sandgate's own under `sandgate.`; OTel semantic conventions where they exist). */
export const TraceAttr = {
  sandboxId: 'sandgate.sandbox.id',
  workspace: 'sandgate.workspace',
  execId: 'sandgate.exec.id',
  replicaId: 'sandgate.replica.id',
  /** `local`: the entry replica holds the session; `relayed`: it relayed to the owner replica. */
  execPath: 'sandgate.exec.path',
  exitCode: 'sandgate.exec.exit_code',
  timedOut: 'sandgate.exec.timed_out',
  /** timeout | cancel | disconnect | backstop */
  killReason: 'sandgate.exec.kill_reason',
  killed: 'sandgate.exec.killed',
  channelId: 'sandgate.tcp.channel_id',
  jobName: 'sandgate.job.name',
  jobId: 'sandgate.job.id',
  queue: 'messaging.destination.name',
  rpcSystem: 'rpc.system',
  rpcService: 'rpc.service',
  rpcMethod: 'rpc.method',
  rpcStatus: 'rpc.grpc.status_code',
} as const;

let enabled = false;
let spanSink: ((otlpJson: Uint8Array) => void) | null = null;

/** True once a tracer provider records spans in this process (otel.ts turns it on). */
export function tracingEnabled(): boolean {
  return enabled;
}

/** otel.ts only: tracing started (or stopped) in this process. */
export function setTracingEnabled(on: boolean, sink: ((otlpJson: Uint8Array) => void) | null = null): void {
  enabled = on;
  spanSink = on ? sink : null;
}

/**
 * Spans recorded elsewhere (a supervisor, relayed through its control session) as an OTLP JSON
 * ExportTraceServiceRequest: handed to this process's OTLP traces endpoint. False when this
 * process does not export traces (the bytes are dropped).
 */
export function relaySpans(otlpJson: Uint8Array): boolean {
  if (!spanSink) return false;
  spanSink(otlpJson);
  return true;
}

export function tracer() {
  return trace.getTracer(TRACER_NAME);
}

/** The W3C carrier of `ctx` (the active context by default); empty when tracing is off or nothing is traced. */
export function injectContext(ctx: Context = context.active()): TraceCarrier {
  const carrier: TraceCarrier = {};
  if (!enabled) return carrier;
  propagation.inject(ctx, carrier);
  return carrier;
}

const carrierGetter: TextMapGetter<TraceCarrier> = {
  keys: (c) => Object.keys(c),
  get: (c, key) => c[key],
};

/** The context a carrier names (on top of `base`), or `base` when it names none. */
export function extractContext(carrier: TraceCarrier | null | undefined, base: Context = ROOT_CONTEXT): Context {
  if (!enabled || !carrier || !carrier.traceparent) return base;
  return propagation.extract(base, carrier, carrierGetter);
}

/** A span link to the span a carrier names (the enqueue span of a job, say); none when it names none. */
export function linksFromCarrier(carrier: TraceCarrier | null | undefined, attributes?: Attributes): Link[] {
  if (!enabled || !carrier?.traceparent) return [];
  const spanContext = trace.getSpanContext(extractContext(carrier));
  return spanContext ? [{ context: spanContext, attributes }] : [];
}

export interface StartSpanOptions {
  kind?: SpanKind;
  attributes?: Attributes;
  links?: Link[];
  /** The parent: the active context unless given (ROOT_CONTEXT for a new trace). */
  parent?: Context;
}

/** A started span (a non-recording one when tracing is off) and the context that has it as parent. */
export function startSpan(name: string, opts: StartSpanOptions = {}): { span: Span; ctx: Context } {
  const parent = opts.parent ?? context.active();
  if (!enabled) return { span: trace.wrapSpanContext(INVALID), ctx: parent };
  const span = tracer().startSpan(name, { kind: opts.kind ?? SpanKind.INTERNAL, attributes: opts.attributes, links: opts.links }, parent);
  return { span, ctx: trace.setSpan(parent, span) };
}

const INVALID = { traceId: '00000000000000000000000000000000', spanId: '0000000000000000', traceFlags: 0 };

/** Runs `fn` inside a span that ends when it settles (ERROR status with the exception if it throws). */
export async function inSpan<T>(name: string, opts: StartSpanOptions, fn: (span: Span) => Promise<T>): Promise<T> {
  if (!enabled) return fn(trace.wrapSpanContext(INVALID));
  const { span, ctx } = startSpan(name, opts);
  try {
    return await context.with(ctx, () => fn(span));
  } catch (err) {
    failSpan(span, err);
    throw err;
  } finally {
    span.end();
  }
}

/** Marks a span failed: ERROR status, the error's message, and an exception event. */
export function failSpan(span: Span, err: unknown): void {
  if (!span.isRecording()) return;
  const message = err instanceof Error ? err.message : typeof err === 'object' && err && 'details' in err ? String((err as { details: unknown }).details) : String(err);
  span.setStatus({ code: SpanStatusCode.ERROR, message });
  if (err instanceof Error) span.recordException(err);
}

/** The span active right now (a non-recording one when none). */
export function activeSpan(): Span {
  return trace.getActiveSpan() ?? trace.wrapSpanContext(INVALID);
}

/** Runs `fn` with `ctx` active. */
export function withContext<T>(ctx: Context, fn: () => T): T {
  return enabled ? context.with(ctx, fn) : fn();
}
