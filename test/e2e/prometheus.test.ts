// A real Prometheus (Debian's package) scrapes three replicas (separate processes, serving HTTPS
// with the cluster's CA, as `sandgate up` does): PromQL over its HTTP API gives back the number of
// relayed execs the test made and their p99 duration; every query of the shipped Grafana
// dashboard and every alert rule names only metrics the live replicas export, Prometheus
// evaluates them all without error, and the one alert the test provokes (a refused ownership
// renewal) fires.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keysFor, OwnershipStore, type RedisClient } from '@sandgate/store';
import { Cluster, repoRoot, runCli } from '../harness/cluster.ts';
import { startRedis, type TestRedis } from '../harness/redis.ts';
import { createSandbox, ownerOf, type CreatedSandbox } from '../harness/sandbox.ts';
import { startPrometheus, type PromSample, type TestPrometheus } from '../harness/prometheus.ts';
import { exportedNames, metricNames, withGrafanaVariables } from '../harness/promql.ts';
import { waitFor } from '../harness/wait.ts';

let redis: TestRedis;
let r: RedisClient;
let cluster: Cluster;
let prom: TestPrometheus;
let sbx: CreatedSandbox;
let owner = 0;
let relay = 1;

const ALERTS_FILE = path.join(repoRoot, 'deploy/prometheus/alerts.yml');

beforeAll(async () => {
  redis = await startRedis();
  r = redis.client();
  cluster = await Cluster.start({ redisUrl: redis.url, replicas: 3, tls: true });
  sbx = await createSandbox(cluster.replicas[0]!.grpcAddress, 'prom');
  const ownerId = await ownerOf(r, sbx.id);
  owner = cluster.replicas.findIndex((x) => x.id === ownerId);
  relay = (owner + 1) % cluster.replicas.length;
  // What deploy/prometheus/prometheus.yml does for the compose stack, for these replicas: one
  // target per replica labelled with its id, over HTTPS trusting the replicas' CA.
  prom = await startPrometheus({
    ruleFiles: [ALERTS_FILE],
    scrapeConfigs: [
      {
        job_name: 'sandgate',
        metrics_path: '/metrics',
        scheme: 'https',
        tls_config: { ca_file: cluster.tls!.caFile, server_name: cluster.tls!.servername },
        static_configs: cluster.replicas.map((x) => ({ targets: [`127.0.0.1:${x.httpPort}`], labels: { replica: x.id } })),
      },
    ],
  });
  await waitFor('prometheus scraping all three replicas', async () => {
    const up = await prom.query('sum(up{job="sandgate"})');
    return Number(up[0]?.value[1]) === 3;
  }, 30_000);
}, 180_000);

afterAll(async () => {
  if (sbx) await runCli(['sandbox', 'delete', sbx.name], { gateway: cluster.replicas[0]!.grpcAddress }).catch(() => undefined);
  await prom?.stop();
  await cluster?.stop();
  cluster?.cleanup();
  r?.disconnect();
  await redis?.stop();
});

const gw = (i: number) => cluster.replicas[i]!.grpcAddress;
const num = (samples: { value: [number, string] }[]) => (samples.length === 0 ? NaN : Number(samples[0]!.value[1]));

/** An exec of `sleep SECONDS` through replica i; resolves with how long the client waited (s). */
async function sleepExec(i: number, seconds: number): Promise<number> {
  const t0 = performance.now();
  const res = await runCli(['sandbox', 'exec', sbx.name, '--', 'sleep', String(seconds)], { gateway: gw(i) });
  expect(res.stderr).toBe('');
  expect(res.code).toBe(0);
  return (performance.now() - t0) / 1000;
}

describe('Prometheus scraping three replicas', () => {
  it('gives back the relayed exec count and the exec duration p99 from PromQL', async () => {
    const SLEEP = 1.2;
    const N = 4;
    // The first exec makes the series exist; Prometheus must have a sample of it before the
    // measured ones, or rate() over the window would not see them as an increase.
    const waited = [await sleepExec(relay, SLEEP)];
    await waitFor('the first relayed exec in prometheus', async () => num(await prom.query('sum(sandgate_execs_total{path="relayed"})')) === 1, 30_000);
    for (let k = 0; k < N; k++) waited.push(await sleepExec(relay, SLEEP));

    await waitFor(`${N + 1} relayed execs in prometheus`, async () => num(await prom.query('sum(sandgate_execs_total{path="relayed"})')) === N + 1, 30_000);
    // The duration is recorded when the call ends on the replica, a moment after the client saw
    // the exit: wait for the histogram to hold every exec as well (its count agrees with the counter).
    await waitFor(`${N + 1} relayed exec durations in prometheus`, async () => num(await prom.query('sum(sandgate_exec_duration_count{path="relayed"})')) === N + 1, 30_000);
    // Counted on the entry replica only, as relayed: the owner did not count them as local.
    expect(num(await prom.query('sum(sandgate_execs_total{path="relayed"})'))).toBe(N + 1);
    const byReplica = await prom.query('sum by (replica) (sandgate_execs_total{path="relayed"}) > 0');
    expect(byReplica.map((s) => [s.metric.replica, Number(s.value[1])])).toEqual([[cluster.replicas[relay]!.id, N + 1]]);
    expect(num(await prom.query('sum(sandgate_execs_total{path="local"}) or vector(0)'))).toBe(0);

    // Where the durations fall: the histogram's own bucket bounds, as Prometheus has them.
    const bounds = (await prom.query('sandgate_exec_duration_bucket{path="relayed"}'))
      .map((s) => Number(s.metric.le === '+Inf' ? Infinity : s.metric.le))
      .filter((v, i, all) => all.indexOf(v) === i)
      .sort((a, b) => a - b);
    expect(bounds.length).toBeGreaterThan(3);
    // Every exec lasted at least SLEEP (the replica's timing) and at most what the client waited.
    const lower = Math.max(0, ...bounds.filter((b) => b < SLEEP));
    const upper = Math.min(...bounds.filter((b) => b >= Math.max(...waited)));
    let p99 = NaN;
    await waitFor('the exec duration p99', async () => {
      p99 = num(await prom.query('histogram_quantile(0.99, sum by (le) (rate(sandgate_exec_duration_bucket[1m])))'));
      return Number.isFinite(p99) && p99 > lower;
    }, 20_000).catch((err: unknown) => {
      throw new Error(`${String(err)}: p99=${p99}, bucket bounds ${bounds.join(' ')}, client waits ${waited.join(' ')}`);
    });
    expect(p99, `bounds ${bounds.join(' ')}; client waits ${waited.join(' ')}`).toBeGreaterThan(lower);
    expect(p99, `bounds ${bounds.join(' ')}; client waits ${waited.join(' ')}`).toBeLessThanOrEqual(upper);
  });

  it('every dashboard query and alert rule names a metric the replicas export, and Prometheus evaluates them', { timeout: 180_000 }, async () => {
    // A takeover, as when the owner stalls past its lease and the supervisor is claimed elsewhere:
    // a newer claim in Redis (by a holder that is none of the replicas) makes the owner's next
    // renewal refused; it closes the session, and the supervisor's reconnect claims the sandbox
    // while that holder's lease is still live, which is a failover.
    const ownerBefore = cluster.replicas[owner]!.id;
    const newerClaim = await new OwnershipStore(r, 6000).claim(sbx.id, 'elsewhere', 'prometheus-test', 'prometheus-test');
    await waitFor('the sandbox claimed again by a replica', async () => {
      const rec = await r.hgetall(keysFor(r).owner(sbx.id));
      return rec.replica && rec.replica !== 'elsewhere' && Number(rec.fence) > newerClaim ? rec.replica : undefined;
    }, 30_000);
    const ownerNow = await ownerOf(r, sbx.id);
    owner = cluster.replicas.findIndex((x) => x.id === ownerNow);
    relay = (owner + 1) % cluster.replicas.length;
    await waitFor('the refused renewal and the failover in prometheus', async () => {
      const refused = await prom.query(`sum(sandgate_ownership_renewals_refused_total{replica="${ownerBefore}"})`);
      const failovers = await prom.query('sum(sandgate_failovers_total)');
      return num(refused) >= 1 && num(failovers) >= 1;
    }, 30_000);

    // Some of everything else: local and relayed execs, one killed by its timeout, HTTP requests.
    await sleepExec(owner, 0);
    await sleepExec(relay, 0);
    const timedOut = await runCli(['sandbox', 'exec', sbx.name, '--timeout', '1', '--', 'sleep', '30'], { gateway: gw(relay) });
    expect(timedOut.code).toBe(124);
    for (const x of cluster.replicas) expect((await cluster.httpGet(`${x.httpUrl}/readyz`)).status).toBe(200);
    await runCli(['sandbox', 'get', sbx.name], { gateway: gw(relay) });

    // The periodic figures: the fleet's phase count (every 30 s on each replica) and the new
    // owner's usage samples of the sandbox (every 15 s), each in Prometheus for a few scrapes.
    await waitFor('the Ready count and the sandbox usage from its owner in prometheus', async () => {
      const ready = num(await prom.query('max(sandgate_sandboxes{job="sandgate", phase="Ready"})'));
      const ownerId = cluster.replicas[owner]!.id;
      const usage = num(await prom.query(`count(count_over_time(sandgate_sandbox_memory_bytes{replica="${ownerId}", sandbox_id="${sbx.id}"}[1m]) > 2) + count(count_over_time(sandgate_sandbox_cpu_seconds_total{replica="${ownerId}", sandbox_id="${sbx.id}"}[1m]) > 2)`));
      return ready === 1 && usage === 2;
    }, 60_000, 500);

    const expositions = await Promise.all(cluster.replicas.map(async (x) => {
      const res = await cluster.httpGet(`${x.httpUrl}/metrics`);
      expect(res.status).toBe(200);
      return exportedNames(res.body);
    }));
    const samples = new Set(expositions.flatMap((e) => [...e.samples]));
    const declared = new Set(expositions.flatMap((e) => [...e.declared]));

    const dashboard = JSON.parse(readFileSync(path.join(repoRoot, 'deploy/grafana/sandgate.json'), 'utf8')) as {
      panels: { type: string; title: string; targets?: { expr: string }[] }[];
    };
    const queries = dashboard.panels.filter((p) => p.type !== 'row').flatMap((p) => p.targets!.map((t) => ({ where: `panel "${p.title}"`, expr: t.expr })));
    const alerts = [...readFileSync(ALERTS_FILE, 'utf8').matchAll(/^\s*- alert:\s*(\S+)\n(?:\s*#.*\n)*\s*expr:\s*(.+)$/gm)].map((m) => ({ where: `alert ${m[1]}`, expr: m[2]! }));
    expect(alerts.length).toBeGreaterThanOrEqual(5);

    const missing: string[] = [];
    for (const { where, expr } of [...queries, ...alerts]) {
      for (const name of metricNames(expr)) {
        // `up` is Prometheus' own series for every target; it is checked below.
        if (name === 'up') continue;
        if (!samples.has(name) && !declared.has(name)) missing.push(`${where}: ${name}`);
      }
    }
    expect(missing, `names no replica exports on /metrics:\n${missing.join('\n')}`).toEqual([]);
    expect(num(await prom.query('count(up{job="sandgate"} == 1)'))).toBe(3);

    // The core panels have data after this activity (a dashboard of empty panels would pass the
    // name check if the names were declared but never recorded).
    for (const name of ['sandgate_execs_total', 'sandgate_exec_duration_bucket', 'rpc_server_duration_bucket', 'http_server_request_duration_bucket', 'sandgate_supervisor_sessions', 'sandgate_sandboxes_owned', 'db_client_operation_duration_bucket', 'sandgate_sandboxes', 'sandgate_exec_kills_total']) {
      expect(samples.has(name), `${name} has no sample on any replica`).toBe(true);
    }
    await waitFor('a timeout kill in prometheus', async () => num(await prom.query('sum(sandgate_exec_kills_total{reason="timeout"})')) >= 1, 20_000);

    // Prometheus evaluates every query (bad PromQL or a type error is an error answer), and every
    // panel has series to draw after this activity.
    const results = new Map<string, PromSample[]>();
    const empty: string[] = [];
    for (const { where, expr } of queries) {
      const res = await prom.query(withGrafanaVariables(expr, { replica: '.*' })).catch((err: unknown) => {
        throw new Error(`${where}: ${String(err)}`);
      });
      if (res.length === 0) empty.push(`${where}: ${expr}`);
      results.set(where, [...(results.get(where) ?? []), ...res]);
    }
    expect(empty, `panels without a series:\n${empty.join('\n')}`).toEqual([]);
    // What the fleet looks like right now: three replicas, one Ready sandbox with one session on
    // its owner, its memory on the top-sandboxes table, relayed execs timed.
    const value = (title: string, where: (m: Record<string, string>) => boolean = () => true) =>
      (results.get(`panel "${title}"`) ?? []).filter((x) => where(x.metric)).map((x) => Number(x.value[1]));
    expect(value('Replicas up')).toEqual([3]);
    expect(value('Ready sandboxes')).toEqual([1]);
    expect(value('Owned sandboxes')).toEqual([1]);
    expect(value('Supervisor sessions')).toEqual([1]);
    expect(value('Owned sandboxes by replica', (m) => m.replica === cluster.replicas[owner]!.id)).toEqual([1]);
    expect(value('Top sandboxes by memory', (m) => m.sandbox_id === sbx.id && m.sandbox_name === sbx.name)[0]).toBeGreaterThan(0);
    expect(value('Exec latency p50 / p99: local vs relayed', (m) => m.path === 'relayed').every((v) => Number.isFinite(v) && v > 0)).toBe(true);
    expect(value('Redis reachable')).toEqual([1, 1, 1]);
    // …and the shipped alert rules, loaded and evaluated without error.
    const rules = await waitFor('alert rules evaluated', async () => {
      const data = await prom.api<{ groups: { rules: { name: string; health: string; lastError?: string; lastEvaluation: string }[] }[] }>('/api/v1/rules');
      const all = data.groups.flatMap((g) => g.rules);
      return all.length > 0 && all.every((x) => !x.lastEvaluation.startsWith('0001')) ? all : undefined;
    }, 20_000);
    expect(rules.map((x) => x.name)).toEqual(alerts.map((a) => a.where.replace('alert ', '')));
    for (const rule of rules) expect(rule.health, `${rule.name}: ${rule.lastError ?? ''}`).toBe('ok');
    // The one thing that went wrong in this fleet, the refused renewal above, fires its alert on
    // the replica it happened to, and nothing else fires.
    const firing = await waitFor('the renewals-refused alert firing', async () => {
      const data = await prom.api<{ alerts: { labels: Record<string, string>; state: string }[] }>('/api/v1/alerts');
      const now = data.alerts.filter((a) => a.state === 'firing').map((a) => `${a.labels.alertname} ${a.labels.replica ?? ''}`.trim());
      return now.length > 0 ? now : undefined;
    }, 20_000);
    expect(firing).toEqual([`SandgateOwnershipRenewalsRefused ${ownerBefore}`]);
  });
});
