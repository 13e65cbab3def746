import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { Metrics, otlpMetricsExportFromEnv, SECONDS_BUCKETS, MILLISECONDS_BUCKETS } from '@sandgate/telemetry';

/** The sample lines of one family (no comments). */
function samples(text: string, family: string): string[] {
  return text.split('\n').filter((l) => l.startsWith(family) && !l.startsWith('#'));
}

describe('Metrics', () => {
  it('renders counters and labelled gauges under their exact names, label values escaped', async () => {
    const m = new Metrics({ instanceId: 'r1' });
    m.inc('sandgate_things_total', 2);
    m.gauge('sandgate_g', () => 1, { name: 'a' });
    m.gauge('sandgate_plain', () => 7);
    m.gauge('sandgate_g', () => 2, { name: 'say "hi"\\' });
    const text = await m.render();
    expect(text).toContain('# TYPE sandgate_things_total counter\nsandgate_things_total 2\n');
    expect(text).toContain('# TYPE sandgate_g gauge\nsandgate_g{name="a"} 1\nsandgate_g{name="say \\"hi\\"\\\\"} 2\n');
    expect(text).toContain('# TYPE sandgate_plain gauge\nsandgate_plain 7\n');
    // The resource names the replica; no scope labels on the series.
    expect(text).toContain('target_info{service_name="sandgate-gateway",service_instance_id="r1"} 1');
    expect(text).not.toContain('otel_scope');
    expect(m.get('sandgate_g', { name: 'a' })).toBe(1);
    expect(m.get('sandgate_plain')).toBe(7);
    expect(m.get('sandgate_g')).toBe(0);
    expect(m.get('sandgate_things_total')).toBe(2);
  });

  it('keeps labelled counters apart and sums them when asked without labels', async () => {
    const m = new Metrics();
    m.inc('sandgate_execs_total', 1, { path: 'local' });
    m.inc('sandgate_execs_total', 2, { path: 'relayed' });
    m.inc('sandgate_execs_total', 1, { path: 'local' });
    expect(m.get('sandgate_execs_total', { path: 'local' })).toBe(2);
    expect(m.get('sandgate_execs_total', { path: 'relayed' })).toBe(2);
    expect(m.get('sandgate_execs_total')).toBe(4);
    expect(samples(await m.render(), 'sandgate_execs_total')).toEqual(['sandgate_execs_total{path="local"} 2', 'sandgate_execs_total{path="relayed"} 2']);
  });

  it('renders the semantic-convention histograms under their Prometheus names with the declared buckets', async () => {
    const m = new Metrics();
    m.record('rpc.server.duration', 3, { 'rpc.system': 'grpc', 'rpc.service': 'openshell.v1.OpenShell', 'rpc.method': 'Health', 'rpc.grpc.status_code': '0' });
    m.record('sandgate_exec_duration', 0.2, { path: 'relayed' });
    m.record('sandgate_exec_duration', 7, { path: 'relayed' });
    const text = await m.render();
    expect(text).toContain('# TYPE rpc_server_duration histogram');
    const labels = 'rpc_system="grpc",rpc_service="openshell.v1.OpenShell",rpc_method="Health",rpc_grpc_status_code="0"';
    expect(text).toContain(`rpc_server_duration_count{${labels}} 1`);
    const rpcBuckets = samples(text, 'rpc_server_duration_bucket').map((l) => /le="([^"]+)"/.exec(l)![1]);
    expect(rpcBuckets).toEqual([...MILLISECONDS_BUCKETS.map(String), '+Inf']);
    const exec = samples(text, 'sandgate_exec_duration_bucket');
    expect(exec.map((l) => /le="([^"]+)"/.exec(l)![1])).toEqual([...SECONDS_BUCKETS.map(String), '+Inf']);
    expect(exec).toContain('sandgate_exec_duration_bucket{path="relayed",le="0.25"} 1');
    expect(exec).toContain('sandgate_exec_duration_bucket{path="relayed",le="10"} 2');
    expect(text).toContain('sandgate_exec_duration_sum{path="relayed"} 7.2');
    // No unit suffix on the name.
    expect(text).not.toMatch(/_seconds|_milliseconds/);
    expect(() => m.record('sandgate_typo', 1)).toThrow(/not declared/);
  });

  it('families list their current series at every collection', async () => {
    const m = new Metrics();
    let series: Array<[Record<string, string>, number]> = [[{ phase: 'READY' }, 2]];
    m.family('sandgate_sandboxes', 'gauge', () => series);
    m.family('sandgate_sandbox_cpu_seconds_total', 'counter', () => [[{ sandbox_id: 'a' }, 1.5]]);
    let text = await m.render();
    expect(samples(text, 'sandgate_sandboxes')).toEqual(['sandgate_sandboxes{phase="READY"} 2']);
    expect(text).toContain('# TYPE sandgate_sandbox_cpu_seconds_total counter\nsandgate_sandbox_cpu_seconds_total{sandbox_id="a"} 1.5\n');
    series = [[{ phase: 'ERROR' }, 1]];
    text = await m.render();
    expect(samples(text, 'sandgate_sandboxes')).toEqual(['sandgate_sandboxes{phase="ERROR"} 1']);
  });

  it('keeps each instance to itself (several replicas in one process)', async () => {
    const a = new Metrics({ instanceId: 'a' });
    const b = new Metrics({ instanceId: 'b' });
    a.inc('sandgate_only_a_total');
    b.gauge('sandgate_only_b', () => 1);
    const [ta, tb] = [await a.render(), await b.render()];
    expect(ta).toContain('sandgate_only_a_total 1');
    expect(ta).not.toContain('sandgate_only_b');
    expect(tb).toContain('sandgate_only_b 1');
    expect(tb).not.toContain('sandgate_only_a_total');
    expect(b.get('sandgate_only_a_total')).toBe(0);
  });

  it('reads the OTLP export from the standard variables', () => {
    expect(otlpMetricsExportFromEnv({})).toBeNull();
    expect(otlpMetricsExportFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_SDK_DISABLED: 'true' })).toBeNull();
    expect(otlpMetricsExportFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318/' })).toEqual({
      url: 'http://127.0.0.1:4318/v1/metrics',
      protocol: 'http/protobuf',
      intervalMs: 60_000,
    });
    expect(
      otlpMetricsExportFromEnv({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://ignored:4318',
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: 'http://127.0.0.1:9/m',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_METRIC_EXPORT_INTERVAL: '500',
      }),
    ).toEqual({ url: 'http://127.0.0.1:9/m', protocol: 'http/json', intervalMs: 500 });
    expect(() => otlpMetricsExportFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x', OTEL_EXPORTER_OTLP_PROTOCOL: 'carrier-pigeon' })).toThrow(/not one of/);
  });

  it.each(['http/json', 'http/protobuf'] as const)('pushes the same instruments over OTLP (%s) to a real receiver', async (protocol) => {
    const bodies: Array<{ type: string; body: Buffer }> = [];
    const server = createServer((req: IncomingMessage, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        if (req.url === '/v1/metrics') bodies.push({ type: String(req.headers['content-type']), body: Buffer.concat(chunks) });
        if (protocol === 'http/json') res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
        else res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as AddressInfo).port;
    const m = new Metrics({
      instanceId: 'r9',
      otlp: otlpMetricsExportFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`, OTEL_EXPORTER_OTLP_PROTOCOL: protocol, OTEL_METRIC_EXPORT_INTERVAL: '100' }),
    });
    try {
      m.inc('sandgate_execs_total', 1, { path: 'local' });
      m.record('rpc.server.duration', 2, { 'rpc.method': 'Health' });
      await expect.poll(() => bodies.length, { timeout: 10_000 }).toBeGreaterThan(0);
      expect(bodies[0]!.type).toContain(protocol === 'http/json' ? 'application/json' : 'application/x-protobuf');
      // Names and the resource are plain strings in either encoding.
      const text = bodies.map((b) => b.body.toString('latin1')).join('');
      expect(text).toContain('sandgate_execs_total');
      expect(text).toContain('rpc.server.duration');
      expect(text).toContain('r9');
    } finally {
      await m.shutdown();
      server.close();
    }
  });

});
