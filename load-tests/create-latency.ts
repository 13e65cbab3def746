// Create-to-first-exec latency and sustained creates per second.
//   node load-tests/create-latency.ts [--iterations 20] [--duration 20] [--concurrency 4] [--docker-iterations 5] [--cache-iterations 20] [--disk-spares-iterations 15] [--pool-iterations 20] [--pool-idle-seconds 0] [--tty-main]
//
// One sandbox = CreateSandbox (unary) → GetSandbox polled every 10 ms until Ready (the
// supervisor's hello was accepted) → `true` exec'd until it exits 0. Every figure is measured
// from the CreateSandbox call. Phases:
//   1. sequential: N sandboxes one after another on the local driver (p50/p90/p99);
//   2. sustained: `--concurrency` workers creating back to back for `--duration` seconds
//      (sandboxes stay up: that is what a burst of agents does), creates/s and failures;
//   1b. the supervisors' compile cache: a replica with it next to one without, alternately;
//   1d. sandbox disks: a replica keeping them ready next to one making each at its create,
//      alternately;
//   1c. a warm pool (`sandgate pool set`): creates claiming a member next to cold creates,
//      alternately (the pool refilled between claims, untimed; with --pool-idle-seconds N its
//      members then wait N s more before the claim, as in a pool that waits for its callers);
//   3. docker (only with a Docker engine AND a gateway that accepts `--driver docker`): the same
//      sequential figure next to plain `docker run --rm IMAGE true`, interleaved.
// Deletion is not timed into any create figure; every sandbox is deleted at the end (timed
// separately), and the state dir is swept for leftovers.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, realpathSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { SandboxPhase, type SandboxResponse } from '@sandgate/protocols';
import { openShellClient, unaryCall, type AnyClient } from '../test/harness/grpc-client.ts';
import { sleep } from '../test/harness/wait.ts';
import { startRedis } from '../test/harness/redis.ts';
import { summarise, ms } from './stats.ts';
import { COMMON_OPTIONS, emitReport, fixed, now, onCleanup, runMain, type BenchReport, type BenchTable } from './bench.ts';
import { killLeftoverCompute, startEnv, startGateway } from './env.ts';
import { execRun } from './exec-client.ts';

export interface CreateLatencyOptions {
  iterations: number;
  durationS: number;
  concurrency: number;
  dockerIterations: number;
  /** Sandboxes per side of the compile cache comparison (0: skip it). */
  cacheIterations: number;
  /** Sandboxes per side of the disks-kept-ready comparison (0: skip it). */
  diskSparesIterations: number;
  /** Sandboxes per side of the warm pool comparison (0: skip it). */
  poolIterations: number;
  /** Seconds the refilled pool's members wait idle before each claim (untimed; 0: none). */
  poolIdleSeconds?: number;
  image: string;
  /**
   * Create without a command, so that every sandbox gets the default main process (`/bin/bash -l`
   * on a terminal), instead of `sleep infinity` on pipes.
   */
  ttyMain?: boolean;
}

/** The main process every sandbox of this run is created with ([] = the default, on a terminal). */
let mainCommand: string[] = ['sleep', 'infinity'];
const mainDescription = () => (mainCommand.length ? `\`${mainCommand.join(' ')}\` main process` : 'default main process (`/bin/bash -l` on a terminal)');

interface Created {
  name: string;
  id: string;
  rpcMs: number;
  readyMs: number;
  firstExecMs: number;
  /** Exec attempts that failed before the first success (should be 0 once Ready). */
  execRetries: number;
  /** Date.now() at the CreateSandbox call: where the supervisor's log timestamps are measured from. */
  startedAtEpochMs: number;
}

/** Supervisor log lines that mark a sandbox's start, in order, and what each row calls them. */
const START_MARKS = [
  ['supervisor starting', 'supervisor process loaded its code'],
  ['workload network namespace ready', 'workload network namespace ready'],
  ['workload confined', 'workload confinement ready (egress proxy)'],
  ['main process started', 'main process started'],
  ['control session established', 'control session established (hello accepted)'],
] as const;

/** The row of the supervisor's Node process starting (its first log line says when). */
const PROCESS_STARTED = 'supervisor\'s Node process started';

/**
 * Where one sandbox's start went, from its supervisor's log (local driver: the sandbox's
 * supervisor.log in the state dir): ms from the CreateSandbox call to each START_MARKS line.
 */
function startTimeline(stateDir: string, c: Created): Map<string, number> {
  const out = new Map<string, number>();
  let text = '';
  try {
    text = readFileSync(path.join(realpathSync(stateDir), 'sandboxes', c.id, 'supervisor.log'), 'utf8');
  } catch {
    return out;
  }
  for (const line of text.split('\n')) {
    let rec: { msg?: string; ts?: string; process_started_at_ms?: unknown };
    try {
      rec = JSON.parse(line) as { msg?: string; ts?: string; process_started_at_ms?: unknown };
    } catch {
      continue;
    }
    // The first line's process_started_at_ms: when Node began, before it loaded anything.
    if (rec.msg === START_MARKS[0][0] && typeof rec.process_started_at_ms === 'number' && !out.has(PROCESS_STARTED)) {
      out.set(PROCESS_STARTED, rec.process_started_at_ms - c.startedAtEpochMs);
    }
    const mark = START_MARKS.find(([msg]) => msg === rec.msg);
    if (mark && rec.ts && !out.has(mark[1])) out.set(mark[1], Date.parse(rec.ts) - c.startedAtEpochMs);
  }
  return out;
}

/** Rows: each start mark's latency from the CreateSandbox call, over `created`. */
function timelineRows(stateDir: string, created: Created[], label = ''): string[][] {
  const timelines = created.map((c) => startTimeline(stateDir, c));
  const marks = [PROCESS_STARTED, ...START_MARKS.map(([, name]) => name)];
  const rows = marks.map((name) => latencyRow(`${label}${name}`, timelines.map((t) => t.get(name)).filter((v): v is number => v !== undefined)));
  // Steps inside one sandbox's start, each sandbox's own difference: less noisy across runs than
  // the rows above, which carry everything before them.
  const step = (from: string, to: string) => {
    const diffs = timelines.flatMap((t) => (t.has(from) && t.has(to) ? [t.get(to)! - t.get(from)!] : []));
    return latencyRow(`${label}… from ${from} to ${to}`, diffs);
  };
  const confined = START_MARKS[2][1];
  return [...rows, step(confined, START_MARKS[3][1]), step(confined, START_MARKS[4][1])];
}

class StageError extends Error {
  readonly stage: string;
  constructor(stage: string, message: string) {
    super(`${stage}: ${message}`);
    this.stage = stage;
  }
}

const errText = (err: unknown) => (err instanceof Error ? err.message : String(err)).split('\n')[0]!.slice(0, 160);

/** Creates one sandbox and times it to its first successful exec. `created` learns the name first, for cleanup. */
async function createToFirstExec(
  client: AnyClient,
  name: string,
  image: string | undefined,
  created: Set<string>,
  deadlineMs = 60_000,
  annotations: Record<string, string> = {},
): Promise<Created> {
  const t0 = now();
  const startedAtEpochMs = Date.now();
  const end = t0 + deadlineMs;
  let res: SandboxResponse;
  try {
    res = await unaryCall<SandboxResponse>(client, 'CreateSandbox', {
      name,
      labels: { bench: 'create-latency' },
      annotations,
      spec: {
        command: mainCommand,
        environment: {},
        providers: [],
        ...(image ? { template: { image, labels: {}, annotations: {}, environment: {} } } : {}),
      },
    });
  } catch (err) {
    throw new StageError('CreateSandbox', errText(err));
  }
  created.add(name);
  const rpcMs = now() - t0;
  const id = res.sandbox!.metadata!.id!;
  let phase = res.sandbox?.status?.phase;
  while (phase !== SandboxPhase.READY) {
    if (phase === SandboxPhase.ERROR) throw new StageError('Ready', 'sandbox went to Error');
    if (now() > end) throw new StageError('Ready', `not Ready after ${deadlineMs} ms (phase ${phase})`);
    await sleep(10);
    try {
      phase = (await unaryCall<SandboxResponse>(client, 'GetSandbox', { name })).sandbox?.status?.phase;
    } catch (err) {
      throw new StageError('GetSandbox', errText(err));
    }
  }
  const readyMs = now() - t0;
  let execRetries = 0;
  for (;;) {
    try {
      const r = await execRun(client, id, ['true'], { deadlineMs: 30_000 });
      if (r.exitCode === 0) break;
      throw new Error(`true exited ${r.exitCode}`);
    } catch (err) {
      execRetries++;
      if (now() > end) throw new StageError('first exec', errText(err));
      await sleep(10);
    }
  }
  return { name, id, rpcMs, readyMs, firstExecMs: now() - t0, execRetries, startedAtEpochMs };
}

/** Deletes every name with bounded concurrency; returns per-delete latencies and failures. */
async function deleteAll(client: AnyClient, names: Iterable<string>, concurrency = 4): Promise<{ ms: number[]; failed: string[] }> {
  const queue = [...names];
  const out: number[] = [];
  const failed: string[] = [];
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let name = queue.shift(); name !== undefined; name = queue.shift()) {
        const t = now();
        try {
          await unaryCall(client, 'DeleteSandbox', { name });
          out.push(now() - t);
        } catch (err) {
          failed.push(`${name}: ${errText(err)}`);
        }
      }
    }),
  );
  return { ms: out, failed };
}

function run0(argv: string[], timeoutMs = 60_000): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      resolve({ code: -1, out: err.message });
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, out });
    });
  });
}

const latencyRow = (label: string, xs: number[]) => {
  const s = summarise(xs);
  return [label, String(s.n), ms(s.p50), ms(s.p90), ms(s.p99), ms(s.mean)];
};
const LATENCY_HEADERS = ['measure (from the CreateSandbox call)', 'n', 'p50', 'p90', 'p99', 'mean'];

export async function run(opts: CreateLatencyOptions): Promise<BenchReport> {
  mainCommand = opts.ttyMain ? [] : ['sleep', 'infinity'];
  const t0 = now();
  const tag = `cl${process.pid.toString(36)}`;
  const { redis, cluster } = await startEnv({ replicas: 2 });
  const client = openShellClient(cluster.replicas[0]!.grpcAddress);
  onCleanup('grpc client', () => client.close());
  const live = new Set<string>();
  onCleanup('benchmark sandboxes', () => deleteAll(client, live));
  const tables: BenchTable[] = [];
  const notes: string[] = [];

  // 1. sequential
  const seq: Created[] = [];
  await createToFirstExec(client, `${tag}-warm`, undefined, live); // first launch pays cold caches
  // …and starts the compile cache's fill and, a second later, the disks kept ready: give both time.
  await sleep(3000);
  for (let i = 0; i < opts.iterations; i++) seq.push(await createToFirstExec(client, `${tag}-s${i}`, undefined, live));
  tables.push({
    caption: `local driver, ${opts.iterations} sandboxes created one after another (after 1 warm-up); ${mainDescription()}; 2 replicas, client on r0`,
    headers: LATENCY_HEADERS,
    rows: [
      latencyRow('CreateSandbox returned', seq.map((c) => c.rpcMs)),
      // Where the time goes, from each sandbox's supervisor log (ms clock of this host).
      ...timelineRows(cluster.stateDir, seq),
      latencyRow('phase Ready (GetSandbox poll, 10 ms)', seq.map((c) => c.readyMs)),
      latencyRow('first `true` exited 0', seq.map((c) => c.firstExecMs)),
    ],
  });
  notes.push(`sequential: ${seq.filter((c) => diskMadeBefore(cluster.stateDir, c)).length} of ${seq.length} sandboxes got a disk kept ready (SANDGATE_LOCAL_DISK_SPARES, default 4)`);
  const retried = seq.filter((c) => c.execRetries > 0).length;
  if (retried) notes.push(`sequential: ${retried} sandbox(es) needed exec retries after Ready (an exec must work once Ready)`);

  // 1b. the supervisors' compile cache, on vs off, interleaved
  notes.push(...(await compileCachePhase(opts, redis.url, tables)));

  // 1d. sandbox disks kept ready vs made at each create, interleaved
  notes.push(...(await diskSparesPhase(opts, redis.url, tables)));

  // 1c. a warm pool next to cold creates, interleaved
  notes.push(...(await poolPhase(opts, client, live, tables)));

  // 2. sustained
  const sustained: Created[] = [];
  const failures = new Map<string, number>();
  const failureSamples: string[] = [];
  let started = 0;
  const tStart = now();
  const tEnd = tStart + opts.durationS * 1000;
  await Promise.all(
    Array.from({ length: opts.concurrency }, async (_, w) => {
      for (let i = 0; now() < tEnd; i++) {
        started++;
        try {
          sustained.push(await createToFirstExec(client, `${tag}-c${w}-${i}`, undefined, live));
        } catch (err) {
          const stage = err instanceof StageError ? err.stage : 'other';
          failures.set(stage, (failures.get(stage) ?? 0) + 1);
          if (failureSamples.length < 5) failureSamples.push(errText(err));
          await sleep(100);
        }
      }
    }),
  );
  const elapsedS = (now() - tStart) / 1000;
  const failed = [...failures.values()].reduce((a, b) => a + b, 0);
  tables.push({
    caption: `local driver, sustained: ${opts.concurrency} concurrent workers creating back to back for ${opts.durationS} s (sandboxes kept running: ${live.size} live at the end)`,
    headers: ['measure', 'value'],
    rows: [
      ['creates started', started],
      ['reached first exec', sustained.length],
      ['failed', `${failed}${failed ? ` (${[...failures].map(([s, n]) => `${s}: ${n}`).join(', ')})` : ''}`],
      ['elapsed (incl. creates in flight at the end)', `${fixed(elapsedS, 1)} s`],
      ['creates/s (to first exec)', fixed(sustained.length / elapsedS, 2)],
      ['CreateSandbox p50 / p99', `${ms(summarise(sustained.map((c) => c.rpcMs)).p50)} / ${ms(summarise(sustained.map((c) => c.rpcMs)).p99)}`],
      ['create → Ready p50 / p99', `${ms(summarise(sustained.map((c) => c.readyMs)).p50)} / ${ms(summarise(sustained.map((c) => c.readyMs)).p99)}`],
      ['create → first exec p50 / p99', `${ms(summarise(sustained.map((c) => c.firstExecMs)).p50)} / ${ms(summarise(sustained.map((c) => c.firstExecMs)).p99)}`],
    ],
  });
  for (const s of failureSamples) notes.push(`sustained failure: ${s}`);

  // 3. docker
  notes.push(...(await dockerPhase(opts, tables)));

  // Deletion of everything (timed, not part of any create figure).
  const del = await deleteAll(client, [...live]);
  for (const n of live) if (!del.failed.some((f) => f.startsWith(`${n}:`))) live.delete(n);
  const sd = summarise(del.ms);
  notes.push(`deleted ${del.ms.length} sandbox(es) at concurrency 4: DeleteSandbox p50 ${ms(sd.p50)}, p99 ${ms(sd.p99)}${del.failed.length ? `; ${del.failed.length} failed (${del.failed[0]})` : ''}`);
  const left = await redis.client().scard('sg:sbxs');
  if (left) notes.push(`WARNING: ${left} record(s) left in sg:sbxs after deleting everything`);
  void cluster;

  return {
    id: 'create-latency',
    title: 'Sandbox create-to-first-exec latency and sustained creates',
    command: `node load-tests/create-latency.ts --iterations ${opts.iterations} --duration ${opts.durationS} --concurrency ${opts.concurrency} --docker-iterations ${opts.dockerIterations} --cache-iterations ${opts.cacheIterations} --disk-spares-iterations ${opts.diskSparesIterations} --pool-iterations ${opts.poolIterations}${opts.poolIdleSeconds ? ` --pool-idle-seconds ${opts.poolIdleSeconds}` : ''}${opts.ttyMain ? ' --tty-main' : ''}`,
    tables,
    notes,
    durationMs: now() - t0,
  };
}

/** Waits until the pool has `size` Ready members (a refill is untimed in every figure). */
async function poolRefilled(client: AnyClient, pool: string, size: number, timeoutMs = 120_000): Promise<void> {
  const end = now() + timeoutMs;
  for (;;) {
    const res = await unaryCall<{ pools?: { name?: string; ready?: number }[] }>(client, 'ListPools', {});
    if ((res.pools ?? []).find((p) => p.name === pool)?.ready === size) return;
    if (now() > end) throw new Error(`pool ${pool} not refilled to ${size} within ${timeoutMs / 1000} s`);
    await sleep(50);
  }
}

/**
 * Creates claiming a member of a warm pool next to cold creates, alternately, on the same two
 * replicas. Between claims the pool is given time to refill (untimed), so every claim finds a
 * Ready member: the figure is a claim's, not the pool's refill rate.
 */
async function poolPhase(opts: CreateLatencyOptions, client: AnyClient, live: Set<string>, tables: BenchTable[]): Promise<string[]> {
  if (opts.poolIterations <= 0) return ['warm pool: skipped (--pool-iterations 0)'];
  const pool = 'bench';
  const size = 2;
  const tag = `wp${process.pid.toString(36)}`;
  await unaryCall(client, 'SetPool', { name: pool, size });
  onCleanup('benchmark pool', () => unaryCall(client, 'DeletePool', { name: pool }).catch(() => undefined));
  const ready = () => poolRefilled(client, pool, size);
  const cold: Created[] = [];
  const warm: Created[] = [];
  for (let i = 0; i < opts.poolIterations; i++) {
    await ready();
    if (opts.poolIdleSeconds) await sleep(opts.poolIdleSeconds * 1000);
    warm.push(await createToFirstExec(client, `${tag}-w${i}`, undefined, live, 60_000, { 'sandgate.dev/pool': pool }));
    cold.push(await createToFirstExec(client, `${tag}-c${i}`, undefined, live));
  }
  await unaryCall(client, 'DeletePool', { name: pool });
  const w = summarise(warm.map((c) => c.firstExecMs));
  const c = summarise(cold.map((c) => c.firstExecMs));
  tables.push({
    caption: `local driver, warm pool (size ${size}) vs cold: ${opts.poolIterations} sandboxes each, alternately, on the same 2 replicas (client on r0); the pool refilled between claims (untimed)${opts.poolIdleSeconds ? `, its members then idle ${opts.poolIdleSeconds} s` : ''}`,
    headers: LATENCY_HEADERS,
    rows: [
      latencyRow('warm (claimed): CreateSandbox returned (Ready in the answer)', warm.map((x) => x.rpcMs)),
      latencyRow('warm (claimed): first `true` exited 0', warm.map((x) => x.firstExecMs)),
      latencyRow('cold: CreateSandbox returned', cold.map((x) => x.rpcMs)),
      latencyRow('cold: phase Ready (GetSandbox poll, 10 ms)', cold.map((x) => x.readyMs)),
      latencyRow('cold: first `true` exited 0', cold.map((x) => x.firstExecMs)),
      ['ratio first exec warm / cold', '', fixed(w.p50 / c.p50, 3), fixed(w.p90 / c.p90, 3), fixed(w.p99 / c.p99, 3), fixed(w.mean / c.mean, 3)],
    ],
  });
  const retried = warm.filter((x) => x.execRetries > 0).length;
  return retried ? [`warm pool: ${retried} claimed sandbox(es) needed exec retries (a claim must serve at once)`] : [];
}

/**
 * Two single local-driver replicas side by side, one giving supervisors the compile cache (the
 * default) and one with SANDGATE_SUPERVISOR_COMPILE_CACHE=0, sandboxes created on each in turn.
 */
function compileCachePhase(opts: CreateLatencyOptions, redisUrl: string, tables: BenchTable[]): Promise<string[]> {
  if (opts.cacheIterations <= 0) return Promise.resolve(['compile cache: skipped (--cache-iterations 0)']);
  return sideBySidePhase(redisUrl, tables, {
    tag: 'cc',
    iterations: opts.cacheIterations,
    sides: [
      ['cache on', { SANDGATE_SUPERVISOR_COMPILE_CACHE: '1' }],
      ['cache off', { SANDGATE_SUPERVISOR_COMPILE_CACHE: '0' }],
    ],
    caption: `local driver, supervisors' compile cache on vs off (SANDGATE_SUPERVISOR_COMPILE_CACHE): two single replicas, ${opts.cacheIterations} sandboxes on each, created alternately (after 1 warm-up each)`,
    ratioLabel: 'p50 ratio on / off: Ready, first exec',
  });
}

/**
 * Two single local-driver replicas side by side, one keeping sandbox disks ready (the default,
 * SANDGATE_LOCAL_DISK_SPARES=4) and one making each sandbox's disk at its create (0).
 */
function diskSparesPhase(opts: CreateLatencyOptions, redisUrl: string, tables: BenchTable[]): Promise<string[]> {
  if (opts.diskSparesIterations <= 0) return Promise.resolve(['disks kept ready: skipped (--disk-spares-iterations 0)']);
  return sideBySidePhase(redisUrl, tables, {
    tag: 'ds',
    iterations: opts.diskSparesIterations,
    sides: [
      ['disks kept ready', { SANDGATE_LOCAL_DISK_SPARES: '4' }],
      ['disk made at create', { SANDGATE_LOCAL_DISK_SPARES: '0' }],
    ],
    caption: `local driver, sandbox disks kept ready vs made at each create (SANDGATE_LOCAL_DISK_SPARES 4 vs 0): two single replicas, ${opts.diskSparesIterations} sandboxes on each, created alternately (after 1 warm-up each)`,
    ratioLabel: 'p50 ratio kept ready / made at create: Ready, first exec',
    countSpares: true,
  });
}

interface SideBySide {
  tag: string;
  iterations: number;
  /** Each side's label and the environment its replica gets. */
  sides: [string, Record<string, string>][];
  caption: string;
  ratioLabel: string;
  /** Also say how many of each side's sandboxes got a disk made before their create. */
  countSpares?: boolean;
}

/** One single replica per side, sandboxes created on each in turn, after a warm-up each. */
async function sideBySidePhase(redisUrl: string, tables: BenchTable[], c: SideBySide): Promise<string[]> {
  const tag = `${c.tag}${process.pid.toString(36)}`;
  interface Side { label: string; stateDir: string; client: AnyClient; live: Set<string>; created: Created[] }
  const sides: Side[] = [];
  for (const [label, env] of c.sides) {
    const stateDir = mkdtempSync(path.join(os.tmpdir(), `sg-bench-${c.tag}-`));
    onCleanup(`${label} state dir`, () => rmSync(stateDir, { recursive: true, force: true }));
    const gw = await startGateway({ redisUrl, driver: 'local', stateDir, replicaId: `r${label.replace(/[^a-z]+/g, '-')}`, env });
    onCleanup(`${label} gateway`, () => gw.stop());
    onCleanup(`${label} compute`, () => killLeftoverCompute(stateDir));
    const client = openShellClient(gw.grpcAddress);
    onCleanup(`${label} grpc client`, () => client.close());
    const side: Side = { label, stateDir, client, live: new Set(), created: [] };
    onCleanup(`${label} sandboxes`, () => deleteAll(client, side.live));
    // The first launch pays the start-up check and starts the compile cache's fill (and the
    // disks kept ready are made meanwhile); give both time.
    await createToFirstExec(client, `${tag}-${sides.length}-warm`, undefined, side.live);
    await sleep(3000);
    sides.push(side);
  }
  for (let n = 0; n < c.iterations; n++) {
    for (const [i, side] of sides.entries()) side.created.push(await createToFirstExec(side.client, `${tag}-${i}-${n}`, undefined, side.live));
  }
  const [a, b] = sides as [Side, Side];
  const ratio = (f: (c: Created) => number) => fixed(summarise(a.created.map(f)).p50 / summarise(b.created.map(f)).p50, 2);
  tables.push({
    caption: c.caption,
    headers: LATENCY_HEADERS,
    rows: [
      ...sides.flatMap((side) => [
        latencyRow(`${side.label}: CreateSandbox returned`, side.created.map((x) => x.rpcMs)),
        ...timelineRows(side.stateDir, side.created, `${side.label}: `),
        latencyRow(`${side.label}: phase Ready`, side.created.map((x) => x.readyMs)),
        latencyRow(`${side.label}: first \`true\` exited 0`, side.created.map((x) => x.firstExecMs)),
      ]),
      [c.ratioLabel, '', `${ratio((x) => x.readyMs)}, ${ratio((x) => x.firstExecMs)}`, '', '', ''],
    ],
  });
  const notes = c.countSpares ? sides.map((side) => `${side.label}: ${side.created.filter((x) => diskMadeBefore(side.stateDir, x)).length} of ${side.created.length} sandboxes got a disk made before their create`) : [];
  for (const side of sides) {
    const del = await deleteAll(side.client, [...side.live]);
    for (const name of side.live) if (!del.failed.some((f) => f.startsWith(`${name}:`))) side.live.delete(name);
  }
  return notes;
}

/** Whether the sandbox's disk image was born before its CreateSandbox call (a disk kept ready). */
function diskMadeBefore(stateDir: string, c: Created): boolean {
  const born = statSync(path.join(realpathSync(stateDir), 'sandboxes', c.id, 'disk.img')).birthtimeMs;
  if (!born) throw new Error('this filesystem does not record birth times: cannot tell a disk kept ready from one made at the create');
  return born < c.startedAtEpochMs;
}

/** The docker driver next to plain `docker run`, when both the engine and the driver are there. */
async function dockerPhase(opts: CreateLatencyOptions, tables: BenchTable[]): Promise<string[]> {
  if (opts.dockerIterations <= 0) return ['docker: skipped (--docker-iterations 0)'];
  const info = await run0(['docker', 'info', '--format', '{{.ServerVersion}}'], 15_000);
  if (info.code !== 0) return ['docker: skipped (no Docker engine: `docker info` failed)'];
  // A Redis of their own: the local cluster's job workers must not run the docker replicas' jobs
  // (a pool refill there would start local members, a reconcile sweep would find no docker compute).
  const dockerRedis = await startRedis();
  onCleanup('docker redis', () => dockerRedis.stop());
  const redisUrl = dockerRedis.url;
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'sg-bench-docker-'));
  onCleanup('docker state dir', () => rmSync(stateDir, { recursive: true, force: true }));
  let gw;
  try {
    gw = await startGateway({ redisUrl, driver: 'docker', stateDir, replicaId: 'rdocker' });
  } catch (err) {
    const msg = errText(err);
    if (/not available in this build/.test(msg)) return ['docker: skipped (driver not wired: the gateway refuses `--driver docker`)'];
    return [`docker: skipped (gateway --driver docker did not start: ${msg})`];
  }
  onCleanup('docker gateway', () => gw.stop());
  // The same driver with the supervisors' compile cache off, created alternately with the first.
  const stateDirNoCache = mkdtempSync(path.join(os.tmpdir(), 'sg-bench-docker-'));
  onCleanup('docker state dir (cache off)', () => rmSync(stateDirNoCache, { recursive: true, force: true }));
  const gwNoCache = await startGateway({ redisUrl, driver: 'docker', stateDir: stateDirNoCache, replicaId: 'rdocker-nocache', env: { SANDGATE_SUPERVISOR_COMPILE_CACHE: '0' } });
  onCleanup('docker gateway (cache off)', () => gwNoCache.stop());
  const image = await run0(['docker', 'image', 'inspect', opts.image], 15_000);
  if (image.code !== 0) return [`docker: skipped (image ${opts.image} missing: scripts/build-sandbox-image.sh)`];
  const client = openShellClient(gw.grpcAddress);
  onCleanup('docker grpc client', () => client.close());
  const clientNoCache = openShellClient(gwNoCache.grpcAddress);
  onCleanup('docker grpc client (cache off)', () => clientNoCache.close());
  // A third replica that keeps no network namespaces ready (SANDGATE_DOCKER_NETNS_SPARES=0):
  // every container gets its own endpoint on the bridge, as before they were kept.
  const stateDirNoSpares = mkdtempSync(path.join(os.tmpdir(), 'sg-bench-docker-'));
  onCleanup('docker state dir (no spares)', () => rmSync(stateDirNoSpares, { recursive: true, force: true }));
  const gwNoSpares = await startGateway({ redisUrl, driver: 'docker', stateDir: stateDirNoSpares, replicaId: 'rdocker-nospares', env: { SANDGATE_DOCKER_NETNS_SPARES: '0' } });
  onCleanup('docker gateway (no spares)', () => gwNoSpares.stop());
  const clientNoSpares = openShellClient(gwNoSpares.grpcAddress);
  onCleanup('docker grpc client (no spares)', () => clientNoSpares.close());
  const live = new Set<string>();
  onCleanup('docker benchmark sandboxes', () => deleteAll(client, live));
  const tag = `cd${process.pid.toString(36)}`;
  const driver: Created[] = [];
  const driverWarm: Created[] = [];
  const driverNoCache: Created[] = [];
  const driverNoSpares: Created[] = [];
  const dockerPool = 'bench-docker';
  await unaryCall(client, 'SetPool', { name: dockerPool, size: 1, image: opts.image });
  onCleanup('docker benchmark pool', () => unaryCall(client, 'DeletePool', { name: dockerPool }).catch(() => undefined));
  const plain: number[] = [];
  const detached: number[] = [];
  /** Until the two replicas that keep spare namespaces (2 each) have them all running. */
  const sparesReady = async () => {
    const deadline = now() + 30_000;
    while (now() < deadline) {
      const ps = await run0(['docker', 'ps', '-q', '--filter', 'label=sandgate.managed=netns-holder', '--filter', 'name=sandgate-netns-spare-', '--filter', 'status=running']);
      if (ps.out.split('\n').filter((l) => l.trim()).length >= 4) return;
      await sleep(50);
    }
    throw new Error('the replicas did not have their 4 spare network namespaces again within 30 s');
  };
  const notes: string[] = [];
  try {
    await createToFirstExec(client, `${tag}-warm`, opts.image, live, 120_000);
    await createToFirstExec(clientNoCache, `${tag}-warm-nc`, opts.image, live, 120_000);
    await createToFirstExec(clientNoSpares, `${tag}-warm-ns`, opts.image, live, 120_000);
    await run0(['docker', 'run', '--rm', opts.image, 'true']);
    for (let i = 0; i < opts.dockerIterations; i++) {
      // A claimed spare namespace is replaced 1 s after its claim, and that container start would
      // land on whichever measurement comes next: each one waits (untimed) until both replicas
      // that keep spares have theirs again, so every arm starts on an idle engine.
      await sparesReady();
      driverNoSpares.push(await createToFirstExec(clientNoSpares, `${tag}-${i}-ns`, opts.image, live, 120_000));
      await sparesReady();
      driver.push(await createToFirstExec(client, `${tag}-${i}`, opts.image, live, 120_000));
      await sparesReady();
      driverNoCache.push(await createToFirstExec(clientNoCache, `${tag}-${i}-nc`, opts.image, live, 120_000));
      // A claim from a warm pool of the same image (refilled before it, untimed).
      await poolRefilled(client, dockerPool, 1);
      await sparesReady();
      driverWarm.push(await createToFirstExec(client, `${tag}-${i}-w`, undefined, live, 120_000, { 'sandgate.dev/pool': dockerPool }));
      await sparesReady();
      const t = now();
      const r = await run0(['docker', 'run', '--rm', opts.image, 'true']);
      if (r.code !== 0) throw new Error(`docker run failed: ${r.out.trim().slice(0, 200)}`);
      plain.push(now() - t);
      // Issue 16's docker baseline: a container started detached, then one exec in it.
      await sparesReady();
      const t2 = now();
      const started = await run0(['docker', 'run', '-d', opts.image, 'sleep', 'infinity']);
      if (started.code !== 0) throw new Error(`docker run -d failed: ${started.out.trim().slice(0, 200)}`);
      const container = started.out.split('\n').find((l) => /^[0-9a-f]{64}$/.test(l.trim()))?.trim() ?? '';
      const exec = await run0(['docker', 'exec', container, 'true']);
      detached.push(now() - t2);
      await run0(['docker', 'rm', '-f', container]);
      if (exec.code !== 0) throw new Error(`docker exec failed: ${exec.out.trim().slice(0, 200)}`);
    }
  } catch (err) {
    notes.push(`docker: failed after ${driver.length} iteration(s): ${errText(err)}`);
  }
  await unaryCall(client, 'DeletePool', { name: dockerPool }).catch(() => undefined);
  const del = await deleteAll(client, [...live]);
  for (const n of live) if (!del.failed.some((f) => f.startsWith(`${n}:`))) live.delete(n);
  if (driver.length) {
    const d = summarise(driver.map((c) => c.firstExecMs));
    const p = summarise(plain);
    const dx = summarise(detached);
    tables.push({
      caption: `docker driver (image ${opts.image}), ${driver.length} sandboxes one after another, interleaved with as many claimed from a warm pool of 1 (refilled before each claim, untimed), as many made by a second replica whose supervisors have no compile cache and by a third that keeps no network namespaces ready (SANDGATE_DOCKER_NETNS_SPARES=0; the first keeps 2), each measurement starting once the spare namespaces are all running again (untimed), and with plain \`docker run --rm ${opts.image} true\` and \`docker run -d ${opts.image} sleep infinity\` + \`docker exec <c> true\``,
      headers: LATENCY_HEADERS,
      rows: [
        latencyRow('docker driver: CreateSandbox returned', driver.map((c) => c.rpcMs)),
        latencyRow('docker driver: phase Ready', driver.map((c) => c.readyMs)),
        latencyRow('docker driver: first `true` exited 0', driver.map((c) => c.firstExecMs)),
        latencyRow('docker driver, warm pool (claimed): first `true` exited 0', driverWarm.map((c) => c.firstExecMs)),
        latencyRow('docker driver, compile cache off: phase Ready', driverNoCache.map((c) => c.readyMs)),
        latencyRow('docker driver, compile cache off: first `true` exited 0', driverNoCache.map((c) => c.firstExecMs)),
        latencyRow('docker driver, no network namespaces kept ready: first `true` exited 0', driverNoSpares.map((c) => c.firstExecMs)),
        latencyRow('plain `docker run --rm IMAGE true`', plain),
        latencyRow('plain `docker run -d IMAGE sleep infinity` + `docker exec <c> true`', detached),
        ['ratio driver first exec / docker run', '', fixed(d.p50 / p.p50, 2), fixed(d.p90 / p.p90, 2), fixed(d.p99 / p.p99, 2), fixed(d.mean / p.mean, 2)],
        ...(driverNoCache.length ? [((nc) => ['ratio first exec, compile cache on / off', '', fixed(d.p50 / nc.p50, 2), fixed(d.p90 / nc.p90, 2), fixed(d.p99 / nc.p99, 2), fixed(d.mean / nc.mean, 2)])(summarise(driverNoCache.map((c) => c.firstExecMs)))] : []),
        ...(driverNoSpares.length ? [((ns) => ['ratio first exec, namespaces kept ready / none', '', fixed(d.p50 / ns.p50, 2), fixed(d.p90 / ns.p90, 2), fixed(d.p99 / ns.p99, 2), fixed(d.mean / ns.mean, 2)])(summarise(driverNoSpares.map((c) => c.firstExecMs)))] : []),
        ['ratio driver first exec / (run -d + exec) (issue 16: ≤ 1.1)', '', fixed(d.p50 / dx.p50, 2), fixed(d.p90 / dx.p90, 2), fixed(d.p99 / dx.p99, 2), fixed(d.mean / dx.mean, 2)],
      ],
    });
  }
  return notes;
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      iterations: { type: 'string', default: '20' },
      duration: { type: 'string', default: '20' },
      concurrency: { type: 'string', default: '4' },
      'docker-iterations': { type: 'string', default: '5' },
      'cache-iterations': { type: 'string', default: '20' },
      'disk-spares-iterations': { type: 'string', default: '15' },
      'pool-iterations': { type: 'string', default: '20' },
      'pool-idle-seconds': { type: 'string', default: '0' },
      image: { type: 'string', default: 'sandgate-sandbox:latest' },
      'tty-main': { type: 'boolean', default: false },
      ...COMMON_OPTIONS,
    },
  });
  await runMain(async () => {
    const report = await run({
      iterations: Number(values.iterations),
      durationS: Number(values.duration),
      concurrency: Number(values.concurrency),
      dockerIterations: Number(values['docker-iterations']),
      cacheIterations: Number(values['cache-iterations']),
      diskSparesIterations: Number(values['disk-spares-iterations']),
      poolIterations: Number(values['pool-iterations']),
      poolIdleSeconds: Number(values['pool-idle-seconds']),
      image: values.image!,
      ttyMain: values['tty-main'],
    });
    emitReport(report, values['report-json']);
  });
}
