// What tracing costs on the hot paths (issue 15: no hot path more than 5 % slower with tracing on
// at 100 % sampling). Two relay pairs side by side in one run, each its own Redis and two
// `sandgate gateway` processes: one with no OTEL_* at all (tracing off: no SDK loaded), one
// exporting every span (OTEL_TRACES_SAMPLER=always_on, OTLP/HTTP to a receiver this process
// runs, which reads and discards). Every exec goes through the non-owner replica (the relayed
// path: the most hops and spans: entry call span, owner peer span, supervisor exec and spawn
// spans relayed through the control session, Redis command spans), interleaved ABBA so machine
// noise hits both alike. Reported as ratios on/off.
//   node load-tests/tracing-overhead.ts [--iterations 200] [--warmup 20] [--mib 64] [--repetitions 4]
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import { summarise, ms } from './stats.ts';
import { COMMON_OPTIONS, emitReport, fixed, now, onCleanup, runMain, type BenchReport } from './bench.ts';
import { cpuMs, startRelayPair, supervisorPid } from './env.ts';
import { execOnce, execRun } from './exec-client.ts';
import type { AnyClient } from '../test/harness/grpc-client.ts';

export interface TracingOverheadOptions {
  iterations: number;
  warmup: number;
  mib: number;
  repetitions: number;
  /** OTEL_TRACES_SAMPLER of the traced pair (always_on: 100 %; always_off isolates the SDK's presence from span work). */
  sampler?: string;
  /** OTEL_NODE_DISABLED_INSTRUMENTATIONS=ioredis on the traced pair. */
  noRedisSpans?: boolean;
}

/** An OTLP/HTTP sink: takes any export, counts it, answers 200. */
async function otlpSink(): Promise<{ url: string; requests: () => number; bytes: () => number; close(): Promise<void> }> {
  let requests = 0;
  let bytes = 0;
  const server = http.createServer((req, res) => {
    req.on('data', (c: Buffer) => (bytes += c.length));
    req.on('end', () => {
      requests++;
      res.writeHead(200, { 'content-type': req.headers['content-type'] ?? 'application/json' }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests: () => requests,
    bytes: () => bytes,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * Tracing's own CPU per exec, in this process, apart from the machine's noise: the entry
 * replica's spans (the call span and four Redis command spans, exported over OTLP/HTTP protobuf
 * by the SDK's batch processor) and the supervisor's (exec and spawn spans, serialised as OTLP
 * JSON for the control session). Run last: it starts the process-wide SDK here.
 */
async function spanCostUs(sinkUrl: string, n: number): Promise<{ entry: number; supervisor: number }> {
  const { startTracing, startRelayedTracing } = await import('@sandgate/telemetry/otel');
  const t = await import('@sandgate/telemetry/tracing');
  const carrier = { traceparent: `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01` };
  const cpuUs = () => {
    const u = process.cpuUsage();
    return u.user + u.system;
  };
  const yieldNow = () => new Promise((r) => setImmediate(r));

  const relayed = await startRelayedTracing({ attributes: { 'sandgate.sandbox.id': 'bench' }, send: () => true, flushIntervalMs: 2000 });
  let c0 = cpuUs();
  for (let i = 0; i < n; i++) {
    const { span, ctx } = t.startSpan('sandgate.supervisor.exec', { kind: t.SpanKind.SERVER, parent: t.extractContext(carrier), attributes: { [t.TraceAttr.sandboxId]: 'bench', [t.TraceAttr.execId]: String(i), 'process.command': 'true' } });
    const spawn = t.startSpan('sandgate.supervisor.spawn', { parent: ctx, attributes: { 'process.command': 'true' } });
    spawn.span.setAttribute('process.pid', i);
    spawn.span.end();
    span.setAttributes({ [t.TraceAttr.exitCode]: 0, [t.TraceAttr.timedOut]: false });
    span.addEvent('exit');
    span.end();
    if (i % 100 === 99) relayed.flush();
  }
  relayed.flush();
  const supervisor = (cpuUs() - c0) / n;
  await relayed.shutdown();

  const prev = { ...process.env };
  Object.assign(process.env, { OTEL_EXPORTER_OTLP_ENDPOINT: sinkUrl, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf', OTEL_TRACES_SAMPLER: 'always_on', OTEL_LOG_LEVEL: 'error' });
  const sdk = await startTracing({ defaultServiceName: 'bench', instanceId: 'bench', env: process.env });
  if (!sdk) throw new Error('tracing did not start');
  c0 = cpuUs();
  for (let i = 0; i < n; i++) {
    const { span, ctx } = t.startSpan('openshell.v1.OpenShell/ExecSandbox', { kind: t.SpanKind.SERVER, parent: t.extractContext(carrier), attributes: { 'rpc.system': 'grpc', 'rpc.service': 'openshell.v1.OpenShell', 'rpc.method': 'ExecSandbox' } });
    for (let j = 0; j < 4; j++) t.startSpan('hgetall', { kind: t.SpanKind.CLIENT, parent: ctx, attributes: { 'db.system.name': 'redis', 'db.query.text': 'hgetall', 'server.address': '127.0.0.1', 'server.port': 6379 } }).span.end();
    t.injectContext(ctx);
    span.setAttributes({ [t.TraceAttr.sandboxId]: 'bench', [t.TraceAttr.execId]: String(i), [t.TraceAttr.execPath]: 'relayed', [t.TraceAttr.exitCode]: 0 });
    span.end();
    // Below the batch processor's queue bound (2048), so nothing is dropped unexported.
    if (i % 50 === 49) await yieldNow();
  }
  await sdk.shutdown();
  const entry = (cpuUs() - c0) / n;
  for (const k of Object.keys(process.env)) if (!(k in prev)) delete process.env[k];
  return { entry, supervisor };
}

const ratio = (on: number, off: number) => (off > 0 ? `${fixed(on / off, 3)}` : 'n/a');

export async function run(opts: TracingOverheadOptions): Promise<BenchReport> {
  const t0 = now();
  const sink = await otlpSink();
  onCleanup('otlp sink', () => sink.close());
  const off = await startRelayPair('bench-trace-off');
  const on = await startRelayPair('bench-trace-on', {
    env: {
      OTEL_EXPORTER_OTLP_ENDPOINT: sink.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      OTEL_TRACES_SAMPLER: opts.sampler ?? 'always_on',
      ...(opts.noRedisSpans ? { OTEL_NODE_DISABLED_INSTRUMENTATIONS: 'ioredis' } : {}),
    },
  });
  const offClient: AnyClient = off.relayed;
  const onClient: AnyClient = on.relayed;
  // CPU time of each pair's processes (entry + owner replica + supervisor): what tracing adds
  // shows here even when the neighbours' load drowns it in wall time.
  const pids = async (pair: typeof off) => [pair.other.proc?.pid, pair.owner.proc?.pid, await supervisorPid(pair.sandbox.id)];
  const offPids = await pids(off);
  const onPids = await pids(on);
  const cpu = async (list: (number | undefined)[]) => (await Promise.all(list.map((p) => cpuMs(p)))).reduce((a, b) => a + b, 0);

  // Exec latency of `true`, relayed.
  for (let i = 0; i < opts.warmup; i++) {
    await execOnce(offClient, off.sandbox.id);
    await execOnce(onClient, on.sandbox.id);
  }
  const lOff: number[] = [];
  const lOn: number[] = [];
  const cpuLatency0 = { off: await cpu(offPids), on: await cpu(onPids) };
  const each = async (list: (number | undefined)[]) => Promise.all(list.map((p) => cpuMs(p)));
  const latencySplit0 = { off: await each(offPids), on: await each(onPids) };
  for (let i = 0; i < opts.iterations; i++) {
    if (i % 2 === 0) {
      lOff.push(await execOnce(offClient, off.sandbox.id));
      lOn.push(await execOnce(onClient, on.sandbox.id));
    } else {
      lOn.push(await execOnce(onClient, on.sandbox.id));
      lOff.push(await execOnce(offClient, off.sandbox.id));
    }
  }

  const latencySplit1 = { off: await each(offPids), on: await each(onPids) };
  const perExec = (a: number[], b: number[]) => a.map((v, i) => ((v - b[i]!) / opts.iterations).toFixed(1)).join(' / ');
  const latencyNote = `CPU ms per exec, entry / owner / supervisor: off ${perExec(latencySplit1.off, latencySplit0.off)}, on ${perExec(latencySplit1.on, latencySplit0.on)}`;
  const cpuPerExec = { off: ((await cpu(offPids)) - cpuLatency0.off) / opts.iterations, on: ((await cpu(onPids)) - cpuLatency0.on) / opts.iterations };

  // Stream throughput, relayed: `head -c N /dev/zero` to the client.
  const bytes = opts.mib * 1024 * 1024;
  const argv = ['head', '-c', String(bytes), '/dev/zero'];
  const stream = async (client: AnyClient, sandboxId: string) => {
    const r = await execRun(client, sandboxId, argv, { deadlineMs: 300_000 });
    if (r.exitCode !== 0 || r.stdoutBytes !== bytes) throw new Error(`stream: exit ${r.exitCode}, ${r.stdoutBytes} of ${bytes} bytes`);
    return bytes / 1e6 / (r.ms / 1000);
  };
  await stream(offClient, off.sandbox.id);
  await stream(onClient, on.sandbox.id);
  const tOff: number[] = [];
  const tOn: number[] = [];
  const cpuStream0 = { off: await cpu(offPids), on: await cpu(onPids) };
  const split0 = { off: await each(offPids), on: await each(onPids) };
  for (let i = 0; i < opts.repetitions; i++) {
    if (i % 2 === 0) {
      tOff.push(await stream(offClient, off.sandbox.id));
      tOn.push(await stream(onClient, on.sandbox.id));
    } else {
      tOn.push(await stream(onClient, on.sandbox.id));
      tOff.push(await stream(offClient, off.sandbox.id));
    }
  }
  const mbMoved = (bytes / 1e6) * opts.repetitions;
  const split1 = { off: await each(offPids), on: await each(onPids) };
  const perMb = (a: number[], b: number[]) => a.map((v, i) => ((v - b[i]!) / mbMoved).toFixed(1)).join(' / ');
  const splitNote = `CPU ms per MB streamed, entry / owner / supervisor: off ${perMb(split1.off, split0.off)}, on ${perMb(split1.on, split0.on)}`;
  const cpuPerMb = { off: ((await cpu(offPids)) - cpuStream0.off) / mbMoved, on: ((await cpu(onPids)) - cpuStream0.on) / mbMoved };
  // Give the batch processors time to export, then make sure tracing really was on.
  await new Promise((r) => setTimeout(r, 6000));
  if (sink.requests() === 0 && (opts.sampler ?? 'always_on') === 'always_on') throw new Error('the tracing-on replicas exported nothing: tracing was not on');

  const exported = { requests: sink.requests(), bytes: sink.bytes() };
  const spanCost = await spanCostUs(sink.url, 20_000);

  const lo = summarise(lOff);
  const ln = summarise(lOn);
  const to = summarise(tOff);
  const tn = summarise(tOn);
  // Each traced exec against the untraced one of its ABBA pair: noise spanning a pair cancels.
  const pairedRatio = summarise(lOn.map((v, i) => v / lOff[i]!));
  return {
    id: 'tracing-overhead',
    title: 'Tracing overhead: off vs on at 100 % sampling',
    command: `node load-tests/tracing-overhead.ts --iterations ${opts.iterations} --warmup ${opts.warmup} --mib ${opts.mib} --repetitions ${opts.repetitions}${opts.sampler && opts.sampler !== 'always_on' ? ` --sampler ${opts.sampler}` : ''}${opts.noRedisSpans ? ' --no-redis-spans' : ''}`,
    tables: [
      {
        caption: `exec latency of \`true\` through the non-owner replica (relayed), ${opts.iterations} each after ${opts.warmup} warm-up pairs, interleaved ABBA; local driver`,
        headers: ['tracing', 'p50', 'p90', 'p99', 'mean'],
        rows: [
          ['off', ms(lo.p50), ms(lo.p90), ms(lo.p99), ms(lo.mean)],
          [`on (${opts.sampler ?? 'always_on'}${opts.noRedisSpans ? ', no Redis spans' : ''}, OTLP/HTTP)`, ms(ln.p50), ms(ln.p90), ms(ln.p99), ms(ln.mean)],
          ['ratio on/off', ratio(ln.p50, lo.p50), ratio(ln.p90, lo.p90), ratio(ln.p99, lo.p99), ratio(ln.mean, lo.mean)],
          ['paired ratio (on/off of the same ABBA pair)', fixed(pairedRatio.p50, 3), fixed(pairedRatio.p90, 3), fixed(pairedRatio.p99, 3), fixed(pairedRatio.mean, 3)],
        ],
      },
      {
        caption: `stream throughput of ${opts.mib} MiB of stdout through the non-owner replica, ${opts.repetitions} each, interleaved ABBA (MB/s)`,
        headers: ['tracing', 'p50', 'min', 'max', 'mean'],
        rows: [
          ['off', fixed(to.p50, 1), fixed(Math.min(...tOff), 1), fixed(Math.max(...tOff), 1), fixed(to.mean, 1)],
          ['on', fixed(tn.p50, 1), fixed(Math.min(...tOn), 1), fixed(Math.max(...tOn), 1), fixed(tn.mean, 1)],
          ['ratio on/off', ratio(tn.p50, to.p50), ratio(Math.min(...tOn), Math.min(...tOff)), ratio(Math.max(...tOn), Math.max(...tOff)), ratio(tn.mean, to.mean)],
        ],
      },
      {
        caption: 'CPU time of the pair\'s processes (entry replica + owner replica + supervisor, from /proc), over the runs above',
        headers: ['', 'off', 'on', 'ratio on/off'],
        rows: [
          ['per exec of `true`', ms(cpuPerExec.off), ms(cpuPerExec.on), ratio(cpuPerExec.on, cpuPerExec.off)],
          ['per MB streamed', ms(cpuPerMb.off), ms(cpuPerMb.on), ratio(cpuPerMb.on, cpuPerMb.off)],
        ],
      },
    ],
    notes: [
      `target (issue 15): latency ratio ≤ 1.05 and throughput ratio ≥ 0.95`,
      `traced pair: OTEL_TRACES_SAMPLER=${opts.sampler ?? 'always_on'}; it exported ${exported.requests} OTLP requests, ${(exported.bytes / 1024).toFixed(0)} KiB`,
      latencyNote,
      `tracing's own CPU per exec, measured in-process (20000 execs' worth of spans, exports included): entry replica ${spanCost.entry.toFixed(1)} µs (call span + 4 Redis spans, OTLP protobuf), supervisor ${spanCost.supervisor.toFixed(1)} µs (exec + spawn spans, OTLP JSON)`,
      splitNote,
    ],
    durationMs: now() - t0,
  };
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      iterations: { type: 'string', default: '200' },
      warmup: { type: 'string', default: '20' },
      mib: { type: 'string', default: '64' },
      repetitions: { type: 'string', default: '4' },
      sampler: { type: 'string', default: 'always_on' },
      'no-redis-spans': { type: 'boolean', default: false },
      ...COMMON_OPTIONS,
    },
  });
  await runMain(async () => {
    const report = await run({ iterations: Number(values.iterations), warmup: Number(values.warmup), mib: Number(values.mib), repetitions: Number(values.repetitions), sampler: values.sampler, noRedisSpans: values['no-redis-spans'] });
    emitReport(report, values['report-json']);
  });
}
