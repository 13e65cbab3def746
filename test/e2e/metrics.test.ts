// The metric catalogue on live replicas: two replica processes on one Redis, a sandbox, a local
// and a relayed exec (one killed by its timeout), the sandbox's CPU and memory through
// `sandgate sandbox get`, a failover (the owner SIGKILLed), a delete (a job). Every name of the
// catalogue must then be on /metrics (job metrics on the replica that ran the job), with the
// labels the dashboards use.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Phase } from '@sandgate/core';
import { PhaseCounts, keysFor, type RedisClient } from '@sandgate/store';
import { Cluster, runCli } from '../harness/cluster.ts';
import { startRedis, type TestRedis } from '../harness/redis.ts';
import { createSandbox, ownerOf, type CreatedSandbox } from '../harness/sandbox.ts';
import { waitFor } from '../harness/wait.ts';

/** The contract: every name the replicas export (ARCHITECTURE.md, "Observability: metrics"). */
const CATALOGUE = [
  'rpc_server_duration',
  'http_server_request_duration',
  'db_client_operation_duration',
  'sandgate_execs_total',
  'sandgate_exec_duration',
  'sandgate_exec_kills_total',
  'sandgate_supervisor_sessions',
  'sandgate_sandboxes_owned',
  'sandgate_ownership_claims_total',
  'sandgate_ownership_renewals_refused_total',
  'sandgate_ownership_lapsed_total',
  'sandgate_failovers_total',
  'sandgate_failover_duration',
  'sandgate_queue_jobs',
  'sandgate_job_latency',
  'sandgate_job_duration',
  'sandgate_job_failures_total',
  'sandgate_sandboxes',
  'sandgate_sandbox_cpu_seconds_total',
  'sandgate_sandbox_memory_bytes',
  // Names that existed before the OTel exporter: unchanged.
  'sandgate_exec_started_total',
  'sandgate_exec_finished_total',
  'sandgate_supervisor_sessions_accepted_total',
];

let redis: TestRedis;
let r: RedisClient;
let cluster: Cluster;
let sbx: CreatedSandbox;

beforeAll(async () => {
  redis = await startRedis();
  r = redis.client();
  cluster = await Cluster.start({ redisUrl: redis.url, replicas: 2 });
  sbx = await createSandbox(cluster.replicas[0]!.grpcAddress, 'metrics');
});

afterAll(async () => {
  if (sbx) await runCli(['sandbox', 'delete', sbx.name], { gateway: cluster.replicas[0]!.grpcAddress }).catch(() => undefined);
  await cluster?.stop();
  cluster?.cleanup();
  await redis?.stop();
});

const gw = (i: number) => cluster.replicas[i]!.grpcAddress;
const replicaIndex = (id: string) => cluster.replicas.findIndex((x) => x.id === id);

async function scrape(i: number): Promise<string> {
  const res = await fetch(`${cluster.replicas[i]!.httpUrl}/metrics`);
  expect(res.status).toBe(200);
  return res.text();
}

/** The value of one exact series line (`name{labels}`), or undefined. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

/** Family names with a `# TYPE` line. */
function families(text: string): Set<string> {
  return new Set(text.split('\n').flatMap((l) => (l.startsWith('# TYPE ') ? [l.split(' ')[2]!] : [])));
}

describe('the replica process', () => {
  it('runs with the small young generation and slow old-generation growth the CLI gives long-running commands (same pid, flags on its command line)', () => {
    for (const replica of cluster.replicas) {
      const argv = readFileSync(`/proc/${replica.proc!.pid}/cmdline`, 'utf8').split('\0');
      expect(argv, replica.id).toContain('--max-semi-space-size=4');
      expect(argv, replica.id).toContain('--heap-growing-percent=50');
      expect(argv, replica.id).toContain('gateway');
    }
  });
});

describe('/metrics on live replicas', () => {
  let owner = 0;
  let other = 1;

  it('counts a local and a relayed exec on their entry replicas, and a timeout kill', async () => {
    owner = replicaIndex(await ownerOf(r, sbx.id));
    other = 1 - owner;
    const local = await runCli(['sandbox', 'exec', sbx.name, '--', 'echo', 'local'], { gateway: gw(owner) });
    expect(local.code).toBe(0);
    const relayed = await runCli(['sandbox', 'exec', sbx.name, '--timeout', '1', '--', 'sleep', '30'], { gateway: gw(other) });
    expect(relayed.code).not.toBe(0);

    const [o, n] = [await scrape(owner), await scrape(other)];
    expect(sample(o, 'sandgate_execs_total{path="local"}')).toBe(1);
    expect(sample(o, 'sandgate_execs_total{path="relayed"}')).toBe(0);
    expect(sample(n, 'sandgate_execs_total{path="relayed"}')).toBe(1);
    expect(sample(n, 'sandgate_execs_total{path="local"}')).toBe(0);
    expect(sample(o, 'sandgate_exec_duration_count{path="local"}')).toBe(1);
    expect(sample(n, 'sandgate_exec_duration_count{path="relayed"}')).toBe(1);
    expect(sample(n, 'sandgate_exec_kills_total{reason="timeout"}')).toBe(1);
    expect(sample(o, 'sandgate_exec_kills_total{reason="timeout"}')).toBe(0);
    // The CLI's bidi call, with its final status (OK: the exit code rides in the stream).
    expect(sample(n, 'rpc_server_duration_count{rpc_system="grpc",rpc_service="openshell.v1.OpenShell",rpc_method="ExecSandboxInteractive",rpc_grpc_status_code="0"}')).toBe(1);
    expect(sample(o, 'sandgate_sandboxes_owned')).toBe(1);
    expect(sample(n, 'sandgate_sandboxes_owned')).toBe(0);
    expect(sample(o, 'sandgate_ownership_claims_total')).toBeGreaterThanOrEqual(1);
    expect(o).toMatch(/^db_client_operation_duration_count\{db_system_name="redis",db_operation_name="EVALSHA"\} \d+$/m);
    expect(o).toMatch(/^http_server_request_duration_count\{http_request_method="GET",http_route="\/readyz",http_response_status_code="200"\} \d+$/m);
    expect(o).toContain(`target_info{service_name="sandgate-gateway",service_instance_id="${cluster.replicas[owner]!.id}"} 1`);
    // Counted at start (nothing yet), every phase present; the queue read once.
    expect(o).toMatch(/^sandgate_sandboxes\{phase="Ready"\} \d+$/m);
    expect(o).toMatch(/^sandgate_queue_jobs\{queue="sandgate",state="waiting"\} \d+$/m);
  });

  it('has the reconcile sweep count the fleet by phase once for the cluster (sg:metrics:phases, read by every replica)', async () => {
    // The sweep runs every 10 s on one worker; the sandbox is Ready.
    const counts = await waitFor('the sweep to publish phase counts', async () => (await new PhaseCounts(r).read())?.get(Phase.READY) === 1, 30_000);
    expect(counts).toBe(true);
    expect(await r.pttl(keysFor(r).phaseCounts())).toBeGreaterThan(0);
  });

  it("reports the owned sandbox's CPU and memory from the driver, also through sandgate sandbox get", async () => {
    const labels = `{sandbox_id="${sbx.id}",sandbox_name="${sbx.name}",workspace="default"}`;
    // Sampled every 15 s.
    const text = await waitFor('usage sampled', async () => {
      const t = await scrape(owner);
      return sample(t, `sandgate_sandbox_memory_bytes${labels}`) !== undefined ? t : undefined;
    }, 25_000, 500);
    expect(sample(text, `sandgate_sandbox_memory_bytes${labels}`)).toBeGreaterThan(0);
    expect(sample(text, `sandgate_sandbox_cpu_seconds_total${labels}`)).toBeGreaterThan(0);
    expect(await scrape(other)).not.toContain(`sandbox_id="${sbx.id}"`);

    // Through the replica that does not own it: the owner published it to Redis.
    const json = await runCli(['sandbox', 'get', sbx.name, '-o', 'json'], { gateway: gw(other) });
    expect(json.code).toBe(0);
    const usage = JSON.parse(json.stdout.toString()).usage as { cpuSeconds: number; memoryBytes: number; replicaId: string; sampledAtMs: number };
    expect(usage.memoryBytes).toBeGreaterThan(0);
    expect(usage.cpuSeconds).toBeGreaterThan(0);
    expect(usage.replicaId).toBe(cluster.replicas[owner]!.id);
    const table = await runCli(['sandbox', 'get', sbx.name], { gateway: gw(other) });
    expect(table.stdout.toString()).toMatch(/^Usage: +CPU \d+\.\d\d s, memory \d+(\.\d)? (B|KiB|MiB|GiB) \(read .* ago\)$/m);
  });

  it('counts a failover and its duration on the replica that took the session over', async () => {
    await cluster.signal(owner, 'SIGKILL');
    await waitFor('the survivor owns the session', async () => (await ownerOf(r, sbx.id)) === cluster.replicas[other]!.id, 15_000, 100);
    // The claim is visible in Redis a moment before the survivor counts it: on a Sentinel-managed
    // Redis the claim first waits for a replica to confirm it (WAIT), and only then is it counted.
    const text = await waitFor('the survivor counts the session', async () => {
      const t = await scrape(other);
      return sample(t, 'sandgate_sandboxes_owned') === 1 ? t : undefined;
    }, 5_000, 100);
    expect(sample(text, 'sandgate_failovers_total')).toBe(1);
    expect(sample(text, 'sandgate_failover_duration_count')).toBe(1);
    // At most the lease TTL (6 s) since the dead owner's last renewal.
    expect(sample(text, 'sandgate_failover_duration_sum')).toBeLessThanOrEqual(6);
    expect(sample(text, 'sandgate_sandboxes_owned')).toBe(1);
    await cluster.startReplica(owner);
  });

  it('exposes every name of the catalogue (job metrics where the job ran)', async () => {
    const del = await runCli(['sandbox', 'delete', sbx.name], { gateway: gw(other) });
    expect(del.code).toBe(0);
    await waitFor('the delete job ran', async () => (await r.exists(`sg:sbx:${sbx.id}`)) === 0, 20_000, 200);
    sbx = undefined as unknown as CreatedSandbox;
    // The job removes the record before it completes, and its duration is counted at completion:
    // scraped in between, a replica has not counted it yet (CI saw it once).
    const jobCounted = /^sandgate_job_duration_count\{queue="sandgate",job_name="delete-sandbox"\} [1-9]/m;
    const texts = await waitFor('the delete job counted', async () => {
      const scraped = await Promise.all([scrape(0), scrape(1)]);
      return jobCounted.test(scraped.join('\n')) ? scraped : null;
    }, 10_000, 200);
    const names = new Set(texts.flatMap((t) => [...families(t)]));
    expect(CATALOGUE.filter((n) => !names.has(n))).toEqual([]);
    const both = texts.join('\n');
    expect(both).toMatch(jobCounted);
    expect(both).toMatch(/^sandgate_job_latency_count\{queue="sandgate",job_name="delete-sandbox"\} [1-9]/m);
    // On every replica from its start, whether anything happened there or not.
    for (const t of texts) {
      for (const n of ['sandgate_ownership_renewals_refused_total', 'sandgate_failovers_total', 'sandgate_exec_kills_total', 'sandgate_job_failures_total', 'sandgate_queue_jobs', 'sandgate_sandboxes']) {
        expect(families(t)).toContain(n);
      }
    }
  });
});
