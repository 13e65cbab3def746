// The environment a benchmark runs against: a private redis-server and N `sandgate gateway`
// replicas (test/harness), torn down by the benchmark's cleanups in the right order: the
// cluster's sandboxes (any compute the benchmark did not delete itself), the replicas, the state
// dir, Redis.
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { existsSync, readFileSync, renameSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { LocalDriver } from '@sandgate/compute';
import { Redis, Cluster as RedisCluster } from 'ioredis';
import { TokenStore, type RedisClient } from '@sandgate/store';
import { NATIVE_SPAWN_ADDON } from '@sandgate/supervisor';
import { registerGateway } from '../test/harness/credentials.ts';
import { Cluster, cliBin, replicaBaseEnv, repoRoot, runCli, type ReplicaProcess } from '../test/harness/cluster.ts';
import { openShellClient, type AnyClient } from '../test/harness/grpc-client.ts';
import { freePorts } from '../test/harness/ports.ts';
import { createSandbox, ownerOf, pidsMatching } from '../test/harness/sandbox.ts';
import { waitFor } from '../test/harness/wait.ts';
import { startRedis, type TestRedis } from '../test/harness/redis.ts';
import { onCleanup } from './bench.ts';

export interface BenchEnv {
  redis: TestRedis;
  cluster: Cluster;
}

/**
 * The primaries: the one server, or every primary of a Redis Cluster, in a stable order (a
 * cluster's load and memory are its shards' summed). A cluster client knows them once it has
 * connected (one command).
 */
export function redisPrimaries(redis: RedisClient): Redis[] {
  return redis instanceof RedisCluster ? redis.nodes('master').sort((a, b) => (a.options.port ?? 0) - (b.options.port ?? 0)) : [redis];
}

const supervisorEntry = path.join(repoRoot, 'apps/supervisor/src/main.ts');

export async function startEnv(opts: { replicas: number; env?: Record<string, string>; redis?: 'single' | 'cluster'; tls?: boolean }): Promise<BenchEnv> {
  // The harness' Redis mode (test/harness/redis.ts) picks what startRedis() makes.
  if (opts.redis === 'cluster') process.env.SANDGATE_TEST_REDIS = 'cluster';
  const redis = await startRedis();
  onCleanup('redis-server', () => redis.stop());
  let cluster: Cluster;
  try {
    // SANDGATE_BENCH_REPLICA_NODE_OPTIONS: Node options for the replicas alone (e.g. `--cpu-prof
    // --cpu-prof-dir=/tmp/prof`: a replica writes its profile when it exits after a drain).
    const nodeOptions = process.env.SANDGATE_BENCH_REPLICA_NODE_OPTIONS;
    cluster = await Cluster.start({ redisUrl: redis.url, replicas: opts.replicas, tls: opts.tls, env: { ...(nodeOptions ? { NODE_OPTIONS: nodeOptions } : {}), ...opts.env } });
  } catch (err) {
    // A replica that did not get ready in time leaves its siblings running: find them by our
    // private Redis URL (unique to this run) and stop them.
    for (const pid of await pidsMatching(`--redis ${redis.url} `)) {
      try {
        process.kill(pid, 'SIGTERM');
      } catch {
        // gone
      }
    }
    throw err;
  }
  onCleanup('state dir', () => cluster.cleanup());
  onCleanup('leftover local compute', () => killLeftoverCompute(cluster.stateDir));
  onCleanup('gateway replicas', () => cluster.stop());
  return { redis, cluster };
}

/** Kills whatever local-driver compute is still in the state dir (the benchmark's safety net). */
export async function killLeftoverCompute(stateDir: string): Promise<number> {
  const driver = new LocalDriver({ stateDir, supervisorEntry });
  let n = 0;
  for (const c of await driver.list().catch(() => [])) {
    await driver.delete(c.sandboxId, c.handle).catch(() => undefined);
    n++;
  }
  if (n) console.error(`killed ${n} leftover sandbox(es) in ${stateDir}`);
  return n;
}

/** Resident memory of a process in bytes (VmRSS), 0 if it is gone. */
export async function rss(pid: number | undefined): Promise<number> {
  if (!pid) return 0;
  try {
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    const m = /VmRSS:\s+(\d+) kB/.exec(status);
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/**
 * A field of the "workload confined" line a sandbox's supervisor logged (its log file in the local
 * driver's state dir): which wrapper it confines through (`launcher`), how it starts spares
 * (`spare_spawner`).
 */
export function confinedLogField(stateDir: string, sandboxId: string, field: 'launcher' | 'spare_spawner' | 'pty_spawner'): string {
  const file = path.join(stateDir, 'sandboxes', sandboxId, 'supervisor.log');
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (!line.startsWith('{')) continue;
    const entry = JSON.parse(line) as Record<string, unknown>;
    if (entry.msg === 'workload confined' && typeof entry[field] === 'string') return entry[field];
  }
  throw new Error(`no "workload confined" line with ${field} in ${file}`);
}

/**
 * Two sandboxes on `gateway` for a side-by-side run of the sandgate-spawn addon: the first
 * created while the addon is hidden (renamed, so its supervisor starts processes the Node way),
 * the second with it. `field` of each one's "workload confined" line must read `expected`; both
 * are deleted when the run ends. Returns them and their supervisors' pids.
 */
export async function sandboxesWithoutAndWithAddon(
  stateDir: string,
  gateway: string,
  names: { without: string; with: string },
  field: 'spare_spawner' | 'pty_spawner',
  expected: { without: string; with: string },
): Promise<{ without: { id: string; pid: number }; with: { id: string; pid: number } }> {
  if (!existsSync(NATIVE_SPAWN_ADDON)) throw new Error(`${NATIVE_SPAWN_ADDON} not built (npm install runs apps/supervisor/native/build.sh)`);
  const hidden = `${NATIVE_SPAWN_ADDON}.hidden-by-bench`;
  const restore = () => {
    if (existsSync(hidden)) renameSync(hidden, NATIVE_SPAWN_ADDON);
  };
  onCleanup('native spawn addon back in place', restore);
  renameSync(NATIVE_SPAWN_ADDON, hidden);
  let without;
  try {
    without = await createSandbox(gateway, names.without);
  } finally {
    restore();
  }
  onCleanup(`sandbox ${names.without}`, () => runCli(['sandbox', 'delete', names.without], { gateway }));
  const withAddon = await createSandbox(gateway, names.with);
  onCleanup(`sandbox ${names.with}`, () => runCli(['sandbox', 'delete', names.with], { gateway }));
  const seen = { without: confinedLogField(stateDir, without.id, field), with: confinedLogField(stateDir, withAddon.id, field) };
  if (seen.without !== expected.without || seen.with !== expected.with) throw new Error(`unexpected ${field}s: ${JSON.stringify(seen)}`);
  const pids = { without: await supervisorPid(without.id), with: await supervisorPid(withAddon.id) };
  if (!pids.without || !pids.with) throw new Error(`supervisor processes not found: ${JSON.stringify(pids)}`);
  return { without: { id: without.id, pid: pids.without }, with: { id: withAddon.id, pid: pids.with } };
}

/** CPU time (user + system) a process has used so far, in ms. */
export async function cpuMs(pid: number | undefined): Promise<number> {
  if (!pid) return 0;
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may contain spaces) start after the last ')'.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(f[11]) + Number(f[12]); // utime, stime (fields 14 and 15)
    return (ticks * 1000) / 100; // USER_HZ is 100 on Linux
  } catch {
    return 0;
  }
}

/** Samples a value periodically and keeps the maximum (e.g. peak RSS during a transfer). */
export function peakSampler(sample: () => Promise<number>, everyMs = 100): { stop(): Promise<number> } {
  let peak = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      peak = Math.max(peak, await sample());
      await new Promise((r) => setTimeout(r, everyMs));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return peak;
    },
  };
}

/** Pid of a sandbox's supervisor (the node process carrying its SANDGATE_SANDBOX_ID), if found. */
export async function supervisorPid(sandboxId: string): Promise<number | undefined> {
  const { readdir } = await import('node:fs/promises');
  const tag = `SANDGATE_SANDBOX_ID=${sandboxId}`;
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmd = (await readFile(`/proc/${entry}/cmdline`, 'utf8')).split('\0');
      if (!cmd[0]?.endsWith('node') || !cmd.some((a) => a.endsWith('apps/supervisor/src/main.ts'))) continue;
      const env = (await readFile(`/proc/${entry}/environ`, 'utf8')).split('\0');
      if (env.includes(tag)) return Number(entry);
    } catch {
      // gone, or not ours to read
    }
  }
  return undefined;
}

export interface GatewayProcess {
  grpcAddress: string;
  httpUrl: string;
  proc: ChildProcess;
  logs(): string;
  stop(): Promise<void>;
}

/**
 * One `sandgate gateway` with a driver of our choice (the harness Cluster always uses `local`).
 * Rejects with the replica's log tail when it exits before it is ready.
 */
export async function startGateway(opts: { redisUrl: string; driver: string; stateDir: string; replicaId: string; env?: Record<string, string> }): Promise<GatewayProcess> {
  const [grpcPort, httpPort, peerPort] = await freePorts(3);
  const grpcAddress = `127.0.0.1:${grpcPort}`;
  const httpUrl = `http://127.0.0.1:${httpPort}`;
  const args = [
    cliBin, 'gateway',
    '--host', '127.0.0.1',
    '--grpc-port', String(grpcPort),
    '--http-port', String(httpPort),
    '--peer-port', String(peerPort),
    '--redis', opts.redisUrl,
    '--replica-id', opts.replicaId,
    '--driver', opts.driver,
    '--state-dir', opts.stateDir,
    '--supervisor-endpoint', grpcAddress,
  ];
  const proc = spawn(process.execPath, args, { env: { ...replicaBaseEnv(), SANDGATE_LOG_LEVEL: 'info', ...opts.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  const collect = (c: Buffer) => {
    log = (log + c.toString()).slice(-20_000);
  };
  proc.stdout!.on('data', collect);
  proc.stderr!.on('data', collect);
  const stop = async () => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((r) => proc.once('exit', r));
    proc.kill('SIGTERM');
    await exited;
  };
  const state = await waitFor(
    `gateway (${opts.driver}) ready`,
    async () => {
      if (proc.exitCode !== null || proc.signalCode !== null) return 'exited';
      const res = await fetch(`${httpUrl}/readyz`).catch(() => null);
      return res?.status === 200 ? 'ready' : false;
    },
    20_000,
  ).catch(async (err: unknown) => {
    await stop();
    throw err;
  });
  if (state === 'exited') throw new Error(`gateway --driver ${opts.driver} exited (${proc.exitCode ?? proc.signalCode}) before ready: ${log.trim().slice(-1500)}`);
  // Auth is on: the bench's clients (openShellClient, runCli) present an admin token of this Redis.
  const redis = new Redis(opts.redisUrl, { maxRetriesPerRequest: 2 });
  try {
    registerGateway(grpcAddress, { token: (await new TokenStore(redis).create({ workspace: 'default', role: 'admin', name: 'bench' })).token });
  } finally {
    redis.disconnect();
  }
  return { grpcAddress, httpUrl, proc, logs: () => log, stop };
}

/** Machine-wide CPU counters (/proc/stat, in ms summed over all cores): busy and total. */
export async function machineCpu(): Promise<{ busyMs: number; totalMs: number }> {
  const line = (await readFile('/proc/stat', 'utf8')).split('\n')[0]!;
  const f = line.trim().split(/\s+/).slice(1).map(Number);
  const total = f.slice(0, 8).reduce((a, b) => a + b, 0);
  const idle = (f[3] ?? 0) + (f[4] ?? 0);
  return { busyMs: ((total - idle) * 1000) / 100, totalMs: (total * 1000) / 100 };
}

/** Two replicas, one sandbox, and a client on each side of the relay: the owner and the other replica. */
export interface RelayPair extends BenchEnv {
  sandbox: { id: string; name: string };
  owner: ReplicaProcess;
  other: ReplicaProcess;
  direct: AnyClient;
  relayed: AnyClient;
}

export async function startRelayPair(sandboxName: string, opts: { env?: Record<string, string> } = {}): Promise<RelayPair> {
  const env = await startEnv({ replicas: 2, env: opts.env });
  const { redis, cluster } = env;
  const gateway = cluster.replicas[0]!.grpcAddress;
  const sandbox = await createSandbox(gateway, sandboxName);
  onCleanup(`sandbox ${sandboxName}`, () => runCli(['sandbox', 'delete', sandbox.name], { gateway }));
  const ownerId = await ownerOf(redis.client(), sandbox.id);
  const owner = cluster.replicas.find((r) => r.id === ownerId)!;
  const other = cluster.replicas.find((r) => r.id !== ownerId)!;
  const direct = openShellClient(owner.grpcAddress);
  const relayed = openShellClient(other.grpcAddress);
  onCleanup('grpc clients', () => {
    direct.close();
    relayed.close();
  });
  return { ...env, sandbox, owner, other, direct, relayed };
}

async function statusOf(pid: number): Promise<{ ppid: number; name: string }> {
  const s = await readFile(`/proc/${pid}/status`, 'utf8');
  return { ppid: Number(/PPid:\s+(\d+)/.exec(s)![1]), name: /Name:\s+(\S+)/.exec(s)![1]! };
}

/** A field of a process's smaps_rollup in bytes (Pss: its proportional set size). */
export async function smapsRollup(pid: number, field = 'Pss'): Promise<number> {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(await readFile(`/proc/${pid}/smaps_rollup`, 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
}

const pss = (pid: number) => smapsRollup(pid);

/**
 * A sandbox's processes besides its workload, PSS in bytes: the bwrap chain above the supervisor,
 * the supervisor, its netns agent, and the spare exec wrapper it keeps started (sandgate-launch).
 */
export async function sandboxFootprint(
  sandboxId: string,
): Promise<{ bwrap: number; supervisor: number; supervisorAnon: number; agent: number; agentName: string; spare: number }> {
  const { readdir } = await import('node:fs/promises');
  const sup = await supervisorPid(sandboxId);
  if (!sup) throw new Error(`no supervisor found for ${sandboxId}`);
  let bwrap = 0;
  for (let p = (await statusOf(sup)).ppid; p > 1; ) {
    const st = await statusOf(p);
    if (st.name !== 'bwrap') break;
    bwrap += await pss(p);
    p = st.ppid;
  }
  let agent = 0;
  let agentName = '';
  let spare = 0;
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const st = await statusOf(Number(entry)).catch(() => null);
    if (!st || st.ppid !== sup) continue;
    if (st.name === 'sandgate-launch') {
      spare += await pss(Number(entry));
      continue;
    }
    // The workload's main process is the other child; the Node agent runs as `node` (after
    // `unshare` exec'd it) and names its main thread MainThread in newer Node versions.
    if (!['sandgate-netns', 'node', 'MainThread'].includes(st.name)) continue;
    agent += await pss(Number(entry));
    agentName = st.name;
  }
  return { bwrap, supervisor: await pss(sup), supervisorAnon: await smapsRollup(sup, 'Pss_Anon'), agent, agentName, spare };
}
