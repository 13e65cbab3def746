// The shipped observability files are valid: Prometheus' own promtool accepts the scrape
// configuration and the alert rules, the rules' unit tests (alerts.test.yml) pass, and
// deploy/grafana/sandgate.json is a Grafana dashboard whose every query is PromQL that
// Prometheus parses. Which metrics those queries name is checked against live replicas in
// test/e2e/prometheus.test.ts. promtool comes with Debian's `prometheus` package; without it
// these tests fail, they do not skip.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { metricNames, withGrafanaVariables } from '../harness/promql.ts';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const promDir = path.join(repoRoot, 'deploy/prometheus');

function promtool(...args: string[]): { code: number; output: string } {
  const res = spawnSync('promtool', args, { cwd: repoRoot, encoding: 'utf8' });
  if (res.error) {
    throw new Error(`promtool could not run (${res.error.message}): install Debian's prometheus package (apt-get install prometheus)`);
  }
  return { code: res.status ?? -1, output: `${res.stdout}${res.stderr}` };
}

interface Target {
  refId?: string;
  expr?: string;
  datasource?: { type?: string; uid?: string };
}
interface Panel {
  id: number;
  type: string;
  title: string;
  gridPos: { h: number; w: number; x: number; y: number };
  datasource?: { type?: string; uid?: string };
  targets?: Target[];
  panels?: Panel[];
}
interface Dashboard {
  uid: string;
  title: string;
  schemaVersion: number;
  panels: Panel[];
  templating: { list: { name: string; type: string; query?: unknown; datasource?: { uid?: string } }[] };
}

const dashboard = JSON.parse(readFileSync(path.join(repoRoot, 'deploy/grafana/sandgate.json'), 'utf8')) as Dashboard;
const queryPanels = dashboard.panels.filter((p) => p.type !== 'row');
const DS_UID = '${DS_PROMETHEUS}';

describe('deploy/prometheus (promtool)', () => {
  it('promtool check config accepts prometheus.yml (and the rule file it names)', () => {
    const res = promtool('check', 'config', 'deploy/prometheus/prometheus.yml');
    expect(res.output).toContain('SUCCESS');
    expect(res.code, res.output).toBe(0);
  });

  it('promtool check rules accepts alerts.yml', () => {
    const res = promtool('check', 'rules', 'deploy/prometheus/alerts.yml');
    expect(res.code, res.output).toBe(0);
  });

  it('every alert fires in alerts.test.yml (promtool test rules)', () => {
    const rules = readFileSync(path.join(promDir, 'alerts.yml'), 'utf8');
    const tests = readFileSync(path.join(promDir, 'alerts.test.yml'), 'utf8');
    const alerts = [...rules.matchAll(/^\s*- alert:\s*(\S+)/gm)].map((m) => m[1]!);
    expect(alerts.length).toBeGreaterThanOrEqual(5);
    for (const name of ['SandgateReplicaDown', 'SandgateRedisUnreachable', 'SandgateOwnershipRenewalsRefused', 'SandgateBackstopKills', 'SandgateQueueBacklog']) {
      expect(alerts).toContain(name);
    }
    // An alert the unit tests never expect to fire could have an expression that never can.
    for (const name of alerts) expect(tests, `alerts.test.yml has no firing case for ${name}`).toMatch(new RegExp(`alertname: ${name}\\n\\s+exp_alerts:\\n\\s+- exp_labels`));
    const res = promtool('test', 'rules', 'deploy/prometheus/alerts.test.yml');
    expect(res.code, res.output).toBe(0);
  });

  it('scrapes the three compose replicas on their HTTP ports', () => {
    const config = readFileSync(path.join(promDir, 'prometheus.yml'), 'utf8');
    const compose = readFileSync(path.join(repoRoot, 'docker-compose.yml'), 'utf8');
    for (const m of compose.matchAll(/"--replica-id", "(r\d+)".*"--http-port", "(\d+)"/g)) {
      expect(config).toContain(`targets: ['127.0.0.1:${m[2]}']`);
      expect(config).toMatch(new RegExp(`targets: \\['127\\.0\\.0\\.1:${m[2]}'\\]\\n\\s+labels: \\{ replica: ${m[1]} \\}`));
    }
    expect([...compose.matchAll(/"--http-port"/g)].length).toBe(3);
  });
});

describe('deploy/grafana/sandgate.json', () => {
  it('is a Grafana dashboard: uid, title, schemaVersion, panels with unique ids on a 24-column grid', () => {
    expect(dashboard.uid).toMatch(/^[A-Za-z0-9_-]{1,40}$/);
    expect(dashboard.title).toBeTruthy();
    expect(Number.isInteger(dashboard.schemaVersion) && dashboard.schemaVersion >= 36).toBe(true);
    const ids = dashboard.panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    for (const p of dashboard.panels) {
      expect(['row', 'timeseries', 'stat', 'table', 'bargauge', 'gauge'], p.title).toContain(p.type);
      const g = p.gridPos;
      expect(g.x >= 0 && g.w > 0 && g.x + g.w <= 24 && g.h > 0 && g.y >= 0, `${p.title}: ${JSON.stringify(g)}`).toBe(true);
    }
    // No two panels overlap.
    const cells = new Set<string>();
    for (const p of dashboard.panels) {
      for (let x = p.gridPos.x; x < p.gridPos.x + p.gridPos.w; x++) {
        for (let y = p.gridPos.y; y < p.gridPos.y + p.gridPos.h; y++) {
          expect(cells.has(`${x},${y}`), `${p.title} overlaps another panel at ${x},${y}`).toBe(false);
          cells.add(`${x},${y}`);
        }
      }
    }
  });

  it('asks for a Prometheus datasource and every panel and query uses it', () => {
    const ds = dashboard.templating.list.find((v) => v.name === 'DS_PROMETHEUS');
    expect(ds).toMatchObject({ type: 'datasource', query: 'prometheus' });
    expect(queryPanels.length).toBeGreaterThanOrEqual(20);
    for (const p of queryPanels) {
      expect(p.datasource, p.title).toEqual({ type: 'prometheus', uid: DS_UID });
      expect(p.targets?.length, p.title).toBeGreaterThan(0);
      const refIds = p.targets!.map((t) => t.refId);
      expect(new Set(refIds).size, p.title).toBe(refIds.length);
      for (const t of p.targets!) {
        expect(t.datasource, p.title).toEqual({ type: 'prometheus', uid: DS_UID });
        expect(t.expr, p.title).toMatch(/\S/);
        expect(metricNames(t.expr!).length, `${p.title}: ${t.expr}`).toBeGreaterThan(0);
      }
    }
    for (const v of dashboard.templating.list.filter((x) => x.type === 'query')) expect(v.datasource?.uid, v.name).toBe(DS_UID);
  });

  it('covers what an operator needs: fleet, RPC, exec local vs relayed, failover, kills, queue, Redis, phases, top sandboxes', () => {
    const exprs = queryPanels.flatMap((p) => p.targets!.map((t) => t.expr!)).join('\n');
    for (const name of [
      'up', 'sandgate_supervisor_sessions', 'sandgate_sandboxes_owned', 'rpc_server_duration_count', 'rpc_server_duration_bucket',
      'sandgate_exec_duration_bucket', 'sandgate_execs_total', 'sandgate_failovers_total', 'sandgate_failover_duration_bucket',
      'sandgate_exec_kills_total', 'sandgate_queue_jobs', 'sandgate_job_latency_bucket', 'sandgate_job_failures_total',
      'db_client_operation_duration_bucket', 'sandgate_sandboxes', 'sandgate_sandbox_cpu_seconds_total', 'sandgate_sandbox_memory_bytes',
    ]) {
      expect(exprs, name).toMatch(new RegExp(`\\b${name}\\b`));
    }
    expect(exprs).toMatch(/histogram_quantile\(0\.5, sum by \(le, path\) \(rate\(sandgate_exec_duration_bucket/);
    expect(exprs).toMatch(/histogram_quantile\(0\.99, sum by \(le, path\) \(rate\(sandgate_exec_duration_bucket/);
  });

  it('every query is PromQL that Prometheus parses (promtool check rules on them as recording rules)', () => {
    const exprs = queryPanels.flatMap((p) => p.targets!.map((t) => ({ title: p.title, expr: withGrafanaVariables(t.expr!, { replica: '.*' }) })));
    const dir = mkdtempSync(path.join(os.tmpdir(), 'sg-dashboard-'));
    try {
      const rules = { groups: [{ name: 'dashboard', rules: exprs.map((e, i) => ({ record: `dashboard:query_${i}`, expr: e.expr })) }] };
      const file = path.join(dir, 'dashboard-rules.yml');
      writeFileSync(file, JSON.stringify(rules, null, 2));
      const res = promtool('check', 'rules', file);
      expect(res.code, res.output).toBe(0);
      expect(res.output).toContain(`SUCCESS: ${exprs.length} rules found`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('metricNames (reading metric names out of PromQL)', () => {
  it('finds selectors, skips functions, labels, grouping, ranges and variables', () => {
    expect(metricNames('histogram_quantile(0.99, sum by (le, path) (rate(sandgate_exec_duration_bucket{job="sandgate", path=~"$p"}[$__rate_interval])))')).toEqual(['sandgate_exec_duration_bucket']);
    expect(metricNames('sum(rate(a_total{code!="0"}[5m])) / sum(rate(a_total[5m])) > bool 0').sort()).toEqual(['a_total']);
    expect(metricNames('up == 0 and on (instance) foo offset 5m').sort()).toEqual(['foo', 'up']);
    expect(metricNames('topk(10, max by (sandbox_id) (m_bytes)) or vector(0)')).toEqual(['m_bytes']);
  });
});
