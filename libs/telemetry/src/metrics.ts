// Metrics on the OpenTelemetry metrics SDK. Each Metrics instance owns its own MeterProvider
// (never the global one: several replicas run in one test process, each with its own numbers).
// `/metrics` is the Prometheus exporter's text (its reader collected on demand, its serializer);
// with an OTLP endpoint configured the same instruments are also pushed over OTLP.
//
// Instrument names are the Prometheus names, except where an OpenTelemetry semantic convention
// exists (rpc.server.duration, http.server.request.duration, db.client.operation.duration): those
// keep their dotted OTel name and attributes over OTLP and become rpc_server_duration etc. on
// /metrics. Counters are named with their `_total` (the serializer does not add a second one).
import type { Attributes, Counter, Histogram, Meter, ObservableResult } from '@opentelemetry/api';
import {
  AggregationTemporality,
  DataPointType,
  MeterProvider,
  PeriodicExportingMetricReader,
  type CollectionResult,
  type MetricData,
  type MetricProducer,
  type MetricReader,
  type PushMetricExporter,
} from '@opentelemetry/sdk-metrics';
import { ValueType } from '@opentelemetry/api';
import { millisToHrTime } from '@opentelemetry/core';
import { PrometheusExporter, PrometheusSerializer } from '@opentelemetry/exporter-prometheus';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { OTLPMetricExporter as OtlpHttpJson } from '@opentelemetry/exporter-metrics-otlp-http';
import { OTLPMetricExporter as OtlpHttpProto } from '@opentelemetry/exporter-metrics-otlp-proto';
import { OTLPMetricExporter as OtlpGrpc } from '@opentelemetry/exporter-metrics-otlp-grpc';

export type Labels = Readonly<Record<string, string>>;

/** Seconds: from a fast Redis command to a long exec or failover. */
export const SECONDS_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
/** Milliseconds (rpc.server.duration's unit in the RPC semantic conventions). */
export const MILLISECONDS_BUCKETS = [0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000, 300000];

interface HistogramSpec {
  unit: 's' | 'ms';
  description: string;
}

/**
 * Every histogram, by the name callers use. A histogram must be declared here: its unit decides
 * its buckets, and a typo must not create a new family silently.
 */
export const HISTOGRAMS: Readonly<Record<string, HistogramSpec>> = {
  'rpc.server.duration': { unit: 'ms', description: 'Public gRPC calls, from arrival to their final status (streaming calls included)' },
  'http.server.request.duration': { unit: 's', description: 'HTTP requests by method, route pattern and status (a WebSocket upgrade counts once, as 101, when accepted)' },
  'db.client.operation.duration': { unit: 's', description: 'Redis commands of this process, from sending to reply' },
  sandgate_exec_duration: { unit: 's', description: 'Execs on their entry replica, from the call to its end' },
  sandgate_failover_duration: { unit: 's', description: "A session's takeover: from the moment its previous owner's lease lapsed to this replica's claim" },
  sandgate_job_latency: { unit: 's', description: 'Durable jobs: from the time they were due to the start of their processing' },
  sandgate_job_duration: { unit: 's', description: 'Durable jobs: processing time of one attempt' },
};

/** HELP text of the counters and gauges (others get the exporter's "description missing"). */
const DESCRIPTIONS: Readonly<Record<string, string>> = {
  sandgate_execs_total: 'Execs opened on their entry replica, by path (local: this replica owns the session; relayed: through the owner)',
  sandgate_exec_kills_total: 'Exec process trees killed before their own exit, by reason',
  sandgate_supervisor_sessions: 'Live supervisor sessions held by this replica',
  sandgate_sandboxes_owned: 'Sandboxes whose session this replica owns',
  sandgate_ownership_claims_total: 'Session ownership claims this replica won',
  sandgate_ownership_renewals_refused_total: 'Ownership renewals refused (another session or replica holds the sandbox)',
  sandgate_ownership_lapsed_total: 'Sessions ended here because their ownership expired while Redis was out of reach',
  sandgate_failovers_total: 'Sessions this replica took over from an owner whose lease had lapsed',
  sandgate_queue_jobs: 'Durable jobs in the queue by state (cached, read every few seconds)',
  sandgate_job_failures_total: 'Failed job attempts',
  sandgate_orphans_total: 'Compute the reconcile sweep found without a record: quarantined at first sight, deleted after the grace period',
  sandgate_sandboxes: 'Sandbox records by phase, fleet-wide (counted periodically)',
  sandgate_sandbox_cpu_seconds_total: 'CPU time used by a sandbox this replica owns, from its compute driver',
  sandgate_sandbox_memory_bytes: 'Memory in use by a sandbox this replica owns, from its compute driver',
};

/** Where and how the OTLP export goes; null: no OTLP export. */
export interface OtlpMetricsExport {
  /** The metrics URL (HTTP protocols) or endpoint (grpc). */
  url: string;
  protocol: 'http/json' | 'http/protobuf' | 'grpc';
  intervalMs: number;
}

/**
 * The OTLP metrics export the standard OTEL_* variables ask for: an endpoint
 * (OTEL_EXPORTER_OTLP_METRICS_ENDPOINT as is, or OTEL_EXPORTER_OTLP_ENDPOINT + /v1/metrics),
 * OTEL_EXPORTER_OTLP_(METRICS_)PROTOCOL, OTEL_METRIC_EXPORT_INTERVAL; null without an endpoint
 * or with OTEL_SDK_DISABLED=true. (Headers and timeouts the exporters read themselves.)
 */
export function otlpMetricsExportFromEnv(env: Readonly<Record<string, string | undefined>>): OtlpMetricsExport | null {
  if ((env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase() === 'true') return null;
  const specific = env.OTEL_EXPORTER_OTLP_METRICS_ENDPOINT?.trim();
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  if (!specific && !base) return null;
  const raw = (env.OTEL_EXPORTER_OTLP_METRICS_PROTOCOL || env.OTEL_EXPORTER_OTLP_PROTOCOL || 'http/protobuf').trim();
  if (raw !== 'http/json' && raw !== 'http/protobuf' && raw !== 'grpc') {
    throw new Error(`OTEL_EXPORTER_OTLP_PROTOCOL '${raw}' is not one of http/protobuf, http/json, grpc`);
  }
  const url = specific || (raw === 'grpc' ? base! : `${base!.replace(/\/+$/, '')}/v1/metrics`);
  const interval = Number(env.OTEL_METRIC_EXPORT_INTERVAL ?? '');
  return { url, protocol: raw, intervalMs: Number.isFinite(interval) && interval > 0 ? interval : 60_000 };
}

export interface MetricsOptions {
  /** Resource service.name (default sandgate-gateway). */
  serviceName?: string;
  /** Resource service.instance.id: the replica id. */
  instanceId?: string;
  otlp?: OtlpMetricsExport | null;
}

function otlpExporter(otlp: OtlpMetricsExport): PushMetricExporter {
  if (otlp.protocol === 'http/json') return new OtlpHttpJson({ url: otlp.url });
  if (otlp.protocol === 'grpc') return new OtlpGrpc({ url: otlp.url });
  return new OtlpHttpProto({ url: otlp.url });
}

/** The series key of a label set: order-independent. */
function seriesKey(name: string, labels: Labels): string {
  const keys = Object.keys(labels).sort();
  return keys.length === 0 ? name : `${name}{${keys.map((k) => `${k}=${JSON.stringify(labels[k])}`).join(',')}}`;
}

type Family = () => Iterable<readonly [Labels, number]>;

/**
 * The families (series that come and go): produced afresh at every collection, so a sandbox
 * that is gone (or no longer owned here) disappears from /metrics. (An SDK observable instrument
 * would keep reporting a series' last value forever under cumulative temporality.)
 */
class FamilyProducer implements MetricProducer {
  readonly families = new Map<string, { kind: 'gauge' | 'counter'; readers: Family[] }>();
  private readonly startTime = millisToHrTime(Date.now());

  async collect(): Promise<CollectionResult> {
    const endTime = millisToHrTime(Date.now());
    const metrics: MetricData[] = [];
    const errors: unknown[] = [];
    for (const [name, { kind, readers }] of this.families) {
      const dataPoints = [];
      for (const read of readers) {
        try {
          for (const [labels, value] of read()) dataPoints.push({ attributes: { ...labels }, startTime: this.startTime, endTime, value });
        } catch (err) {
          errors.push(err);
        }
      }
      const descriptor = { name, description: DESCRIPTIONS[name] ?? '', unit: '', valueType: ValueType.DOUBLE };
      metrics.push(
        kind === 'gauge'
          ? { descriptor, aggregationTemporality: AggregationTemporality.CUMULATIVE, dataPointType: DataPointType.GAUGE, dataPoints }
          : { descriptor, aggregationTemporality: AggregationTemporality.CUMULATIVE, dataPointType: DataPointType.SUM, dataPoints, isMonotonic: true },
      );
    }
    // The resource is the reader's own (the SDK ignores a producer's).
    return { resourceMetrics: { resource: resourceFromAttributes({}), scopeMetrics: [{ scope: { name: 'sandgate' }, metrics }] }, errors };
  }
}

export class Metrics {
  private readonly provider: MeterProvider;
  private readonly meter: Meter;
  private readonly prometheus: PrometheusExporter;
  // Scope labels on every series would only repeat "sandgate"; target_info carries the resource.
  private readonly serializer = new PrometheusSerializer(undefined, false, undefined, false, true);
  private readonly counters = new Map<string, Counter>();
  /** In-process totals of the counters (what get() answers), by series. */
  private readonly counted = new Map<string, number>();
  private readonly histograms = new Map<string, Histogram>();
  /** Observable families by name: each reads its registered series at collection. */
  private readonly gauges = new Map<string, Map<string, { labels: Labels; read: () => number }>>();
  private readonly producer = new FamilyProducer();

  constructor(opts: MetricsOptions = {}) {
    const metricProducers = [this.producer];
    this.prometheus = new PrometheusExporter({ preventServerStart: true, metricProducers });
    const readers: MetricReader[] = [this.prometheus];
    if (opts.otlp) {
      readers.push(new PeriodicExportingMetricReader({ exporter: otlpExporter(opts.otlp), exportIntervalMillis: opts.otlp.intervalMs, metricProducers }));
    }
    const attributes: Attributes = { 'service.name': opts.serviceName ?? 'sandgate-gateway' };
    if (opts.instanceId) attributes['service.instance.id'] = opts.instanceId;
    this.provider = new MeterProvider({ resource: resourceFromAttributes(attributes), readers });
    this.meter = this.provider.getMeter('sandgate');
  }

  /** Adds to a counter (its name ends in _total). */
  inc(name: string, by = 1, labels: Labels = {}): void {
    let counter = this.counters.get(name);
    if (!counter) {
      counter = this.meter.createCounter(name, { description: DESCRIPTIONS[name] });
      this.counters.set(name, counter);
    }
    counter.add(by, labels);
    const key = seriesKey(name, labels);
    this.counted.set(key, (this.counted.get(key) ?? 0) + by);
  }

  /** Records one value of a histogram declared in HISTOGRAMS (seconds or milliseconds, as declared). */
  record(name: string, value: number, labels: Labels = {}): void {
    let histogram = this.histograms.get(name);
    if (!histogram) {
      const spec = HISTOGRAMS[name];
      if (!spec) throw new Error(`histogram ${name} is not declared in HISTOGRAMS`);
      histogram = this.meter.createHistogram(name, {
        description: spec.description,
        unit: spec.unit,
        advice: { explicitBucketBoundaries: spec.unit === 's' ? SECONDS_BUCKETS : MILLISECONDS_BUCKETS },
      });
      this.histograms.set(name, histogram);
    }
    histogram.record(value, labels);
  }

  /** A gauge series read at every collection; registering the same series again replaces it. */
  gauge(name: string, read: () => number, labels: Labels = {}): void {
    let series = this.gauges.get(name);
    if (!series) {
      series = new Map();
      this.gauges.set(name, series);
      const registered = series;
      this.meter.createObservableGauge(name, { description: DESCRIPTIONS[name] }).addCallback((result: ObservableResult) => {
        for (const s of registered.values()) result.observe(s.read(), s.labels);
      });
    }
    series.set(seriesKey(name, labels), { labels, read });
  }

  /**
   * A family whose series come and go (one per sandbox, per phase, per queue state): `read`
   * lists them at every collection. `kind` counter: cumulative values kept elsewhere (CPU seconds).
   */
  family(name: string, kind: 'gauge' | 'counter', read: Family): void {
    const existing = this.producer.families.get(name);
    if (existing) existing.readers.push(read);
    else this.producer.families.set(name, { kind, readers: [read] });
  }

  /**
   * A counter's in-process total for exactly these labels (no labels: the sum of all its
   * series), or a gauge series' current value; 0 when there is none.
   */
  get(name: string, labels: Labels = {}): number {
    const exact = this.counted.get(seriesKey(name, labels));
    if (exact !== undefined) return exact;
    if (this.counters.has(name) && Object.keys(labels).length === 0) {
      let sum = 0;
      for (const [key, v] of this.counted) if (key.startsWith(`${name}{`)) sum += v;
      return sum;
    }
    return this.gauges.get(name)?.get(seriesKey(name, labels))?.read() ?? 0;
  }

  /** The Prometheus exposition text of everything this instance holds. */
  async render(): Promise<string> {
    const { resourceMetrics, errors } = await this.prometheus.collect();
    if (errors.length > 0) throw errors[0] instanceof Error ? errors[0] : new Error(String(errors[0]));
    return this.serializer.serialize(resourceMetrics);
  }

  /** Flushes the OTLP export (if any) one last time and stops its timer. */
  async shutdown(): Promise<void> {
    await this.provider.shutdown().catch(() => undefined);
  }
}
