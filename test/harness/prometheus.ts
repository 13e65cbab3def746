// A real Prometheus (Debian's `prometheus` package) for e2e tests: its own free port and
// temporary storage, a generated configuration (written as JSON, which is YAML), queried over
// its HTTP API. A missing binary fails the test loudly: install the `prometheus` package.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort } from './ports.ts';
import { waitFor } from './wait.ts';

export const PROMETHEUS_BIN = '/usr/bin/prometheus';

export interface PromSample {
  metric: Record<string, string>;
  value: [number, string];
}

export interface TestPrometheus {
  url: string;
  dir: string;
  logs: string[];
  /** An instant query; rejects when Prometheus answers an error (bad PromQL included). */
  query(expr: string): Promise<PromSample[]>;
  /** GET on the HTTP API (`/api/v1/...`), the parsed `data`. */
  api<T>(pathAndQuery: string): Promise<T>;
  stop(): Promise<void>;
}

export interface PrometheusOptions {
  /** `scrape_configs` entries, as Prometheus' configuration spells them. */
  scrapeConfigs: unknown[];
  /** Absolute paths of rule files to load. */
  ruleFiles?: string[];
  /** Scrape and evaluation interval (default 1s: tests do not wait 15 s for a sample). */
  interval?: string;
}

export async function startPrometheus(opts: PrometheusOptions): Promise<TestPrometheus> {
  if (!existsSync(PROMETHEUS_BIN)) {
    throw new Error(`${PROMETHEUS_BIN} is missing: install Debian's prometheus package (apt-get install prometheus)`);
  }
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sg-prometheus-'));
  const interval = opts.interval ?? '1s';
  const config = {
    global: { scrape_interval: interval, scrape_timeout: interval, evaluation_interval: interval },
    rule_files: opts.ruleFiles ?? [],
    scrape_configs: opts.scrapeConfigs,
  };
  const configFile = path.join(dir, 'prometheus.yml');
  writeFileSync(configFile, JSON.stringify(config, null, 2));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const logs: string[] = [];
  const proc: ChildProcess = spawn(
    PROMETHEUS_BIN,
    [
      `--config.file=${configFile}`,
      `--storage.tsdb.path=${path.join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const collect = (c: Buffer) => {
    logs.push(c.toString());
    if (logs.length > 2000) logs.splice(0, 1000);
  };
  proc.stdout!.on('data', collect);
  proc.stderr!.on('data', collect);

  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise((res) => proc.once('exit', res));
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  };

  const api = async <T>(pathAndQuery: string): Promise<T> => {
    const res = await fetch(url + pathAndQuery);
    const body = (await res.json()) as { status: string; data: T; error?: string; errorType?: string };
    if (body.status !== 'success') throw new Error(`prometheus ${pathAndQuery}: ${body.errorType}: ${body.error}`);
    return body.data;
  };
  const query = async (expr: string): Promise<PromSample[]> => {
    const data = await api<{ resultType: string; result: PromSample[] | [number, string] }>(`/api/v1/query?query=${encodeURIComponent(expr)}`);
    // A scalar expression answers one value, not a vector.
    if (data.resultType === 'scalar') return [{ metric: {}, value: data.result as [number, string] }];
    return data.result as PromSample[];
  };

  try {
    await waitFor('prometheus ready', async () => {
      if (proc.exitCode !== null) throw new Error(`prometheus exited ${proc.exitCode}: ${logs.join('').slice(-2000)}`);
      const res = await fetch(`${url}/-/ready`).catch(() => null);
      return res?.status === 200;
    }, 30_000);
  } catch (err) {
    await stop();
    throw err;
  }
  return { url, dir, logs, query, api, stop };
}
