// One trace per client call across every hop (issue 15): three replicas as separate processes,
// each exporting OTLP/HTTP JSON to a receiver this test runs; a relayed exec (the client calls a
// replica that does not own the sandbox) with a timeout that only the exec-deadline backstop job
// can enforce (the supervisor's own timer is off: debug fault `exec-timeout`). The client's
// traceparent names the trace; the test then finds, under that one trace id, the entry replica's
// call span, the owner replica's peer span and the supervisor's exec and spawn spans (relayed
// through its control session), the enqueue span of the backstop job, and the job's processing
// span linked to it, with the sandbox, exec, path, timeout and kill-reason attributes.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RedisClient } from '@sandgate/store';
import { Metadata, type ClientReadableStream } from '@grpc/grpc-js';
import { Cluster, runCli } from '../harness/cluster.ts';
import { startRedis, type TestRedis } from '../harness/redis.ts';
import { openShellClient } from '../harness/grpc-client.ts';
import { createSandbox, ownerOf, pidsMatching, type CreatedSandbox } from '../harness/sandbox.ts';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../harness/otlp-receiver.ts';
import { waitFor } from '../harness/wait.ts';
import { logLines } from '../harness/log-lines.ts';

const TIMEOUT_S = 2;
const SERVER = 2;
const CONSUMER = 5;
const PRODUCER = 4;

function newTraceId(): string {
  return randomBytes(16).toString('hex');
}

function traceMetadata(traceId: string): Metadata {
  const md = new Metadata();
  md.set('traceparent', `00-${traceId}-${randomBytes(8).toString('hex')}-01`);
  return md;
}

/** Runs ExecSandbox through `address` with the caller's trace; resolves when the call ends (any status). */
function exec(address: string, request: object, traceId: string): { call: ClientReadableStream<unknown>; done: Promise<{ exit?: number; error?: string }> } {
  const client = openShellClient(address);
  const call = client.ExecSandbox(request, traceMetadata(traceId), { deadline: Date.now() + 120_000 }) as ClientReadableStream<unknown>;
  const done = new Promise<{ exit?: number; error?: string }>((resolve) => {
    let exit: number | undefined;
    call.on('data', (ev: { exit?: { exit_code?: number } }) => {
      if (ev.exit) exit = ev.exit.exit_code ?? 0;
    });
    call.on('error', (err: Error) => {
      client.close();
      resolve({ exit, error: err.message });
    });
    call.on('end', () => {
      client.close();
      resolve({ exit });
    });
  });
  return { call, done };
}

describe('tracing: one trace per call across entry replica, owner replica, supervisor and jobs', () => {
  let redis: TestRedis;
  let r: RedisClient;
  let cluster: Cluster;
  let otlp: OtlpReceiver;
  let sbx: CreatedSandbox;

  beforeAll(async () => {
    otlp = await startOtlpReceiver();
    redis = await startRedis();
    r = redis.client();
    cluster = await Cluster.start({
      redisUrl: redis.url,
      replicas: 3,
      env: {
        OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_TRACES_SAMPLER: 'parentbased_always_on',
        // Export soon after a span ends: the test waits for what it asserts, not for batching.
        OTEL_BSP_SCHEDULE_DELAY: '200',
        SANDGATE_DEBUG_BREAK: 'exec-timeout',
        SANDGATE_DEBUG_UNSAFE: '1',
      },
    });
    sbx = await createSandbox(cluster.replicas[0]!.grpcAddress, 'traced');
  });

  afterAll(async () => {
    if (cluster) {
      await runCli(['sandbox', 'delete', sbx.name], { gateway: cluster.replicas[0]!.grpcAddress }).catch(() => undefined);
      await cluster.stop();
      cluster.cleanup();
    }
    r?.disconnect();
    await redis?.stop();
    await otlp?.close();
  });

  const inTrace = (traceId: string) => otlp.spans.filter((s) => s.traceId === traceId);

  it('a relayed exec whose deadline the backstop enforces is one trace from the entry replica to the supervisor, with a linked job span', async () => {
    const ownerId = await ownerOf(r, sbx.id);
    const owner = cluster.replicas.findIndex((x) => x.id === ownerId);
    const entry = cluster.replicas[(owner + 1) % 3]!;
    const ownerReplica = cluster.replicas[owner]!;

    // The supervisor loads its tracing on hello_ack.tracing: wait until a warm-up exec's
    // supervisor span arrives (it also proves the relay through the control session).
    await waitFor(
      'a supervisor span of a warm-up exec',
      async () => {
        const warm = newTraceId();
        await exec(entry.grpcAddress, { sandbox_id: sbx.id, command: ['true'], environment: {} }, warm).done;
        await new Promise((res) => setTimeout(res, 1500));
        return inTrace(warm).some((s) => s.name === 'sandgate.supervisor.exec');
      },
      60_000,
      100,
    );

    const traceId = newTraceId();
    const tag = String(Date.now() % 10_000_000).padStart(7, '0');
    const run = exec(entry.grpcAddress, { sandbox_id: sbx.id, command: ['sh', '-c', `sleep 600.${tag}`], environment: {}, timeout_seconds: TIMEOUT_S }, traceId);
    await waitFor('the exec is running', async () => (await pidsMatching(`600.${tag}`)).length > 0, 20_000);
    await waitFor('the backstop to kill the exec', async () => (await pidsMatching(`600.${tag}`)).length === 0, 60_000, 200);
    await run.done;

    const byName = (name: string) => (s: ReceivedSpan) => s.name === name;
    // Everything below arrives through three exporters and one relay: wait for the last of it.
    const spans = await waitFor(
      'the trace of the exec, and the job span linked to it',
      async () => {
        const t = inTrace(traceId);
        const enqueue = t.find(byName('sandgate.job.enqueue exec-deadline'));
        const job = enqueue && otlp.spans.find((s) => s.name === 'sandgate.job exec-deadline' && s.links.some((l) => l.spanId === enqueue.spanId));
        const ready =
          t.some(byName('openshell.v1.OpenShell/ExecSandbox')) &&
          t.some(byName('sandgate.Peer/Exec')) &&
          t.some(byName('sandgate.supervisor.exec')) &&
          t.some(byName('sandgate.supervisor.spawn')) &&
          job !== undefined &&
          otlp.spans.some((s) => s.traceId === job.traceId && s.name === 'sandgate.KillExec') &&
          // A job run by another replica asks the owner (Peer.KillExec, with the job's trace context).
          (job.resource['service.instance.id'] === ownerId || otlp.spans.some((s) => s.traceId === job.traceId && s.name === 'sandgate.Peer/KillExec'));
        return ready ? { t, enqueue: enqueue!, job: job! } : undefined;
      },
      30_000,
      200,
    );
    expect(otlp.refused).toEqual([]);
    const { t, enqueue, job } = spans;

    // The entry replica: the SERVER span of the client's call, a child of the client's span.
    const call = t.find(byName('openshell.v1.OpenShell/ExecSandbox'))!;
    expect(call.kind).toBe(SERVER);
    expect(call.resource['service.name']).toBe('sandgate-gateway');
    expect(call.resource['service.instance.id']).toBe(entry.id);
    expect(call.attributes).toMatchObject({
      'rpc.system': 'grpc',
      'rpc.service': 'openshell.v1.OpenShell',
      'rpc.method': 'ExecSandbox',
      'sandgate.sandbox.id': sbx.id,
      'sandgate.workspace': 'default',
      'sandgate.exec.path': 'relayed',
    });
    const execId = call.attributes['sandgate.exec.id'];
    expect(typeof execId).toBe('string');
    expect(call.attributes['rpc.grpc.status_code']).toBeTypeOf('number');

    // The owner replica's hop, parented on the entry's call span (carried in ExecStart.trace_context).
    const peer = t.find(byName('sandgate.Peer/Exec'))!;
    expect(peer.resource['service.instance.id']).toBe(ownerReplica.id);
    expect(peer.parentSpanId).toBe(call.spanId);
    expect(peer.attributes).toMatchObject({ 'sandgate.exec.id': execId, 'sandgate.replica.id': ownerReplica.id, 'sandgate.exec.path': 'relayed' });

    // The supervisor: relayed through the owner's control session, parented on the owner's span.
    const sup = t.find(byName('sandgate.supervisor.exec'))!;
    expect(sup.resource['service.name']).toBe('sandgate-supervisor');
    expect(sup.resource['sandgate.sandbox.id']).toBe(sbx.id);
    expect(sup.parentSpanId).toBe(peer.spanId);
    expect(sup.attributes).toMatchObject({ 'sandgate.exec.id': execId, 'sandgate.exec.kill_reason': 'backstop', 'sandgate.replica.id': ownerReplica.id });
    const spawn = t.find(byName('sandgate.supervisor.spawn'))!;
    expect(spawn.parentSpanId).toBe(sup.spanId);
    expect(spawn.attributes['process.pid']).toBeGreaterThan(0);

    // The backstop job: enqueued inside the call (PRODUCER, same trace), processed in a trace of
    // its own (CONSUMER) linked to the enqueue span, on whichever replica ran it; its KillExec
    // reached the owner with the job's trace context.
    expect(enqueue.kind).toBe(PRODUCER);
    expect(enqueue.resource['service.instance.id']).toBe(entry.id);
    expect(job.kind).toBe(CONSUMER);
    expect(job.traceId).not.toBe(traceId);
    expect(cluster.replicas.map((x) => x.id)).toContain(job.resource['service.instance.id']);
    expect(job.attributes).toMatchObject({ 'sandgate.job.name': 'exec-deadline', 'sandgate.exec.id': execId, 'sandgate.exec.kill_reason': 'backstop', 'sandgate.exec.killed': expect.any(Number) });
    expect(job.attributes['sandgate.exec.killed']).toBeGreaterThanOrEqual(1);
    const kill = otlp.spans.find((s) => s.traceId === job.traceId && s.name === 'sandgate.KillExec')!;
    expect(kill.resource['service.instance.id']).toBe(job.resource['service.instance.id']);
    expect(kill.attributes['sandgate.exec.killed']).toBeGreaterThanOrEqual(1);
    if (job.resource['service.instance.id'] === ownerId) {
      expect(kill.attributes['sandgate.exec.path']).toBe('local');
    } else {
      expect(kill.attributes['sandgate.exec.path']).toBe('relayed');
      const peerKill = otlp.spans.find((s) => s.traceId === job.traceId && s.name === 'sandgate.Peer/KillExec')!;
      expect(peerKill.resource['service.instance.id']).toBe(ownerReplica.id);
      expect(peerKill.parentSpanId).toBe(kill.spanId);
      expect(peerKill.attributes).toMatchObject({ 'sandgate.exec.id': execId, 'sandgate.exec.kill_reason': 'backstop' });
    }

    // Log lines written inside a traced call carry its ids: the backstop's warning, written in the
    // job's span on the replica that ran it, names the job's trace and span.
    const jobReplica = cluster.replicas.find((x) => x.id === job.resource['service.instance.id'])!;
    const backstopLine = await waitFor('the backstop log line', () =>
      logLines(jobReplica.logs.join('')).find((l) => l.msg === 'exec backstop killed processes past the deadline' && l.execId === execId),
    );
    expect(backstopLine).toMatchObject({ trace_id: job.traceId, span_id: expect.stringMatching(/^[0-9a-f]{16}$/) });

    // Every replica span of the call, whichever process made it, shares the client's trace id;
    // three processes took part (entry, owner, supervisor).
    const processes = new Set(t.map((s) => `${s.resource['service.name']}/${s.resource['service.instance.id']}`));
    expect(processes.size).toBeGreaterThanOrEqual(3);
  }, 180_000);

  it('the ephemeral delete job: its processing span links to its enqueue span, with the sandbox named', async () => {
    const res = await runCli(['sandbox', 'create', '--name', 'traced-eph', '--no-keep', '--detach', '-o', 'json', '--', '/bin/true'], { gateway: cluster.replicas[1]!.grpcAddress });
    expect(res.code, res.stderr.toString()).toBe(0);
    const id = (JSON.parse(res.stdout.toString()) as { metadata: { id: string } }).metadata.id;
    const { enqueue, job } = await waitFor(
      'the ephemeral delete job span, linked to its enqueue span',
      async () => {
        const jobSpan = otlp.spans.find((s) => s.name === 'sandgate.job delete-sandbox' && s.attributes['sandgate.sandbox.id'] === id);
        const enqueueSpan = jobSpan && otlp.spans.find((s) => s.name === 'sandgate.job.enqueue delete-sandbox' && jobSpan.links.some((l) => l.spanId === s.spanId && l.traceId === s.traceId));
        return enqueueSpan ? { enqueue: enqueueSpan, job: jobSpan } : undefined;
      },
      30_000,
      200,
    );
    expect(enqueue.kind).toBe(PRODUCER);
    expect(String(enqueue.attributes['sandgate.job.id'])).toContain(id);
    expect(job.kind).toBe(CONSUMER);
    expect(job.traceId).not.toBe(enqueue.traceId);
    expect(cluster.replicas.map((x) => x.id)).toContain(job.resource['service.instance.id']);
  });

  it('HTTP requests get a SERVER span that joins the caller\'s trace', async () => {
    const traceId = newTraceId();
    const res = await fetch(`${cluster.replicas[0]!.httpUrl}/healthz`, { headers: { traceparent: `00-${traceId}-${randomBytes(8).toString('hex')}-01` } });
    expect(res.status).toBe(200);
    const span = await waitFor('the /healthz span', async () => inTrace(traceId).find((s) => s.name === 'GET /healthz'), 15_000, 100);
    expect(span.kind).toBe(SERVER);
    expect(span.attributes).toMatchObject({ 'http.request.method': 'GET', 'http.route': '/healthz', 'http.response.status_code': 200 });
  });

  it('Redis commands made inside a call are spans of its trace (ioredis instrumentation)', async () => {
    const traceId = newTraceId();
    const client = openShellClient(cluster.replicas[0]!.grpcAddress);
    await new Promise<void>((resolve, reject) =>
      client.GetSandbox({ name: sbx.name }, traceMetadata(traceId), (err: Error | null) => (err ? reject(err) : resolve())),
    );
    client.close();
    const redisSpan = await waitFor('a redis span in the GetSandbox trace', async () => inTrace(traceId).find((s) => s.attributes['db.system.name'] === 'redis' || s.attributes['db.system'] === 'redis'), 15_000, 100);
    expect(redisSpan.resource['service.instance.id']).toBe(cluster.replicas[0]!.id);
  });
});
