// Starting the OpenTelemetry SDK, configured only by the standard OTEL_* variables. Imported
// lazily (`@sandgate/telemetry/otel`) and loading the SDK only when tracing is configured, so a
// process that does not trace pays nothing for it.
//
// - startTracing(): a replica or worker. Off unless an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT
//   or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or OTEL_TRACES_EXPORTER (console, otlp) is set, and
//   always off with OTEL_SDK_DISABLED=true. Must run before ioredis is first imported: it
//   registers import-in-the-middle's loader hook (for ioredis only) so the ioredis
//   instrumentation can patch the ESM import. Supervisor spans relayed through control sessions
//   are posted to the OTLP traces endpoint (tracing.ts relaySpans).
// - startRelayedTracing(): the supervisor. Its spans are serialised as OTLP JSON and handed to
//   `send` (its control session): the sandbox needs no network path to the collector.
import { register } from 'node:module';
import type { Attributes } from '@opentelemetry/api';
import { setTracingEnabled, tracingEnabled } from './tracing.ts';

type Env = Record<string, string | undefined>;

/** Does the environment ask for traces? (The rest of the OTEL_* variables are read by the SDK.) */
export function tracingConfigured(env: Env): boolean {
  if ((env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase() === 'true') return false;
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  if (exporters.length > 0) return !exporters.every((e) => e === 'none');
  return Boolean(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || env.OTEL_EXPORTER_OTLP_ENDPOINT);
}

/**
 * Where OTLP/HTTP trace exports go: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as is, else
 * OTEL_EXPORTER_OTLP_ENDPOINT + `/v1/traces` (the OTLP spec's rule); null when neither is set.
 */
export function otlpTracesUrl(env: Env): string | null {
  if (env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) return env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (!base) return null;
  return base.replace(/\/+$/, '') + '/v1/traces';
}

/** The protocol of trace exports (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL; default http/protobuf). */
export function otlpTracesProtocol(env: Env): string {
  return (env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL || env.OTEL_EXPORTER_OTLP_PROTOCOL || 'http/protobuf').trim();
}

/** OTEL_EXPORTER_OTLP_HEADERS / _TRACES_HEADERS: `k=v,k2=v2`, values URL-encoded. */
export function otlpTracesHeaders(env: Env): Record<string, string> {
  const out: Record<string, string> = {};
  for (const raw of [env.OTEL_EXPORTER_OTLP_HEADERS, env.OTEL_EXPORTER_OTLP_TRACES_HEADERS]) {
    for (const pair of (raw ?? '').split(',')) {
      const i = pair.indexOf('=');
      if (i <= 0) continue;
      try {
        out[decodeURIComponent(pair.slice(0, i).trim())] = decodeURIComponent(pair.slice(i + 1).trim());
      } catch {
        // a malformed pair is skipped, as the SDK does
      }
    }
  }
  return out;
}

export interface TracingOptions {
  /** service.name unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES name one. */
  defaultServiceName: string;
  /** service.instance.id (a replica id): wins over the SDK's random one. */
  instanceId?: string;
  /** More resource attributes (they win over OTEL_RESOURCE_ATTRIBUTES). */
  attributes?: Attributes;
  /** The process environment, as the command parsed it (its OTEL_* variables decide). */
  env: Env;
  /** Where problems go (a relay post that failed, say); stderr when absent. */
  warn?: (msg: string, fields?: Record<string, unknown>) => void;
}

export interface RunningTracing {
  /** Flushes what is buffered and stops exporting. */
  shutdown(): Promise<void>;
  /** Supervisor span batches relayed so far, posted and dropped. */
  readonly relayed: { posted: number; dropped: number };
}

let running: RunningTracing | null = null;

/** How long a shutdown waits for the last exports. */
const SHUTDOWN_FLUSH_MS = 2_000;

/**
 * Starts process-wide tracing when the environment asks for it; null (and nothing loaded) when
 * it does not. Idempotent: several replicas in one process share the first start (the resource
 * then names the first replica; every replica span also carries `sandgate.replica.id`).
 */
export async function startTracing(opts: TracingOptions): Promise<RunningTracing | null> {
  const env = opts.env;
  if (running) return running;
  if (!tracingConfigured(env)) return null;
  // Before ioredis is imported: the ioredis instrumentation patches the module as it loads.
  // Only ioredis goes through the hook; every other import is left alone.
  try {
    if (!(env.OTEL_NODE_DISABLED_INSTRUMENTATIONS ?? '').split(',').some((n) => n.trim() === 'ioredis')) {
      register('import-in-the-middle/hook.mjs', import.meta.url, { data: { include: ['ioredis'] } });
    }
  } catch (err) {
    (opts.warn ?? defaultWarn)('ioredis instrumentation unavailable: the loader hook could not be registered', { err: String(err) });
  }
  // OTEL_NODE_DISABLED_INSTRUMENTATIONS=ioredis (the auto-instrumentations' variable): no Redis spans.
  const redisSpans = !(env.OTEL_NODE_DISABLED_INSTRUMENTATIONS ?? '').split(',').some((n) => n.trim() === 'ioredis');
  const [{ startNodeSdk }, { IORedisInstrumentation }, { defaultResource, resourceFromAttributes }] = await Promise.all([
    import('@opentelemetry/sdk-node'),
    import('@opentelemetry/instrumentation-ioredis'),
    import('@opentelemetry/resources'),
  ]);
  const sdk = startNodeSdk({
    // Metrics are metrics.ts's (a MeterProvider per Metrics instance); logs are pino's.
    metricReaders: [],
    logRecordProcessors: [],
    baseResource: defaultResource().merge(resourceFromAttributes({ 'service.name': opts.defaultServiceName })),
    resourceAttributes: { ...(opts.instanceId ? { 'service.instance.id': opts.instanceId } : {}), ...opts.attributes },
    // Only commands made inside a span (a call, a job), and only their names: arguments carry
    // credential hashes and sandbox secrets, and serialising them costs every command.
    instrumentations: redisSpans ? [new IORedisInstrumentation({ requireParentSpan: true, dbStatementSerializer: (command) => command })] : [],
  });
  // The SDK's own diagnostics (an unreachable collector, say) as JSON lines like every other
  // log line; OTEL_LOG_LEVEL as the SDK reads it, default warn.
  const [api, { diagLogLevelFromString }] = await Promise.all([import('@opentelemetry/api'), import('@opentelemetry/core')]);
  const line = (level: string) => (msg: string, ...args: unknown[]) =>
    process.stderr.write(JSON.stringify({ ts: new Date().toISOString(), level, msg, component: 'otel', ...(args.length ? { detail: args.map((a) => (a instanceof Error ? a.message : a)) } : {}) }) + '\n');
  api.diag.setLogger(
    { error: line('error'), warn: line('warn'), info: line('info'), debug: line('debug'), verbose: line('debug') },
    { logLevel: diagLogLevelFromString(env.OTEL_LOG_LEVEL ?? 'warn') ?? api.DiagLogLevel.WARN, suppressOverrideMessage: true },
  );
  const relay = spanRelay(env, opts.warn ?? defaultWarn);
  setTracingEnabled(true, relay.post);
  running = {
    relayed: relay.counts,
    shutdown: async () => {
      setTracingEnabled(false);
      running = null;
      // Flush what is buffered, but an unreachable collector must not hold the process's exit.
      const bounded = <T>(p: Promise<T>) => Promise.race([p.catch(() => undefined), new Promise((r) => setTimeout(r, SHUTDOWN_FLUSH_MS).unref())]);
      await bounded(relay.drain());
      await bounded(sdk.shutdown());
      await unregisterGlobals();
    },
  };
  return running;
}

function defaultWarn(msg: string, fields?: Record<string, unknown>): void {
  process.stderr.write(JSON.stringify({ ts: new Date().toISOString(), level: 'warn', msg, ...fields }) + '\n');
}

/** At most this many relayed batches are in flight; more are dropped and counted. */
const RELAY_MAX_IN_FLIGHT = 64;

/**
 * Posts supervisor span batches (OTLP JSON) to the OTLP/HTTP traces endpoint. JSON is what the
 * supervisor sends and OTLP/HTTP receivers take `application/json` on the same path whatever
 * the replica's own exports use (http/protobuf); with `grpc` there is no HTTP path to post to
 * and the batches are dropped (counted, warned once).
 */
function spanRelay(env: Env, warn: NonNullable<TracingOptions['warn']>) {
  const url = otlpTracesUrl(env);
  const protocol = otlpTracesProtocol(env);
  const headers = { ...otlpTracesHeaders(env), 'content-type': 'application/json' };
  const counts = { posted: 0, dropped: 0 };
  const inFlight = new Set<Promise<void>>();
  let warned = false;
  const drop = (why: string) => {
    counts.dropped++;
    if (!warned) {
      warned = true;
      warn('supervisor spans dropped', { why });
    }
  };
  return {
    counts,
    post(bytes: Uint8Array): void {
      if (!url || protocol === 'grpc') return drop(url ? 'OTEL_EXPORTER_OTLP_PROTOCOL=grpc: supervisor spans need an OTLP/HTTP endpoint' : 'no OTLP endpoint');
      if (inFlight.size >= RELAY_MAX_IN_FLIGHT) return drop('too many relayed span batches in flight');
      const p = fetch(url, { method: 'POST', headers, body: bytes, signal: AbortSignal.timeout(10_000) })
        .then(async (res) => {
          await res.arrayBuffer().catch(() => undefined);
          if (res.ok) counts.posted++;
          else drop(`collector answered ${res.status}`);
        })
        .catch((err: unknown) => drop(`post failed: ${err instanceof Error ? err.message : String(err)}`))
        .finally(() => inFlight.delete(p));
      inFlight.add(p);
    },
    drain: () => Promise.allSettled([...inFlight]).then(() => undefined),
  };
}

// ---- supervisor: spans relayed through the control session -------------------------------------

export interface RelayedTracingOptions {
  /** Resource: service.name (default `sandgate-supervisor`), the sandbox, the supervisor run. */
  attributes: Attributes;
  /**
   * Hands one OTLP JSON ExportTraceServiceRequest to the gateway; false when it cannot now (no
   * live session): the batch stays buffered.
   */
  send: (otlpJson: Uint8Array) => boolean;
  /** Finished spans kept while they cannot be sent; beyond it new ones are dropped and counted. */
  maxBuffered?: number;
  /** How often buffered spans are sent (each send is one OTLP post by the replica: fewer, larger ones cost less). */
  flushIntervalMs?: number;
}

export interface RelayedTracing {
  /** Sends what is buffered now (a live session came back, or shutdown). */
  flush(): void;
  /** Spans dropped because the buffer was full. */
  readonly dropped: () => number;
  shutdown(): Promise<void>;
}

/**
 * The supervisor's tracing: a tracer provider whose finished spans are buffered (bounded), then
 * serialised as OTLP JSON and sent on the control session. Trace context arrives with each
 * `open_exec`/`open_tcp` (tracing.ts extractContext).
 */
export async function startRelayedTracing(opts: RelayedTracingOptions): Promise<RelayedTracing> {
  const [{ TracerProvider, AlwaysOnSampler, ParentBasedSampler }, { JsonTraceSerializer }, { resourceFromAttributes, defaultResource }, { W3CTraceContextPropagator }, { AsyncLocalStorageContextManager }, api] =
    await Promise.all([
      import('@opentelemetry/sdk-trace'),
      import('@opentelemetry/otlp-transformer'),
      import('@opentelemetry/resources'),
      import('@opentelemetry/core'),
      import('@opentelemetry/context-async-hooks'),
      import('@opentelemetry/api'),
    ]);
  type Finished = Parameters<typeof JsonTraceSerializer.serializeRequest>[0][number];
  const max = opts.maxBuffered ?? 2048;
  const buffer: Finished[] = [];
  let dropped = 0;
  const flush = () => {
    while (buffer.length > 0) {
      const batch = buffer.slice(0, 256);
      const bytes = JsonTraceSerializer.serializeRequest(batch);
      if (!bytes || !opts.send(bytes)) return;
      buffer.splice(0, batch.length);
    }
  };
  const processor = {
    onStart: () => undefined,
    onEnd: (span: Finished) => {
      if (buffer.length >= max) {
        dropped++;
        return;
      }
      buffer.push(span);
    },
    forceFlush: async () => flush(),
    shutdown: async () => flush(),
  };
  const provider = new TracerProvider({
    resource: defaultResource().merge(resourceFromAttributes({ 'service.name': 'sandgate-supervisor', ...opts.attributes })),
    // The gateway decided (its sampler): follow the parent; a root span here is always recorded.
    sampler: new ParentBasedSampler({ root: new AlwaysOnSampler() }),
    spanProcessors: [processor],
  });
  const contextManager = new AsyncLocalStorageContextManager();
  contextManager.enable();
  api.context.setGlobalContextManager(contextManager);
  api.propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  api.trace.setGlobalTracerProvider(provider);
  setTracingEnabled(true);
  const timer = setInterval(flush, opts.flushIntervalMs ?? 2000);
  timer.unref();
  return {
    flush,
    dropped: () => dropped,
    shutdown: async () => {
      clearInterval(timer);
      flush();
      setTracingEnabled(false);
      await provider.shutdown().catch(() => undefined);
      await unregisterGlobals();
    },
  };
}

/** After a shutdown the process may start tracing again (tests, benchmarks): the API's globals go. */
async function unregisterGlobals(): Promise<void> {
  const api = await import('@opentelemetry/api');
  api.trace.disable();
  api.propagation.disable();
  api.context.disable();
}

/** Is tracing running in this process (either kind)? */
export { tracingEnabled };
