// `npm run bench`: every benchmark in sequence, each in its own process (its own Redis and
// replicas, cleaned up by itself), then one markdown file with every table:
// load-tests/results/latest.md (+ latest.json with the raw reports).
//   node load-tests/run-all.ts [--only a,b] [--skip a,b] [--quick] [--out load-tests/results/latest.md]
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync, mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { renderReport, type BenchReport } from './bench.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(here, '..');

interface Bench {
  id: string;
  /** Full run (what BENCHMARKS.md quotes) and a quick smoke run. */
  args: string[];
  quickArgs: string[];
  /** Skip reason, or null to run. */
  precondition?: () => string | null;
  timeoutMs: number;
}

const dockerUsable = (): string | null => {
  const info = spawnSync('docker', ['info', '--format', '{{.ServerVersion}}'], { stdio: 'ignore', timeout: 15_000 });
  if (info.status !== 0) return 'no Docker engine (`docker info` failed)';
  const img = spawnSync('docker', ['image', 'inspect', 'sandgate-sandbox:latest'], { stdio: 'ignore', timeout: 15_000 });
  if (img.status !== 0) return 'image sandgate-sandbox:latest missing (scripts/build-sandbox-image.sh)';
  return null;
};
const fileExists = (id: string) => () => (existsSync(path.join(here, `${id}.ts`)) ? null : `load-tests/${id}.ts not written yet`);

const BENCHES: Bench[] = [
  { id: 'exec-latency', args: ['--iterations', '500', '--warmup', '20'], quickArgs: ['--iterations', '30', '--warmup', '3'], timeoutMs: 180_000 },
  { id: 'exec-throughput', args: ['--mib', '128', '--repetitions', '4', '--warmup', '1'], quickArgs: ['--mib', '32', '--repetitions', '2', '--warmup', '0'], timeoutMs: 300_000 },
  {
    id: 'tracing-overhead',
    args: ['--iterations', '200', '--warmup', '20', '--mib', '64', '--repetitions', '4'],
    quickArgs: ['--iterations', '20', '--warmup', '3', '--mib', '16', '--repetitions', '2'],
    timeoutMs: 420_000,
  },
  // Issue 16: the confining wrapper's steps, each alone, next to a bare spawn (root on the host).
  { id: 'launcher-steps', args: ['--iterations', '200', '--warmup', '10'], quickArgs: ['--iterations', '20', '--warmup', '2'], timeoutMs: 180_000 },
  // Issue 16: spare wrappers started through the native spawn (posix_spawn) vs Node's (a fork).
  { id: 'spare-spawn', args: ['--iterations', '300', '--warmup', '20', '--concurrency', '4'], quickArgs: ['--iterations', '20', '--warmup', '3', '--concurrency', '2'], timeoutMs: 240_000 },
  // Issue 16: a PTY exec's process started through the native spawn (posix_spawn) vs node-pty (a fork).
  { id: 'pty-spawn', args: ['--iterations', '300', '--warmup', '20'], quickArgs: ['--iterations', '20', '--warmup', '3'], timeoutMs: 240_000 },
  { id: 'rest-exec', args: ['--iterations', '300', '--warmup', '20'], quickArgs: ['--iterations', '20', '--warmup', '3'], timeoutMs: 180_000 },
  // Written alongside (kill-latency, docker-create); included when present.
  { id: 'kill-latency', args: [], quickArgs: ['--iterations', '10'], precondition: fileExists('kill-latency'), timeoutMs: 300_000 },
  // Issue 16: the native netns agent against the Node one (a sandbox's start and footprint).
  { id: 'netns-agent', args: ['--sandboxes', '10', '--settle-seconds', '10'], quickArgs: ['--sandboxes', '2', '--settle-seconds', '2'], timeoutMs: 300_000 },
  // Issue 16: the memory and start of idle Node processes with more and more of the supervisor loaded.
  { id: 'supervisor-floor', args: ['--per-kind', '17', '--settle-seconds', '10'], quickArgs: ['--per-kind', '2', '--settle-seconds', '2'], timeoutMs: 300_000 },
  // Issue 16: a spawn's cost against the spawning Node process's size, beside a native loop's.
  { id: 'fork-cost', args: ['--iterations', '200', '--batch', '10'], quickArgs: ['--iterations', '20', '--batch', '5'], timeoutMs: 180_000 },
  { id: 'pool-footprint', args: ['--sandboxes', '5', '--settle-seconds', '10'], quickArgs: ['--sandboxes', '2', '--settle-seconds', '2'], timeoutMs: 300_000 },
  {
    id: 'create-latency',
    args: ['--iterations', '20', '--duration', '20', '--concurrency', '4', '--docker-iterations', '5', '--cache-iterations', '20', '--disk-spares-iterations', '15', '--pool-iterations', '20'],
    quickArgs: ['--iterations', '3', '--duration', '5', '--concurrency', '2', '--docker-iterations', '1', '--cache-iterations', '3', '--disk-spares-iterations', '3', '--pool-iterations', '3'],
    timeoutMs: 480_000,
  },
  {
    id: 'docker-create',
    args: ['--iterations', '10'],
    quickArgs: ['--iterations', '2', '--warmup', '1'],
    precondition: () => fileExists('docker-create')() ?? dockerUsable(),
    timeoutMs: 300_000,
  },
  // Issue 14: an exposed service's streamed response through the owner vs another replica.
  { id: 'service-proxy', args: ['--mib', '256', '--repetitions', '5', '--warmup', '1'], quickArgs: ['--mib', '32', '--repetitions', '2', '--warmup', '0'], timeoutMs: 300_000 },
  {
    id: 'file-transfer',
    args: ['--mib', '256', '--repetitions', '5', '--warmup', '1'],
    quickArgs: ['--mib', '32', '--repetitions', '2', '--warmup', '0'],
    timeoutMs: 420_000,
  },
  {
    id: 'session-scale',
    args: ['--levels', '1000,2500,5000,10000', '--window', '10', '--settle', '5', '--max-ramp', '30'],
    quickArgs: ['--levels', '200,500', '--window', '3', '--settle', '2', '--max-ramp', '15'],
    timeoutMs: 420_000,
  },
  // Issue 17: Redis bytes per sandbox record, live session and SSH session; a delete leaves nothing.
  { id: 'redis-memory', args: ['--sandboxes', '1000'], quickArgs: ['--sandboxes', '200'], timeoutMs: 120_000 },
  // Issue 17: creates and deletes in single-slot steps on one Redis and on a cluster, side by side.
  { id: 'store-steps', args: ['--sandboxes', '2000'], quickArgs: ['--sandboxes', '200', '--batch', '50'], timeoutMs: 180_000 },
];

interface Outcome {
  id: string;
  command: string;
  status: 'ok' | 'failed' | 'skipped';
  detail: string;
  report?: BenchReport;
  stdout: string;
  durationMs: number;
}

let current: ReturnType<typeof spawn> | null = null;
let stopping = false;
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.on(sig, () => {
    stopping = true;
    // The benchmark cleans up on SIGTERM; give it time, then insist.
    if (current && current.exitCode === null) {
      current.kill('SIGTERM');
      setTimeout(() => current?.kill('SIGKILL'), 60_000).unref();
    } else process.exit(130);
  });
}

function runOne(b: Bench, quick: boolean, tmp: string): Promise<Outcome> {
  const args = [...(quick ? b.quickArgs : b.args)];
  const command = ['node', `load-tests/${b.id}.ts`, ...args].join(' ');
  const skip = b.precondition?.() ?? null;
  if (skip) return Promise.resolve({ id: b.id, command, status: 'skipped', detail: skip, stdout: '', durationMs: 0 });
  const jsonPath = path.join(tmp, `${b.id}.json`);
  // Scripts built on bench.ts accept --report-json; any other is captured from its stdout.
  const reportJson = readFileSync(path.join(here, `${b.id}.ts`), 'utf8').includes('COMMON_OPTIONS');
  if (reportJson) args.push('--report-json', jsonPath);
  const t0 = Date.now();
  console.log(`\n=== ${b.id}: ${command}`);
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [path.join(here, `${b.id}.ts`), ...args], { cwd: repoRoot, stdio: ['ignore', 'pipe', 'inherit'] });
    current = child;
    let stdout = '';
    child.stdout!.on('data', (c: Buffer) => {
      stdout += c.toString();
      process.stdout.write(c);
    });
    const timer = setTimeout(() => {
      console.error(`${b.id}: over ${b.timeoutMs / 1000} s, stopping it`);
      child.kill('SIGTERM');
      setTimeout(() => child.kill('SIGKILL'), 60_000).unref();
    }, b.timeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      current = null;
      const durationMs = Date.now() - t0;
      let report: BenchReport | undefined;
      if (reportJson && existsSync(jsonPath)) report = JSON.parse(readFileSync(jsonPath, 'utf8')) as BenchReport;
      const ok = code === 0 && (!reportJson || report !== undefined);
      resolve({ id: b.id, command, status: ok ? 'ok' : 'failed', detail: ok ? '' : `exit ${code ?? signal}`, report, stdout, durationMs });
    });
  });
}

function gitDescribe(): string {
  const rev = spawnSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: repoRoot, encoding: 'utf8' }).stdout.trim();
  const dirty = spawnSync('git', ['status', '--porcelain'], { cwd: repoRoot, encoding: 'utf8' }).stdout.trim() ? ' + uncommitted changes' : '';
  return rev ? `${rev}${dirty}` : 'unknown';
}

function machine(): string {
  const cpus = os.cpus();
  return `${cpus.length} × ${cpus[0]?.model.trim() ?? 'cpu'}, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB RAM, ${os.type()} ${os.release()}, Node ${process.version}`;
}

/** How busy the machine is (all cores, % of one core) over `ms`, before we start anything. */
async function machineBusy(ms = 3000): Promise<number> {
  const read = () => {
    const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1, 9).map(Number);
    return { total: f.reduce((a, b) => a + b, 0), idle: f[3]! + f[4]! };
  };
  const a = read();
  await new Promise((r) => setTimeout(r, ms));
  const b = read();
  const total = b.total - a.total;
  return total > 0 ? ((total - (b.idle - a.idle)) / total) * os.cpus().length * 100 : NaN;
}

function render(outcomes: Outcome[], meta: { started: Date; totalMs: number; quick: boolean; loadStart: number[]; loadEnd: number[]; busyBefore: number }): string {
  const lines: string[] = [
    '# sandgate benchmark results',
    '',
    `Generated by \`npm run bench${meta.quick ? ' -- --quick' : ''}\` on ${meta.started.toISOString()}; total ${(meta.totalMs / 1000).toFixed(0)} s.`,
    '',
    `- machine: ${machine()}`,
    `- other work on the machine just before the run: ${meta.busyBefore.toFixed(0)}% of ${os.cpus().length * 100}% CPU busy${meta.busyBefore > 30 ? ' (NOT quiet: expect noisy figures)' : ''}`,
    `- load average (1/5/15 min) at start: ${meta.loadStart.map((v) => v.toFixed(2)).join(' / ')}, at end: ${meta.loadEnd.map((v) => v.toFixed(2)).join(' / ')} (anything else running on the machine shows up here)`,
    `- code: ${gitDescribe()}`,
    '- every benchmark runs its own redis-server and gateway replicas on loopback; figures within one table are measured side by side in one run',
    '',
    '| benchmark | status | time | command |',
    '|---|---|---|---|',
    ...outcomes.map((o) => `| ${o.id} | ${o.status}${o.detail ? `: ${o.detail}` : ''} | ${(o.durationMs / 1000).toFixed(0)} s | \`${o.command}\` |`),
    '',
  ];
  for (const o of outcomes) {
    if (o.status === 'skipped') continue;
    if (o.report) {
      lines.push(renderReport(o.report, { heading: true }));
    } else {
      lines.push(`## ${o.id}`, '', `Reproduce: \`${o.command}\` (took ${(o.durationMs / 1000).toFixed(1)} s)`, '');
      lines.push(o.stdout.trim() || '(no output)', '');
      if (o.status === 'failed') lines.push(`- FAILED: ${o.detail}`, '');
    }
  }
  return lines.join('\n');
}

async function main() {
  const { values } = parseArgs({
    options: {
      only: { type: 'string' },
      skip: { type: 'string' },
      quick: { type: 'boolean', default: false },
      out: { type: 'string', default: path.join('load-tests', 'results', 'latest.md') },
    },
  });
  const only = values.only?.split(',').filter(Boolean);
  const skip = new Set(values.skip?.split(',').filter(Boolean) ?? []);
  for (const id of [...(only ?? []), ...skip]) if (!BENCHES.some((b) => b.id === id)) throw new Error(`unknown benchmark '${id}' (known: ${BENCHES.map((b) => b.id).join(', ')})`);
  const selected = BENCHES.filter((b) => (!only || only.includes(b.id)) && !skip.has(b.id));
  const busyBefore = await machineBusy();
  console.log(`machine busy before the run: ${busyBefore.toFixed(0)}% of ${os.cpus().length * 100}%`);
  const started = new Date();
  const loadStart = os.loadavg();
  const t0 = Date.now();
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'sg-bench-'));
  const outcomes: Outcome[] = [];
  try {
    for (const b of selected) {
      if (stopping) break;
      outcomes.push(await runOne(b, values.quick ?? false, tmp));
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  const totalMs = Date.now() - t0;
  const out = path.resolve(repoRoot, values.out!);
  mkdirSync(path.dirname(out), { recursive: true });
  writeFileSync(out, render(outcomes, { started, totalMs, quick: values.quick ?? false, loadStart, loadEnd: os.loadavg(), busyBefore }));
  writeFileSync(out.replace(/\.md$/, '') + '.json', JSON.stringify({ started: started.toISOString(), totalMs, machine: machine(), outcomes: outcomes.map(({ stdout: _s, ...o }) => o) }, null, 2));
  console.log(`\n${outcomes.map((o) => `${o.id}: ${o.status}${o.detail ? ` (${o.detail})` : ''} in ${(o.durationMs / 1000).toFixed(0)} s`).join('\n')}`);
  console.log(`total ${(totalMs / 1000).toFixed(0)} s; wrote ${path.relative(repoRoot, out)}`);
  process.exit(outcomes.some((o) => o.status === 'failed') ? 1 : 0);
}

await main();
