// Session scale: thousands of simulated supervisors held by three replicas.
//   node load-tests/session-scale.ts [--levels 1000,2500,5000,10000] [--replicas 3] [--per-channel 200]
//                                    [--window 10] [--settle 5] [--rate 500] [--inflight 100]
//                                    [--max-ramp 60] [--max-loss 0.2] [--replica-env K=V]...
//                                    [--redis single|cluster]
//
// A simulated supervisor speaks the real protocol (sandgate.v1.SupervisorGateway/Control, the
// supervisor's own client code and channel options): metadata x-sandgate-sandbox-id and
// x-sandgate-credential, `hello`, then a heartbeat every `heartbeat_interval_ms` from hello_ack
// (the gateway default, 2000 ms, as in production). Its sandbox record is written straight into
// Redis (SandboxStore.create with the credential's SHA-256, phase Provisioning): no compute.
// Sessions are spread round-robin over the replicas, `--per-channel` sessions per gRPC channel
// (one HTTP/2 connection each: a supervisor client is one connection), all in this one process.
//
// At each level, once every session has its hello_ack and `--settle` seconds have passed, a
// `--window`-second window measures, per replica: VmRSS (median of 1 s samples) minus the idle
// baseline → memory per session, and CPU; for Redis: total_commands_processed (counts commands
// inside Lua scripts too), INFO commandstats by command, and Redis's own CPU. Then it checks that
// every session is still up, every sg:own:* key exists and names the replica that acked.
//
// `--redis cluster` runs it on a Redis Cluster of three primaries with a replica each (the
// replicas wait for it: SANDGATE_REDIS_MIN_REPLICAS=1): the Redis figures are summed over the
// primaries, and a table gives each primary's share of the commands (the spread of the load).
import { randomBytes, randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { SandboxPhase, type GatewayMessage, type SupervisorMessage } from '@sandgate/protocols';
import { SandboxStore, WorkspaceStore, keysFor } from '@sandgate/store';
import type { RedisClient } from '@sandgate/store';
import { callMetadata, createGatewayClient, type CallError, type GatewayCall, type GatewayClient } from '@sandgate/supervisor';
import { hashCredential } from '@sandgate/gateway';
import type { ReplicaProcess } from '../test/harness/cluster.ts';
import { sleep } from '../test/harness/wait.ts';
import { scanAllKeys } from '../test/harness/redis.ts';
import { summarise, ms } from './stats.ts';
import { COMMON_OPTIONS, emitReport, fixed, kib, mib, now, onCleanup, runMain, type BenchReport, type BenchTable } from './bench.ts';
import { cpuMs, machineCpu, redisPrimaries, rss, startEnv } from './env.ts';
import os from 'node:os';
import path from 'node:path';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { monitorEventLoopDelay } from 'node:perf_hooks';

export interface SessionScaleOptions {
  levels: number[];
  replicas: number;
  perChannel: number;
  windowS: number;
  settleS: number;
  /** Hellos per second while ramping up, at most `inflight` of them awaiting hello_ack. */
  rate: number;
  inflight: number;
  /** Give up opening a level's sessions after this long. */
  maxRampS: number;
  /** Skip the next levels once more than this fraction of sessions was lost. */
  maxLoss: number;
  /** Extra environment for the replicas (exploration only: NODE_OPTIONS=--cpu-prof, SANDGATE_OWNER_TTL_MS…). */
  replicaEnv?: Record<string, string>;
  /** One redis-server (default) or a Redis Cluster of three primaries with a replica each. */
  redis?: 'single' | 'cluster';
}

const WORKSPACE = 'bench-sessions';

interface SimSession {
  index: number;
  sandboxId: string;
  secret: string;
  replica: number;
  call?: GatewayCall<SupervisorMessage, GatewayMessage>;
  helloAt: number;
  ackMs?: number;
  ackedReplica?: string;
  intervalMs: number;
  lastGatewayMsg: number;
  /** Longest silence of the gateway seen since the last reset (ms). */
  maxGapMs: number;
  timer?: NodeJS.Timeout;
  lost?: string;
}

/** Everything the simulated supervisors share: channels per replica, counters. */
class Fleet {
  readonly sessions: SimSession[] = [];
  private readonly channels: GatewayClient[][];
  private readonly replicas: ReplicaProcess[];
  private readonly perChannel: number;
  private readonly perReplicaCount: number[];
  lost = 0;
  readonly lostReasons = new Map<string, number>();
  gatewayHeartbeats = 0;

  constructor(replicas: ReplicaProcess[], perChannel: number) {
    this.replicas = replicas;
    this.perChannel = perChannel;
    this.channels = replicas.map(() => []);
    this.perReplicaCount = replicas.map(() => 0);
  }

  get channelCount(): number {
    return this.channels.reduce((a, c) => a + c.length, 0);
  }

  /** The channel for the next session on replica r: a new one (a new connection) every perChannel sessions. */
  private channelFor(r: number): GatewayClient {
    const k = this.perReplicaCount[r]!++;
    const idx = Math.floor(k / this.perChannel);
    const list = this.channels[r]!;
    if (!list[idx]) list[idx] = createGatewayClient(this.replicas[r]!.grpcAddress);
    return list[idx]!;
  }

  /** Opens the Control stream and says hello; resolves on hello_ack, rejects if the stream dies first. */
  connect(s: SimSession): Promise<void> {
    const client = this.channelFor(s.replica);
    return new Promise((resolve, reject) => {
      const call = client.Control(callMetadata(s.sandboxId, s.secret));
      s.call = call;
      s.helloAt = now();
      let settled = false;
      const fail = (reason: string) => {
        if (s.lost) return;
        s.lost = reason;
        if (s.timer) clearInterval(s.timer);
        if (!settled) {
          settled = true;
          reject(new Error(reason));
          return;
        }
        this.lost++;
        this.lostReasons.set(reason, (this.lostReasons.get(reason) ?? 0) + 1);
      };
      call.on('data', (msg: GatewayMessage) => {
        const t = now();
        if (s.ackMs !== undefined) s.maxGapMs = Math.max(s.maxGapMs, t - s.lastGatewayMsg);
        s.lastGatewayMsg = t;
        if (msg.hello_ack && s.ackMs === undefined) {
          s.ackMs = t - s.helloAt;
          s.ackedReplica = msg.hello_ack.replica_id ?? '';
          s.intervalMs = msg.hello_ack.heartbeat_interval_ms || 2000;
          // Heartbeat like the supervisor does: every interval from the ack on.
          s.timer = setInterval(() => {
            if (s.lost) return;
            try {
              call.write({ heartbeat: { sent_at_ms: Date.now() } });
            } catch {
              fail('write failed');
            }
          }, s.intervalMs);
          settled = true;
          resolve();
        } else if (msg.heartbeat) {
          this.gatewayHeartbeats++;
        }
      });
      call.on('error', (err: CallError) => fail(`error ${err.code}: ${(err.details || err.message).slice(0, 80)}`));
      call.on('end', () => fail('ended by gateway'));
      call.write({ hello: { sandbox_id: s.sandboxId, instance_id: randomUUID(), supervisor_version: 'bench', main_pid: 1 } });
    });
  }

  resetGaps(): void {
    for (const s of this.sessions) s.maxGapMs = 0;
  }

  /** Stops heartbeats and cancels every stream, then closes the channels. */
  close(): void {
    for (const s of this.sessions) {
      s.lost ??= 'closed by benchmark';
      if (s.timer) clearInterval(s.timer);
      try {
        s.call?.cancel();
      } catch {
        // already over
      }
    }
    for (const list of this.channels) for (const c of list) c.close();
  }
}

function parseInfo(text: string): Map<string, string> {
  const m = new Map<string, string>();
  for (const line of text.split(/\r?\n/)) {
    const i = line.indexOf(':');
    if (i > 0 && !line.startsWith('#')) m.set(line.slice(0, i), line.slice(i + 1));
  }
  return m;
}

interface RedisSnapshot {
  t: number;
  commands: number;
  cpuS: number;
  byCommand: Map<string, number>;
  instantaneous: number;
  usedMemory: number;
  /** Per primary (one entry on a single Redis): commands processed. */
  perNode: number[];
}

/** INFO of every primary, summed (a cluster's load is the sum of its shards'). */
async function redisSnapshot(redis: RedisClient): Promise<RedisSnapshot> {
  const snapshots = await Promise.all(redisPrimaries(redis).map((node) => nodeSnapshot(node)));
  const byCommand = new Map<string, number>();
  for (const sn of snapshots) for (const [k, v] of sn.byCommand) byCommand.set(k, (byCommand.get(k) ?? 0) + v);
  const sum = (f: (x: RedisSnapshot) => number) => snapshots.reduce((a, x) => a + f(x), 0);
  return {
    t: now(),
    commands: sum((x) => x.commands),
    cpuS: sum((x) => x.cpuS),
    byCommand,
    instantaneous: sum((x) => x.instantaneous),
    usedMemory: sum((x) => x.usedMemory),
    perNode: snapshots.map((x) => x.commands),
  };
}

async function nodeSnapshot(redis: { info(section: string): Promise<string> }): Promise<RedisSnapshot> {
  const info = parseInfo(await redis.info('all'));
  const byCommand = new Map<string, number>();
  for (const [k, v] of info) {
    if (!k.startsWith('cmdstat_')) continue;
    const calls = /calls=(\d+)/.exec(v);
    if (calls) byCommand.set(k.slice('cmdstat_'.length), Number(calls[1]));
  }
  return {
    t: now(),
    commands: Number(info.get('total_commands_processed') ?? 0),
    cpuS: Number(info.get('used_cpu_sys') ?? 0) + Number(info.get('used_cpu_user') ?? 0),
    byCommand,
    instantaneous: Number(info.get('instantaneous_ops_per_sec') ?? 0),
    usedMemory: Number(info.get('used_memory') ?? 0),
    perNode: [],
  };
}

interface LevelResult {
  /** The level (sessions asked for). */
  sessions: number;
  /** Sessions up during the window (all per-session figures divide by this). */
  live: number;
  perReplica: number[];
  ackP50: number;
  ackP99: number;
  rampS: number;
  rssMedian: number[];
  cpuPct: number[];
  clientCpuPct: number;
  clientRss: number;
  redisOpsPerS: number;
  redisInstantaneous: number;
  redisCpuPct: number;
  redisUsedMemory: number;
  /** Commands per second on each primary (one entry on a single Redis). */
  perNodeOpsPerS: number[];
  byCommandPerS: Map<string, number>;
  /** Replica CPU (all replicas) during the ramp, per hello accepted: what one accept costs. */
  cpuPerHelloMs: number;
  /** SandboxStore.pages() over every record, as the reconcile job does every 10 s (ms, in this process). */
  listMs: number;
  /** The longest event-loop block of this process while it ran (ms): what the job's replica stalls for. */
  listBlockMs: number;
  /** Sessions (older ones included) lost while this level ramped up. */
  lostInRamp: number;
  ownerKeys: number;
  ownerMismatches: number;
  lostSoFar: number;
  maxGapMs: number;
  gapsOver: number;
  healthzMs: number[];
  metricsSessions: number[];
  /** Whole machine busy, in % of one core (200% = both cores). */
  machineBusyPct: number;
  loadAvg: number;
  /** This process's event-loop delay in the window (ms): is the bench client keeping up? */
  clientLoopP99: number;
  clientLoopMax: number;
}

async function countKeys(redis: RedisClient, pattern: string): Promise<number> {
  let n = 0;
  for await (const batch of scanAllKeys(redis, pattern)) n += batch.length;
  return n;
}

async function sessionsGauge(httpUrl: string): Promise<number> {
  const res = await fetch(`${httpUrl}/metrics`).catch(() => null);
  const text = res ? await res.text() : '';
  const m = /^sandgate_supervisor_sessions (\d+)/m.exec(text);
  return m ? Number(m[1]) : NaN;
}

async function timedHealthz(httpUrl: string): Promise<number> {
  const t = now();
  const res = await fetch(`${httpUrl}/healthz`).catch(() => null);
  return res?.ok ? now() - t : NaN;
}

export async function run(opts: SessionScaleOptions): Promise<BenchReport> {
  const t0 = now();
  const levels = [...opts.levels].sort((a, b) => a - b);
  const { redis, cluster } = await startEnv({ replicas: opts.replicas, env: opts.replicaEnv, redis: opts.redis });
  const admin = redis.client();
  const k = keysFor(admin);
  // A cluster client knows its primaries once connected.
  await admin.ping();
  const store = new SandboxStore(admin);
  // Records are written straight into Redis: their workspace must exist (reserve-sandbox-4 checks it).
  await new WorkspaceStore(admin).create(WORKSPACE, {});
  const replicas = cluster.replicas;
  const pids = replicas.map((r) => r.proc?.pid);
  const fleet = new Fleet(replicas, opts.perChannel);
  onCleanup('simulated supervisors', () => fleet.close());
  const notes: string[] = [];
  const heartbeatIntervalMs = Number(opts.replicaEnv?.SANDGATE_HEARTBEAT_INTERVAL_MS ?? 2000);
  const ownerTtlMs = Number(opts.replicaEnv?.SANDGATE_OWNER_TTL_MS ?? 6000);
  if (opts.replicaEnv && Object.keys(opts.replicaEnv).length) notes.push(`replica environment overridden: ${JSON.stringify(opts.replicaEnv)} (not the production defaults)`);

  // Idle baseline: replicas up, workers running, no sandbox at all.
  await sleep(opts.settleS * 1000);
  const baseline = await measureWindow(0);
  const idleRss = baseline.rssMedian;

  async function measureWindow(n: number): Promise<LevelResult> {
    const rssSamples: number[][] = replicas.map(() => []);
    fleet.resetGaps();
    const r0 = await redisSnapshot(admin);
    const c0 = await Promise.all(pids.map((p) => cpuMs(p)));
    const u0 = process.cpuUsage();
    const m0 = await machineCpu();
    const loop = monitorEventLoopDelay({ resolution: 10 });
    loop.enable();
    const w0 = now();
    for (let i = 0; i < opts.windowS; i++) {
      const samples = await Promise.all(pids.map((p) => rss(p)));
      samples.forEach((v, k) => rssSamples[k]!.push(v));
      await sleep(1000);
    }
    const r1 = await redisSnapshot(admin);
    const c1 = await Promise.all(pids.map((p) => cpuMs(p)));
    const u1 = process.cpuUsage(u0);
    const m1 = await machineCpu();
    loop.disable();
    const wallMs = now() - w0;
    const windowS = (r1.t - r0.t) / 1000;
    const byCommandPerS = new Map<string, number>();
    for (const [cmd, calls] of r1.byCommand) {
      const d = calls - (r0.byCommand.get(cmd) ?? 0);
      if (d > 0) byCommandPerS.set(cmd, d / windowS);
    }
    // Checks, outside the window (they are Redis commands too).
    const live = fleet.sessions.filter((s) => !s.lost);
    const ownerKeys = await countKeys(admin, 'sg:own:*');
    let ownerMismatches = 0;
    for (let i = 0; i < live.length; i += 1000) {
      const batch = live.slice(i, i + 1000);
      const res = await Promise.all(batch.map((s) => admin.hget(k.owner(s.sandboxId), 'replica').catch(() => null)));
      res.forEach((v, j) => {
        if (v !== batch[j]!.ackedReplica) ownerMismatches++;
      });
    }
    // The reconcile job's scan, timed here with the same code (it runs on one replica every 10 s).
    const blocks = monitorEventLoopDelay({ resolution: 5 });
    blocks.enable();
    const tl = now();
    for await (const page of store.pages()) void page;
    const listMs = now() - tl;
    blocks.disable();
    const gaps = live.map((s) => s.maxGapMs);
    return {
      sessions: n,
      live: live.length,
      perReplica: replicas.map((_, k) => fleet.sessions.filter((s) => s.replica === k && !s.lost).length),
      ackP50: NaN,
      ackP99: NaN,
      rampS: 0,
      cpuPerHelloMs: NaN,
      listMs,
      listBlockMs: blocks.max / 1e6,
      lostInRamp: 0,
      rssMedian: rssSamples.map((xs) => summarise(xs).p50),
      cpuPct: c1.map((c, k) => ((c - c0[k]!) / wallMs) * 100),
      clientCpuPct: ((u1.user + u1.system) / 1000 / wallMs) * 100,
      clientRss: process.memoryUsage().rss,
      redisOpsPerS: (r1.commands - r0.commands) / windowS,
      redisInstantaneous: r1.instantaneous,
      redisCpuPct: ((r1.cpuS - r0.cpuS) / windowS) * 100,
      redisUsedMemory: r1.usedMemory,
      perNodeOpsPerS: r1.perNode.map((c, j) => (c - (r0.perNode[j] ?? 0)) / windowS),
      byCommandPerS,
      ownerKeys,
      ownerMismatches,
      lostSoFar: fleet.lost,
      maxGapMs: gaps.length ? Math.max(...gaps) : 0,
      gapsOver: gaps.filter((g) => g > heartbeatIntervalMs * 1.5).length,
      healthzMs: await Promise.all(replicas.map((r) => timedHealthz(r.httpUrl))),
      metricsSessions: await Promise.all(replicas.map((r) => sessionsGauge(r.httpUrl))),
      machineBusyPct: ((m1.busyMs - m0.busyMs) / wallMs) * 100,
      loadAvg: os.loadavg()[0]!,
      clientLoopP99: loop.percentile(99) / 1e6,
      clientLoopMax: loop.max / 1e6,
    };
  }

  const results: LevelResult[] = [];
  for (const level of levels) {
    const prev = results.at(-1);
    if (prev && prev.live < prev.sessions * (1 - opts.maxLoss)) {
      notes.push(
        `level ${level}: skipped, only ${prev.live} of ${prev.sessions} sessions were up at the previous level (more than ${(opts.maxLoss * 100).toFixed(0)}% lost or never opened): the replicas are not keeping up`,
      );
      continue;
    }
    // Records for the new sessions, written straight into Redis (no compute).
    const from = fleet.sessions.length;
    const fresh: SimSession[] = [];
    for (let i = from; i < level; i++) {
      fresh.push({
        index: i,
        sandboxId: randomUUID(),
        secret: randomBytes(32).toString('base64url'),
        replica: i % replicas.length,
        helloAt: 0,
        intervalMs: heartbeatIntervalMs,
        lastGatewayMsg: 0,
        maxGapMs: 0,
      });
    }
    // Each record is written just ahead of its hello, 500 at a time: a record left in
    // Provisioning with no compute for 30 s is an interrupted create, which the reconcile sweep
    // deletes (a long ramp written up front would lose its tail that way).
    const writeRecords = (batch: SimSession[]) =>
      Promise.all(
        batch.map((s) =>
          store.create(
            {
              metadata: { id: s.sandboxId, name: `ss-${s.index}`, created_at_ms: Date.now(), labels: {}, annotations: {}, resource_version: 0, workspace: WORKSPACE },
              spec: { command: ['sleep', 'infinity'], environment: {}, providers: [] },
              status: { sandbox_name: `ss-${s.index}`, phase: SandboxPhase.PROVISIONING, conditions: [] },
            },
            hashCredential(s.secret),
          ),
        ),
      );
    // Ramp: `rate` hellos per second, at most `inflight` awaiting their ack (a starved replica
    // slows the ramp down instead of collecting a backlog), every one must be acked.
    const rampStart = now();
    const rampCpu0 = await Promise.all(pids.map((p) => cpuMs(p)));
    const lostBefore = fleet.lost;
    const failures: string[] = [];
    const inflight = new Set<Promise<void>>();
    let opened = 0;
    for (let k = 0; k < fresh.length; k++) {
      if (now() - rampStart > opts.maxRampS * 1000) {
        notes.push(`level ${level}: ramp stopped after ${opts.maxRampS} s with ${fresh.length - k} session(s) not opened (hellos not acked fast enough)`);
        break;
      }
      if (k % 500 === 0) await writeRecords(fresh.slice(k, k + 500));
      const s = fresh[k]!;
      fleet.sessions.push(s);
      opened++;
      const due = rampStart + (k / opts.rate) * 1000;
      const wait = due - now();
      if (wait > 0) await sleep(wait);
      while (inflight.size >= opts.inflight) await Promise.race(inflight);
      const p: Promise<void> = fleet
        .connect(s)
        .catch((err: unknown) => void failures.push(err instanceof Error ? err.message : String(err)))
        .finally(() => inflight.delete(p));
      inflight.add(p);
    }
    await Promise.all(inflight);
    const rampCpu = (await Promise.all(pids.map((p) => cpuMs(p)))).reduce((a, c, k) => a + c - rampCpu0[k]!, 0);
    const lostInRamp = fleet.lost - lostBefore;
    const rampS = (now() - rampStart) / 1000;
    if (failures.length) notes.push(`level ${level}: ${failures.length} hello(s) not acked, e.g. ${failures[0]}`);
    await sleep(opts.settleS * 1000);
    const res = await measureWindow(level);
    res.rampS = rampS;
    res.cpuPerHelloMs = rampCpu / Math.max(1, opened);
    res.lostInRamp = lostInRamp;
    const acks = summarise(fresh.filter((x) => x.ackMs !== undefined).map((x) => x.ackMs!));
    res.ackP50 = acks.p50;
    res.ackP99 = acks.p99;
    results.push(res);
    const rssNow = res.rssMedian.map((v) => mib(v)).join(' / ');
    console.error(
      `level ${level}: acked ${fleet.sessions.filter((s) => s.ackMs !== undefined).length}, lost ${fleet.lost}, ramp ${rampS.toFixed(1)} s, RSS ${rssNow}, redis ${res.redisOpsPerS.toFixed(0)} ops/s, cpu ${res.cpuPct.map((c) => c.toFixed(0)).join('/')}%`,
    );
    if (res.lostSoFar > 0 || res.ownerKeys < level - res.lostSoFar) {
      notes.push(`level ${level}: ${res.lostSoFar} session(s) lost so far (${[...fleet.lostReasons].map(([r, n]) => `${r}: ${n}`).join('; ')}); owner keys ${res.ownerKeys}`);
    }
  }

  // ---- report ----
  const label = (r: LevelResult) => (r.sessions === 0 ? '0 (idle)' : r.live === r.sessions ? String(r.sessions) : `${r.sessions} (${r.live} up)`);
  const rIds = replicas.map((r) => r.id);
  const memTable: BenchTable = {
    caption: `memory per session: VmRSS median over the ${opts.windowS} s window minus the idle baseline (${idleRss.map((v, k) => `${rIds[k]} ${mib(v)}`).join(', ')}), divided by the sessions the replica holds; ${opts.perChannel} sessions per connection`,
    headers: ['sessions', 'per replica', ...rIds.map((id) => `${id} RSS Δ`), ...rIds.map((id) => `${id} per session`), 'mean per session', 'marginal per session'],
    rows: results.map((r, i) => {
      const per = r.rssMedian.map((v, k) => (v - idleRss[k]!) / Math.max(1, r.perReplica[k]!));
      const totalDelta = r.rssMedian.reduce((a, v, k) => a + v - idleRss[k]!, 0);
      const prev = i > 0 ? results[i - 1]! : baseline;
      const marginal = (r.rssMedian.reduce((a, v) => a + v, 0) - prev.rssMedian.reduce((a, v) => a + v, 0)) / Math.max(1, r.live - prev.live);
      return [
        label(r),
        r.perReplica.join(' / '),
        ...r.rssMedian.map((v, k) => mib(v - idleRss[k]!)),
        ...per.map((v) => kib(v)),
        kib(totalDelta / Math.max(1, r.live)),
        kib(marginal),
      ];
    }),
  };
  const redisTable: BenchTable = {
    caption: `Redis load over a ${opts.windowS} s window (total_commands_processed delta, which counts commands run inside Lua scripts; EVALSHA calls listed separately); heartbeat interval ${heartbeatIntervalMs} ms${opts.replicaEnv?.SANDGATE_HEARTBEAT_INTERVAL_MS ? '' : ' (gateway default)'}, owner TTL ${ownerTtlMs} ms renewed every ${Math.round(ownerTtlMs / 3)} ms`,
    headers: ['sessions', 'Redis ops/s', 'Δ vs idle', 'ops/session/s', 'EVALSHA/session/s', 'Redis CPU', 'Redis CPU/1k sessions', 'Redis used_memory'],
    rows: [baseline, ...results].map((r) => {
      const delta = r.redisOpsPerS - baseline.redisOpsPerS;
      const evalsha = (r.byCommandPerS.get('evalsha') ?? 0) - (baseline.byCommandPerS.get('evalsha') ?? 0);
      return [
        label(r),
        fixed(r.redisOpsPerS, 0),
        r.sessions === 0 ? '' : fixed(delta, 0),
        r.sessions === 0 ? '' : fixed(delta / r.live, 3),
        r.sessions === 0 ? '' : fixed(evalsha / r.live, 3),
        `${fixed(r.redisCpuPct, 1)}%`,
        r.sessions === 0 ? '' : `${fixed(((r.redisCpuPct - baseline.redisCpuPct) / r.live) * 1000, 2)}%`,
        mib(r.redisUsedMemory),
      ];
    }),
  };
  // On a cluster: each primary's share of the commands, minus its idle rate (the load the sessions
  // add), and the spread: the busiest and the idlest primary against the mean.
  const shardTable: BenchTable = {
    caption: `Redis Cluster: commands per second on each primary over the window, minus its idle rate; spread = (busiest − idlest) / mean`,
    headers: ['sessions', ...baseline.perNodeOpsPerS.map((_, j) => `primary ${j + 1}`), 'spread'],
    rows: results.map((r) => {
      const added = r.perNodeOpsPerS.map((x, j) => x - (baseline.perNodeOpsPerS[j] ?? 0));
      const mean = added.reduce((a, b) => a + b, 0) / Math.max(1, added.length);
      return [label(r), ...added.map((x) => fixed(x, 0)), `${fixed(((Math.max(...added) - Math.min(...added)) / Math.max(1, mean)) * 100, 1)}%`];
    }),
  };
  const healthTable: BenchTable = {
    caption:
      `health at each level: hello→hello_ack latency of the sessions opened for this level, longest gateway silence seen by any session (heartbeats due every ${heartbeatIntervalMs} ms), /healthz latency, the reconcile scan (SandboxStore.pages() over every record, 500 a page, timed in the bench process, with the longest event-loop block it caused), sessions lost, owner keys`,
    headers: ['sessions', 'ramp', 'hello→ack p50 / p99', 'replica CPU per hello', 'lost in ramp', 'bench client RSS', 'max gateway silence', `sessions > ${(heartbeatIntervalMs * 1.5) / 1000} s silent`, '/healthz', 'reconcile scan / longest block', 'gauge', 'sg:own:* keys', 'owner ≠ acking replica', 'lost'],
    rows: results.map((r) => [
      label(r),
      `${fixed(r.rampS, 1)} s`,
      `${ms(r.ackP50)} / ${ms(r.ackP99)}`,
      ms(r.cpuPerHelloMs),
      r.lostInRamp,
      mib(r.clientRss),
      ms(r.maxGapMs),
      r.gapsOver,
      r.healthzMs.map((v) => fixed(v, 0)).join(' / ') + ' ms',
      `${fixed(r.listMs, 0)} / ${fixed(r.listBlockMs, 0)} ms`,
      r.metricsSessions.join(' / '),
      r.ownerKeys,
      r.ownerMismatches,
      r.lostSoFar,
    ]),
  };
  const cpuTable: BenchTable = {
    caption: `CPU during the window, in % of one core (the machine has ${os.cpus().length}); "per 1k" = replica CPU divided by the thousands of sessions it holds; "others" = machine busy minus this benchmark's processes (other work on the machine)`,
    headers: ['sessions', 'replica CPU', 'replica CPU per 1k sessions', 'bench client CPU', 'client event-loop delay p99 / max', 'Redis CPU', 'machine busy', 'others', 'load avg 1m'],
    rows: [baseline, ...results].map((r) => {
      const ours = r.cpuPct.reduce((a, b) => a + b, 0) + r.clientCpuPct + r.redisCpuPct;
      return [
        label(r),
        r.cpuPct.map((c) => `${c.toFixed(1)}%`).join(' / '),
        r.sessions === 0 ? '' : r.cpuPct.map((c, k) => `${fixed(((c - baseline.cpuPct[k]!) / Math.max(1, r.perReplica[k]!)) * 1000, 1)}%`).join(' / '),
        `${r.clientCpuPct.toFixed(1)}%`,
        `${fixed(r.clientLoopP99, 0)} / ${fixed(r.clientLoopMax, 0)} ms`,
        `${r.redisCpuPct.toFixed(1)}%`,
        `${r.machineBusyPct.toFixed(0)}%`,
        `${Math.max(0, r.machineBusyPct - ours).toFixed(0)}%`,
        fixed(r.loadAvg, 1),
      ];
    }),
  };
  const top = results.at(-1)!;
  const topCommands = [...top.byCommandPerS]
    .map(([cmd, perS]) => [cmd, perS - (baseline.byCommandPerS.get(cmd) ?? 0)] as const)
    .filter(([, d]) => d > 1)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 10);
  const cmdTable: BenchTable = {
    caption: `Redis commands by name at ${top.live} live sessions, minus the idle rate (INFO commandstats; commands inside scripts are counted under their own name as well as EVALSHA)`,
    headers: ['command', 'calls/s', 'per session/s', 'idle calls/s'],
    rows: topCommands.map(([cmd, d]) => [cmd, fixed(d, 0), fixed(d / top.live, 3), fixed(baseline.byCommandPerS.get(cmd) ?? 0, 1)]),
  };
  const busiest = Math.max(...[baseline, ...results].map((r) => r.machineBusyPct - r.cpuPct.reduce((a, b) => a + b, 0) - r.clientCpuPct - r.redisCpuPct));
  if (busiest > 50) {
    notes.unshift(
      `WARNING: other work used up to ${busiest.toFixed(0)}% of the machine's ${os.cpus().length * 100}% during the windows (see "others"): latencies, losses and CPU shares are distorted; re-run on a quiet machine`,
    );
  }
  const first = results[0]!;
  const memPer = (r: LevelResult) => r.rssMedian.reduce((a, v, k) => a + v - idleRss[k]!, 0) / Math.max(1, r.live);
  const opsPer = (r: LevelResult) => (r.redisOpsPerS - baseline.redisOpsPerS) / Math.max(1, r.live);
  notes.push(
    `growth ${label(first)} → ${label(top)} sessions: memory per session ${kib(memPer(first))} → ${kib(memPer(top))} (×${fixed(memPer(top) / memPer(first), 2)}), Redis ops per session per second ${fixed(opsPer(first), 3)} → ${fixed(opsPer(top), 3)} (×${fixed(opsPer(top) / opsPer(first), 2)})`,
    `${fleet.channelCount} gRPC connections for ${fleet.sessions.length} sessions; all ${fleet.sessions.filter((s) => s.ackMs !== undefined).length} hellos acked, ${fleet.lost} session(s) lost during the run`,
  );
  if (fleet.lost > 0) {
    // What the replicas said is the only account of why sessions went: keep it.
    const dir = await mkdtemp(path.join(os.tmpdir(), 'session-scale-logs-'));
    await Promise.all(replicas.map((r, i) => writeFile(path.join(dir, `replica-${i}.log`), r.logs.join(''))));
    notes.push(`sessions were lost: the replicas' logs (their last ~10 000 writes each) are in ${dir}`);
  }
  return {
    id: 'session-scale',
    title: `Session scale: ${levels.join(', ')} simulated supervisors over ${opts.replicas} replicas`,
    command: `node load-tests/session-scale.ts --levels ${levels.join(',')} --replicas ${opts.replicas} --per-channel ${opts.perChannel} --window ${opts.windowS} --settle ${opts.settleS} --rate ${opts.rate} --inflight ${opts.inflight}${opts.redis === 'cluster' ? ' --redis cluster' : ''}`,
    tables: [memTable, redisTable, ...(opts.redis === 'cluster' ? [shardTable] : []), cmdTable, cpuTable, healthTable],
    notes,
    durationMs: now() - t0,
  };
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      levels: { type: 'string', default: '1000,2500,5000,10000' },
      replicas: { type: 'string', default: '3' },
      'per-channel': { type: 'string', default: '200' },
      window: { type: 'string', default: '10' },
      settle: { type: 'string', default: '5' },
      rate: { type: 'string', default: '500' },
      inflight: { type: 'string', default: '100' },
      'max-ramp': { type: 'string', default: '60' },
      'max-loss': { type: 'string', default: '0.2' },
      'replica-env': { type: 'string', multiple: true },
      redis: { type: 'string', default: 'single' },
      ...COMMON_OPTIONS,
    },
  });
  await runMain(async () => {
    const report = await run({
      levels: values.levels!.split(',').map(Number).filter((n) => n > 0),
      replicas: Number(values.replicas),
      perChannel: Number(values['per-channel']),
      windowS: Number(values.window),
      settleS: Number(values.settle),
      rate: Number(values.rate),
      inflight: Number(values.inflight),
      maxRampS: Number(values['max-ramp']),
      maxLoss: Number(values['max-loss']),
      redis: values.redis === 'cluster' ? 'cluster' : values.redis === 'single' ? 'single' : (() => {
        throw new Error(`--redis must be single or cluster, got '${values.redis}'`);
      })(),
      replicaEnv: Object.fromEntries((values['replica-env'] ?? []).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)])),
    });
    emitReport(report, values['report-json']);
  });
}
