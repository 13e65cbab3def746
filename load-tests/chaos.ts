// The chaos suite: three replicas behind haproxy, a mixed workload through the load balancer,
// and replicas killed (SIGKILL), frozen (SIGSTOP) and drained (SIGTERM) at random, plus one Redis
// restart, one long freeze of a replica that owns sessions (its supervisors move away meanwhile),
// one sandbox record lost behind its compute's back and one create interrupted after its record
// was written. Every invariant is judged from evidence gathered while the chaos happens (owner
// records sampled per replica incarnation, live processes), printed with counts; exit 1 if any
// invariant fails. Bounded in time, loopback only, seeded for reproducibility.
//
//   npm run chaos -- [--duration 300] [--seed 42] [--workers 6] [--redis single|sentinel|cluster] [--break NAME ...]
//
// `--redis sentinel` runs the replicas on a Sentinel group (one primary, two replicas, three
// Sentinels) with SANDGATE_REDIS_MIN_REPLICAS=1, and replaces the Redis restart with a failover:
// the primary is cut off from its replicas, creates are attempted meanwhile, then the primary is
// killed (-9), a replica promoted, and the old node brought back as a replica. Runs of 60 s and
// more first freeze the primary (SIGSTOP, at 20 % of the run) past the Sentinels' failover
// timeout, creating while it is frozen and again the moment it thaws, still believing it is the
// primary, until the Sentinels demote it. Invariant `acknowledged-creates`: every create
// acknowledged to a client is still there with its compute.
//
// `--redis cluster` runs them on a Redis Cluster (three primaries with a replica each,
// SANDGATE_REDIS_MIN_REPLICAS=1) and fails a shard over instead: every replica is frozen
// (SIGSTOP) so no write reaches one, creates are attempted meanwhile, then the primary holding the
// most of their records is killed (-9), the replicas thawed, its replica promoted, and the old node
// brought back as its replica. Runs of 60 s and more first freeze a primary past the failover (its
// replica takes over) and thaw it stale, as in Sentinel mode.
//
// `--break NAME` (repeatable; `--no-fencing`/`--no-jobs` are aliases) starts the replicas with a
// debug fault that removes one safety mechanism (SANDGATE_DEBUG_BREAK=NAME SANDGATE_DEBUG_UNSAFE=1):
// a negative run. It must fail, and it must fail the invariant that mechanism guards
// (BREAK_TARGETS): proof that each check can fail. The output says which invariants failed
// (`failed invariant: ID`) and whether the expected one did.
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import type { ServiceError } from '@grpc/grpc-js';
import { DEBUG_BREAKS, isDebugBreak, type DebugBreak } from '@sandgate/core';
import { SandboxPhase } from '@sandgate/protocols';
import { createRedisConnection, keysFor, SandboxStore, type RedisClient } from '@sandgate/store';
import { LocalDriver } from '@sandgate/compute';
import { Cluster, repoRoot, runCli } from '../test/harness/cluster.ts';
import { cliEnv, credentialsFor, registerGateway } from '../test/harness/credentials.ts';
import { startHaproxy } from '../test/harness/haproxy.ts';
import { freePort } from '../test/harness/ports.ts';
import { startRedis } from '../test/harness/redis.ts';
import { startSentinelGroup, type SentinelGroup } from '../test/harness/redis-sentinel.ts';
import { startRedisCluster, type TestRedisCluster } from '../test/harness/redis-cluster.ts';
import { openShellClient, unaryCall, type AnyClient } from '../test/harness/grpc-client.ts';
import { pidsMatching } from '../test/harness/sandbox.ts';
import { sleep, waitFor } from '../test/harness/wait.ts';
import { Ledger, classifyError } from './chaos/ledger.ts';
import { between, pick, seeded } from './chaos/rng.ts';
import { summarise, table } from './stats.ts';

/** The invariants, by id (what `failed invariant:` names and BREAK_TARGETS refers to). */
const INVARIANTS = {
  'exec-processes': 'no process of an exec or SSH channel outlives its deadline, cancel or connection',
  'ephemeral-deleted': 'every finished ephemeral sandbox is deleted',
  'no-orphan-compute': 'no live compute (supervisor process) without a record',
  'no-stuck-record': 'no record stuck in a transitional phase',
  'owner-records': 'every live session has one owner record naming a live incarnation of the replica that claimed it',
  reachable: 'every live sandbox is reachable through every replica',
  calls: 'every call succeeded or failed with UNAVAILABLE; no wrong result, no hang',
  failover: 'sandboxes of a dead replica are reachable again',
  scenarios: 'every chaos scenario really happened (preconditions held)',
  'acknowledged-creates': 'every create acknowledged to a client is still there, with its compute (--redis sentinel, --redis cluster)',
  'pool-claims': 'no warm-pool member is handed to two creates; the pool ends within its size with no member leaked, and every claim (answered or not) runs its main process',
} as const;
type InvariantId = keyof typeof INVARIANTS;

/**
 * The invariant each debug fault must break in a negative run. `exec-timeout` has none here: it
 * only removes the supervisor's own timer, which the exec-deadline backstop covers (tested in
 * test/e2e/exec-backstop.test.ts). `redis-wait` needs `--redis sentinel` (one Redis has no failover
 * to lose a write in).
 */
const BREAK_TARGETS: Partial<Record<DebugBreak, InvariantId>> = {
  fencing: 'owner-records',
  jobs: 'no-stuck-record',
  'ephemeral-cleanup': 'ephemeral-deleted',
  reconcile: 'no-orphan-compute',
  'exec-kill': 'exec-processes',
  'supervisor-reconnect': 'failover',
  'owner-hints': 'reachable',
  'retriable-errors': 'calls',
  'redis-wait': 'acknowledged-creates',
};

const { values } = parseArgs({
  options: {
    duration: { type: 'string', default: '300' },
    seed: { type: 'string', default: String(Date.now() % 100000) },
    workers: { type: 'string', default: '6' },
    // Seconds the end state may take to become clean. A negative run waits all of it (its check
    // must stay failed), so CI gives those a shorter limit than the positive run needs none of.
    'quiesce-limit': { type: 'string', default: '45' },
    break: { type: 'string', multiple: true, default: [] },
    redis: { type: 'string', default: 'single' },
    'no-fencing': { type: 'boolean', default: false },
    'no-jobs': { type: 'boolean', default: false },
    // TLS is on by default (replicas, supervisors, clients, the balancer's health checks).
    'no-tls': { type: 'boolean', default: false },
    // Keep every replica's and supervisor's log even when the run passes (to read a slow failover).
    'keep-logs': { type: 'boolean', default: false },
  },
});
const durationMs = Number(values.duration) * 1000;
const seed = Number(values.seed);
const workers = Number(values.workers);
const quiesceLimitMs = Number(values['quiesce-limit']) * 1000;
// A run shorter than about 30 s is allowed but cannot pass: its chaos scenarios do not happen, and
// the `scenarios` invariant says so (CI's negative run of that invariant is such a run).
if (!(durationMs >= 1_000) || !Number.isFinite(seed) || !(workers >= 1) || !(quiesceLimitMs >= 0)) {
  console.error('chaos: --duration must be at least 1 (seconds), --seed a number, --workers at least 1, --quiesce-limit at least 0 (seconds)');
  process.exit(2);
}
const breakNames = [...values.break.flatMap((b) => b.split(',')), ...(values['no-fencing'] ? ['fencing'] : []), ...(values['no-jobs'] ? ['jobs'] : [])]
  .map((b) => b.trim())
  .filter(Boolean);
for (const b of breakNames) {
  if (!isDebugBreak(b) || !BREAK_TARGETS[b]) {
    const usable = Object.keys(BREAK_TARGETS).join(', ');
    console.error(`chaos: --break ${b}: ${isDebugBreak(b) ? 'no chaos invariant targets this fault' : 'unknown debug fault'}; use one of ${usable}`);
    process.exit(2);
  }
}
const breaks = [...new Set(breakNames)] as DebugBreak[];
const redisMode = values.redis;
if (redisMode !== 'single' && redisMode !== 'sentinel' && redisMode !== 'cluster') {
  console.error(`chaos: --redis must be single, sentinel or cluster, got '${redisMode}'`);
  process.exit(2);
}
if (breaks.includes('redis-wait') && redisMode === 'single') {
  console.error('chaos: --break redis-wait needs --redis sentinel or cluster (one Redis has no failover to lose a write in)');
  process.exit(2);
}
const rng = seeded(seed);

/** Client-side deadline of every call: no answer by then is a hang. */
const CALL_DEADLINE_MS = 30_000;
/**
 * How long past an exec's deadline (or cancel) its processes may live: the kill grace, plus — when
 * a replica on the path is frozen — the peer keepalive (2 s + 2 s) that detects it.
 */
const KILL_SLACK_MS = 6_000;
const POOL_SIZE = 4;
/** Longer than a supervisor waits for a silent gateway (3 missed 2 s heartbeats) plus a reconnect. */
const LONG_FREEZE_MS = 9_000;
/** How long creates are tried while no Redis Cluster replica gets any write (--redis cluster). */
const CLUSTER_CUT_MS = 6_000;
/** The longest a Sentinel primary stays cut off from its replicas while creates are tried. */
const SENTINEL_CUT_MS = 15_000;
/**
 * The cut ends (the primary is killed) this long after it began at the latest, even with a create
 * still in flight: a create under load (three chaos runs at once in CI) can take 10 s and more.
 */
const SENTINEL_CUT_LIMIT_MS = 25_000;
/**
 * The Sentinels' down-after-milliseconds in chaos runs. Sentinel promotes no replica whose link to
 * the primary has been down longer than 10 × this (plus the time since the primary was seen down),
 * and the cut takes the replicas' links down: with the harness' 1 s, a cut of 13 s left no replica
 * to promote, so there was no primary at all for the rest of the run (CI, 2026-12-07).
 */
const SENTINEL_DOWN_AFTER_MS = 3_000;
/** A frozen Redis primary stays frozen this long at least: beyond the Sentinels' failover timeout (4 s, test/harness/redis-sentinel.ts). */
const REDIS_FREEZE_MIN_MS = 6_000;
/**
 * SSH: the proxy notices its ssh client died (stdin closed), the relay hops close, and the
 * supervisor kills the channel's processes; a frozen replica on the path is noticed by the peer
 * link's silence limit instead.
 */
const SSH_KILL_SLACK_MS = 10_000;
/** Owner keys and replica liveness keys live this long without renewal (the replicas' default). */
const OWNER_TTL_MS = 6_000;
/**
 * How long a pool sandbox (its supervisor always running) may have no owner record: a frozen
 * owner's key expires (6 s), its supervisors notice the silence (3 × 2 s) and reconnect with
 * backoff (well over 10 s on an overloaded 2-core machine); a Redis restart adds its own downtime.
 * Fencing keeps a stale owner from deleting the
 * new owner's record, so a longer gap is a lost record.
 */
const OWNER_GAP_LIMIT_MS = 20_000;
/**
 * A session held this long by a running replica must have had its owner record seen (the sampler
 * looks every 250 ms; a record lives 6 s unless its holder releases it, after closing the session).
 */
const OWNER_UNSEEN_LIMIT_MS = 3_000;

interface SshResult {
  code: number | null;
  stdout: string;
  stderr: string;
  /** We killed the client on purpose (kill -9 once its session was established). */
  killed: boolean;
  /** The client was still running at the call deadline. */
  hung: boolean;
}

/**
 * Runs one command over real OpenSSH. With `killWhen`, the client is kill -9ed as soon as the
 * probe says the session is established (its remote processes exist); `killed` is true only then,
 * so a client that never got a session is never counted as "killed mid-session".
 */
/**
 * What ssh (and so its ProxyCommand, `sandgate ssh-proxy`) runs with: the balancer's credentials
 * (ssh-config hands on the TLS files, never the token) and no client config file of the machine's.
 */
let sshEnv: NodeJS.ProcessEnv = process.env;

function runSsh(config: string, host: string, command: string, killWhen?: () => Promise<boolean>): Promise<SshResult> {
  return new Promise((resolve) => {
    const proc = spawn('ssh', ['-F', config, '-o', 'ConnectTimeout=20', host, command], { stdio: ['ignore', 'pipe', 'pipe'], env: sshEnv });
    let stdout = '';
    let stderr = '';
    let killed = false;
    let hung = false;
    let closed = false;
    proc.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    proc.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    if (killWhen) {
      void (async () => {
        while (!closed && proc.exitCode === null) {
          if (await killWhen()) {
            if (closed || proc.exitCode !== null) return;
            killed = true;
            proc.kill('SIGKILL');
            return;
          }
          await sleep(250);
        }
      })();
    }
    const deadline = setTimeout(() => {
      hung = true;
      proc.kill('SIGKILL');
    }, CALL_DEADLINE_MS);
    proc.on('close', (code) => {
      closed = true;
      clearTimeout(deadline);
      resolve({ code, stdout, stderr, killed, hung });
    });
  });
}

/**
 * An SSH attempt that did not do what was asked: retriable when the proxy reported UNAVAILABLE
 * or the connection dropped under it (a replica died on the path); anything else is wrong.
 */
function classifySsh(res: SshResult): { outcome: 'retriable' | 'wrong' | 'hang'; detail: string } {
  const last = res.stderr.trim().split('\n').pop() ?? '';
  if (res.hung) return { outcome: 'hang', detail: `ssh still running after ${CALL_DEADLINE_MS} ms` };
  const proxy = /sandgate ssh-proxy: ([A-Z_]+): (.*)/.exec(res.stderr);
  if (proxy) {
    if (proxy[1] === 'UNAVAILABLE' && proxy[2]) return { outcome: 'retriable', detail: `ssh: ${normaliseSsh(proxy[2])}` };
    return { outcome: 'wrong', detail: `ssh-proxy ${proxy[1]}: ${proxy[2]}` };
  }
  if (res.code === 255 && /Connection closed|closed by remote host|Broken pipe|kex_exchange_identification|Connection reset|banner exchange/i.test(res.stderr)) {
    return { outcome: 'retriable', detail: `ssh: connection dropped (${normaliseSsh(last)})` };
  }
  return { outcome: 'wrong', detail: `ssh exit ${res.code}, stdout ${JSON.stringify(res.stdout.slice(0, 80))}, stderr ${JSON.stringify(last.slice(0, 160))}` };
}

function normaliseSsh(text: string): string {
  return text.replace(/[0-9a-f]{8}-[0-9a-f-]{27}/g, '<id>').replace(/\b\d+\b/g, 'N').slice(0, 100);
}

interface ExecResult {
  stdout: string;
  exit?: number;
  error?: ServiceError;
  deadlineHit: boolean;
}

function exec(client: AnyClient, req: object, cancelAfterMs?: number): Promise<ExecResult> {
  return new Promise((resolve) => {
    let stdout = '';
    let exit: number | undefined;
    const call = client.ExecSandbox({ environment: {}, ...req }, { deadline: Date.now() + CALL_DEADLINE_MS });
    if (cancelAfterMs) setTimeout(() => call.cancel(), cancelAfterMs);
    call.on('data', (ev: { stdout?: { data: Buffer }; exit?: { exit_code?: number } }) => {
      if (ev.stdout) stdout += ev.stdout.data.toString();
      if (ev.exit) exit = ev.exit.exit_code ?? 0;
    });
    call.on('error', (error: ServiceError) =>
      resolve({ stdout, exit, error, deadlineHit: error.code === 4 && /deadline exceeded/i.test(error.details) && !/relay/.test(error.details) }),
    );
    call.on('end', () => resolve({ stdout, exit, deadlineHit: false }));
  });
}

async function main(): Promise<void> {
  const t0 = Date.now();
  const ledger = new Ledger(t0);
  console.log(`chaos: seed=${seed} duration=${durationMs / 1000}s workers=${workers}${breaks.length ? ` NEGATIVE RUN --break ${breaks.join(',')} (${breaks.map((b) => DEBUG_BREAKS[b].removes).join('; ')})` : ''}`);
  // The [seconds] of every line below count from here: this maps them onto the kept logs' timestamps.
  console.log(`chaos: t=0 at ${new Date(t0).toISOString()}`);
  // One Redis (restarted once), a Sentinel group or a cluster (failed over once).
  const single = redisMode === 'single' ? await startRedis({ persistent: true }) : null;
  const group: SentinelGroup | null = redisMode === 'sentinel' ? await startSentinelGroup({ replicas: 2, downAfterMs: SENTINEL_DOWN_AFTER_MS }) : null;
  const shards: TestRedisCluster | null = redisMode === 'cluster' ? await startRedisCluster() : null;
  const replicated = group !== null || shards !== null;
  const redisUrl = single?.url ?? group?.url ?? shards!.url;
  console.log(
    `chaos: Redis ${single ? 'single (AOF, restarted once)' : group ? 'Sentinel group: primary, 2 replicas, 3 Sentinels; SANDGATE_REDIS_MIN_REPLICAS=1' : 'cluster: 3 primaries with a replica each; SANDGATE_REDIS_MIN_REPLICAS=1'}`,
  );
  // As the replicas connect: through the Sentinels, following a failover; or to the cluster.
  const r = single ? single.client() : createRedisConnection(redisUrl, 'commands');
  r.on('error', () => undefined);
  const k = keysFor(r);
  const lbPort = await freePort();
  const cluster = await Cluster.start({
    redisUrl,
    replicas: 3,
    supervisorEndpoint: `127.0.0.1:${lbPort}`,
    tls: !values['no-tls'],
    env: {
      SANDGATE_LOG_LEVEL: 'info',
      // The lost record's compute must be gone before the run ends: quarantined at the first
      // sweep, deleted once seen orphaned this long (the default, 60 s, outlasts a short run).
      SANDGATE_ORPHAN_GRACE_MS: '15000',
      // Creates and deletes cut short by the Redis failover are settled within the run too.
      SANDGATE_PENDING_GRACE_MS: '20000',
      ...(replicated ? { SANDGATE_REDIS_MIN_REPLICAS: '1' } : {}),
      ...(breaks.length ? { SANDGATE_DEBUG_BREAK: breaks.join(','), SANDGATE_DEBUG_UNSAFE: '1' } : {}),
    },
  });
  const lb = await startHaproxy(
    lbPort,
    cluster.replicas.map((x) => ({ name: x.id, grpcPort: x.grpcPort, httpPort: x.httpPort })),
    {
      healthCa: cluster.tls?.caFile,
      // The balancer's view beside the faults: a live replica marked DOWN (a health check slower
      // than its timeout) shuts every session to it, which a run must be able to tell from a fault.
      onLog: (line) => {
        const m = /Server (\S+) is (DOWN|UP)[^,]*(?:, reason: ([^,]+))?(?:.*?check duration: (\d+ms))?(?:.*?(\d+) sessions active)?/.exec(line);
        if (!m) return;
        const why = [m[3], m[4] && `check took ${m[4]}`, m[2] === 'DOWN' && m[5] && `${m[5]} sessions shut`].filter(Boolean).join(', ');
        console.log(`[${secs(t0)}] balancer: ${m[1]} ${m[2]}${why ? ` (${why})` : ''}`);
      },
    },
  );
  // Clients of the balancer present what a replica's would (TCP mode: TLS goes through to them).
  registerGateway(lb.address, credentialsFor(cluster.replicas[0]!.grpcAddress));
  sshEnv = { ...process.env, XDG_CONFIG_HOME: path.join(os.tmpdir(), 'sg-no-client-config'), SANDGATE_CONFIG: undefined, ...cliEnv(credentialsFor(lb.address)) };
  console.log(`chaos: ${cluster.tls ? 'TLS on (replicas, supervisors, clients, health checks)' : 'plaintext (--no-tls)'}`);
  // Several client channels, so the balancer spreads them over the replicas.
  const clients = Array.from({ length: 4 }, () => openShellClient(lb.address));
  const client = () => pick(rng, clients);
  const store = new SandboxStore(r);

  let stopAt = t0 + durationMs;
  const scenarios = new Map<string, { happened: number; skipped: number; notes: string[] }>();
  const scenario = (name: string, happened: boolean, note?: string) => {
    const c = scenarios.get(name) ?? { happened: 0, skipped: 0, notes: [] };
    if (happened) c.happened++;
    else c.skipped++;
    if (note && c.notes.length < 4) c.notes.push(note);
    scenarios.set(name, c);
  };
  let seq = 0;
  const ephemeralIds: string[] = [];
  // A warm pool the workload claims from (ephemeral claims: each runs its main process and goes).
  const POOL = 'chaos';
  const POOL_SIZE = 2;
  await unaryCall(clients[0]!, 'SetPool', { name: POOL, size: POOL_SIZE });
  /** Ids of acknowledged claims (a create through the pool): each must be a sandbox no other create got. */
  const claimedIds = new Set<string>();
  let warmClaims = 0;
  /** Sandboxes whose create a client was told succeeded and that nobody deletes (--redis sentinel). */
  const acknowledged: { id: string; name: string }[] = [];
  /**
   * A create through the balancer whose record must survive (acknowledged-creates): acknowledged
   * ones are remembered, refusals go to the ledger. True, or why it failed.
   */
  const tryCreateKept = async (name: string): Promise<true | string> => {
    try {
      const res = await unaryCall<{ sandbox: { metadata: { id: string } } }>(clients[0]!, 'CreateSandbox', { name, spec: { command: ['sleep', 'infinity'] } });
      acknowledged.push({ id: res.sandbox.metadata.id, name });
      ledger.record('create-kept', 'ok');
      return true;
    } catch (err) {
      ledger.record('create-kept', ...tuple(classifyError(err, false)));
      return String((err as { details?: string }).details ?? err);
    }
  };
  const createKept = async (name: string): Promise<boolean> => (await tryCreateKept(name)) === true;
  /**
   * A create attempted while the Redis replicas are cut off (the write-loss window). A passing
   * failure (a connection the balancer shut, Redis briefly unreachable) is tried again under a
   * new name until `untilMs`; the guard's refusal (no replica confirmed the write) is the answer
   * and ends it. Without the retry, a run whose creates all met a passing failure had nothing
   * acknowledged to lose, and the `--break redis-wait` negative run passed (CI, once, on a cluster).
   */
  const createWhileCut = async (name: string, untilMs: number): Promise<boolean> => {
    for (let attempt = 1; ; attempt++) {
      const outcome = await tryCreateKept(attempt === 1 ? name : `${name}-${attempt}`);
      if (outcome === true) return true;
      if (/Redis replica\(s\) required/.test(outcome) || Date.now() >= untilMs) return false;
      await sleep(250);
    }
  };
  const pendingChecks: Promise<void>[] = [];
  /** Each failover: ms from the fault to an answer, and which fault it followed. */
  const failovers: { ms: number; after: string; sandbox: string; at: string }[] = [];
  let sshDir = '';

  try {
    // A pool of long-lived sandboxes the execs go to.
    const pool: { id: string; name: string }[] = [];
    for (let i = 0; i < POOL_SIZE; i++) {
      const res = await setupCreate(clients[0]!, { name: `pool-${i}`, spec: { command: ['sleep', 'infinity'] } });
      pool.push({ id: res.sandbox.metadata.id, name: res.sandbox.metadata.name });
    }
    for (const p of pool) {
      await waitFor(`pool sandbox ${p.name} ready`, async () => (await store.get(p.id))?.sandbox.status?.phase === SandboxPhase.READY, 30_000);
    }
    // Every replica routes to every pool sandbox once before the chaos, so each holds an owner
    // hint for those it does not own (the `owner-hints` negative run needs stale hints to exist).
    for (const p of pool) {
      for (const rep of cluster.replicas) {
        const c = openShellClient(rep.grpcAddress);
        await exec(c, { sandbox_id: p.id, command: ['true'] });
        c.close();
      }
    }
    // Real OpenSSH clients through the balancer: `sandgate sandbox ssh-config` blocks whose
    // ProxyCommand mints a session token and relays over ForwardTcp (any replica → the owner).
    sshDir = mkdtempSync(`${os.tmpdir()}/sandgate-chaos-ssh-`);
    const sshConfigs = new Map<string, string>();
    for (const p of pool) {
      const res = await runCli(['sandbox', 'ssh-config', p.name], { gateway: lb.address });
      if (res.code !== 0) throw new Error(`ssh-config ${p.name}: ${res.stderr}`);
      const file = `${sshDir}/${p.name}.ssh_config`;
      writeFileSync(file, res.stdout);
      sshConfigs.set(p.name, file);
    }


    // ---- live evidence: owner records, sampled per replica incarnation ------------------------
    let samplingDone = false;
    const owners = new OwnerSampler(r, cluster, pool, ledger);
    const sampling = owners.run(() => samplingDone);

    // ---- a record lost behind its compute's back (Redis failed over to a replica that lagged) --
    // The compute keeps running without a record: the reconcile sweep must remove it.
    {
      const res = await setupCreate(clients[0]!, { name: 'lost-record', spec: { command: ['sleep', 'infinity'] } });
      const lost = res.sandbox.metadata;
      const rec = await waitFor('lost-record sandbox ready', async () => {
        const got = await store.get(lost.id);
        return got?.sandbox.status?.phase === SandboxPhase.READY ? got : undefined;
      }, 30_000);
      // Look for the compute *before* removing the record: once the record is gone the reconcile
      // sweep may stop the compute at any moment, which is the behaviour under test, not a miss.
      const running = await waitFor('lost-record compute seen', async () => (await liveSupervisors(lb.address)).has(lost.id) || undefined, 10_000)
        .then(() => true, () => false);
      const removed = await store.remove(lost.id, rec.sandbox.metadata!.workspace!, lost.name);
      scenario('record lost under live compute', removed && running, removed && running ? undefined : `removed=${removed} compute running=${running}`);
      console.log(`[${secs(t0)}] record of ${lost.id} removed behind its running compute`);
    }
    // ---- an ephemeral sandbox that finishes at once: the workload's own may all be refused on a
    // loaded machine, and `ephemeral-deleted` needs at least one to judge.
    {
      const res = await setupCreate(clients[0]!, {
        name: 'eph-setup',
        annotations: { 'openshell.nvidia.com/retention': 'ephemeral' },
        spec: { command: ['sh', '-c', 'exit 0'] },
      });
      ephemeralIds.push(res.sandbox.metadata.id);
    }
    // ---- an acknowledged create in calm weather: it must outlive the failover to come
    // Set-up, not what the invariant checks: a machine loaded by three chaos runs at once can
    // refuse it UNAVAILABLE (CI did, once), so it is retried as the pool's creates are.
    if (replicated) {
      const calm = await setupCreate(clients[0]!, { name: 'kept-calm', spec: { command: ['sleep', 'infinity'] } });
      acknowledged.push({ id: calm.sandbox.metadata.id, name: 'kept-calm' });
      ledger.record('create-kept', 'ok');
    }
    // ---- a create interrupted after its record was written (its replica died before launching)
    {
      const template = (await store.get(pool[0]!.id))!.sandbox;
      const id = randomUUID();
      await store.create(
        { ...template, metadata: { ...template.metadata, id, name: 'interrupted-create', created_at_ms: Date.now() }, status: { phase: SandboxPhase.PROVISIONING } } as typeof template,
        'not-a-credential',
      );
      scenario('create interrupted before launch', true);
      console.log(`[${secs(t0)}] record ${id} written without compute (interrupted create)`);
    }

    // The chaos phase lasts `--duration` from here on, however long the set-up took: the pool,
    // and the special scenarios' sandboxes above, which wait for Ready. On a machine loaded by
    // three runs at once that set-up once took 40 s, the whole of a 40 s run counted from before
    // it, and no chaos happened at all (CI: `scenarios` failed the Sentinel negative run).
    stopAt = Date.now() + durationMs;

    /** After `atMs`, nothing matching `marker` may be alive. */
    const expectGone = (marker: string, atMs: number, what: string) => {
      pendingChecks.push(
        (async () => {
          await sleep(Math.max(0, atMs - Date.now()));
          const alive = await pidsMatching(marker);
          if (alive.length > 0) ledger.violate('process outlived its exec', `${what}: ${alive.length} process(es) of '${marker}' alive`);
        })(),
      );
    };

    /**
     * Failover: time until each of `owned` answers an exec again through the balancer, at most 30 s
     * after `since`. Every probe is a client call like any other (`failover-probe` in the ledger):
     * until the sandbox answers, it must fail UNAVAILABLE. The probes are the calls sure to meet a
     * dead owner, so they are what `--break retriable-errors` is caught by: a run whose workload
     * happened to have no relayed call in flight at a kill once let it pass.
     */
    const expectFailover = (owned: { id: string; name: string }[], since: number, after: string) => {
      for (const sb of owned) {
        pendingChecks.push(
          (async () => {
            for (;;) {
              const res = await exec(clients[0]!, { sandbox_id: sb.id, command: ['true'] });
              if (res.error) ledger.record('failover-probe', ...tuple(classifyError(res.error, res.deadlineHit)));
              else ledger.record('failover-probe', res.exit === 0 ? 'ok' : 'wrong', `exit ${res.exit} in ${sb.name} (${sb.id})`);
              if (!res.error && res.exit === 0) return void failovers.push({ ms: Date.now() - since, after, sandbox: `${sb.name} (${sb.id})`, at: secs(t0, since) });
              if (Date.now() - since > 30_000) return ledger.violate('failover', `${sb.name} unreachable for 30 s`);
              await sleep(50);
            }
          })(),
        );
      }
    };

    const ops: Record<string, () => Promise<void>> = {
      async exec() {
        const token = `tok${++seq}`;
        const sb = pick(rng, pool);
        const res = await exec(client(), { sandbox_id: sb.id, command: ['sh', '-c', 'echo "$0"', token] });
        if (res.error) return ledger.record('exec', ...tuple(classifyError(res.error, res.deadlineHit)));
        if (res.exit === 0 && res.stdout === `${token}\n`) return ledger.record('exec', 'ok');
        // The sandbox names the supervisor log to read (its "exec exited" lines carry stdout_bytes).
        ledger.record('exec', 'wrong', `exit ${res.exit} stdout ${JSON.stringify(res.stdout.slice(0, 80))} in ${sb.name} (${sb.id})`);
      },
      async 'exec-timeout'() {
        const n = marker(++seq);
        const sb = pick(rng, pool);
        const started = Date.now();
        const res = await exec(client(), { sandbox_id: sb.id, command: ['sh', '-c', `sleep 600.${n} & sleep 601.${n}`], timeout_seconds: 2 });
        expectGone(`600.${n}`, started + 2000 + KILL_SLACK_MS, `timeout exec ${n}`);
        expectGone(`601.${n}`, started + 2000 + KILL_SLACK_MS, `timeout exec ${n}`);
        if (res.error) return ledger.record('exec-timeout', ...tuple(classifyError(res.error, res.deadlineHit)));
        if (res.exit === 124) return ledger.record('exec-timeout', 'ok');
        ledger.record('exec-timeout', 'wrong', `exit ${res.exit} instead of 124`);
      },
      async 'exec-cancel'() {
        const n = marker(++seq);
        const sb = pick(rng, pool);
        const res = await exec(client(), { sandbox_id: sb.id, command: ['sh', '-c', `sleep 602.${n}`] }, 1000);
        expectGone(`602.${n}`, Date.now() + KILL_SLACK_MS, `cancelled exec ${n}`);
        if (res.error?.code === 1) return ledger.record('exec-cancel', 'ok'); // CANCELLED: what we asked for
        if (res.error) return ledger.record('exec-cancel', ...tuple(classifyError(res.error, res.deadlineHit)));
        ledger.record('exec-cancel', 'wrong', `finished with exit ${res.exit} despite the cancel`);
      },
      async interactive() {
        const token = `in${++seq}`;
        const sb = pick(rng, pool);
        const res = await new Promise<ExecResult>((resolve) => {
          let stdout = '';
          let exit: number | undefined;
          const call = client().ExecSandboxInteractive({ deadline: Date.now() + CALL_DEADLINE_MS });
          call.on('data', (ev: { stdout?: { data: Buffer }; exit?: { exit_code?: number } }) => {
            if (ev.stdout) stdout += ev.stdout.data.toString();
            if (ev.exit) exit = ev.exit.exit_code ?? 0;
          });
          call.on('error', (error: ServiceError) => resolve({ stdout, exit, error, deadlineHit: error.code === 4 && !/relay/.test(error.details) }));
          call.on('end', () => resolve({ stdout, exit, deadlineHit: false }));
          call.write({ start: { sandbox_id: sb.id, command: ['cat'], environment: {} } });
          call.write({ stdin: Buffer.from(token) });
          call.end();
        });
        if (res.error) return ledger.record('interactive', ...tuple(classifyError(res.error, res.deadlineHit)));
        if (res.exit === 0 && res.stdout === token) return ledger.record('interactive', 'ok');
        ledger.record('interactive', 'wrong', `exit ${res.exit} stdout ${JSON.stringify(res.stdout.slice(0, 80))}`);
      },
      async ssh() {
        const token = `ssh${++seq}`;
        const sb = pick(rng, pool);
        const res = await runSsh(sshConfigs.get(sb.name)!, `sandgate-${sb.name}`, `echo ${token}`);
        if (res.code === 0 && res.stdout === `${token}\n`) return ledger.record('ssh', 'ok');
        ledger.record('ssh', ...tuple(classifySsh(res)));
      },
      async 'ssh-drop'() {
        // A session whose client dies (kill -9) while its shell runs two sleeps: the connection's
        // end must take every process of the channel with it. Killed only once both sleeps run.
        const n = marker(++seq);
        const sb = pick(rng, pool);
        const res = await runSsh(sshConfigs.get(sb.name)!, `sandgate-${sb.name}`, `sleep 603.${n} & sleep 604.${n}; echo late`, async () =>
          (await countMatching(new RegExp(`sleep 60[34]\\.${n}`))) >= 2,
        );
        if (res.killed) {
          expectGone(`603.${n}`, Date.now() + SSH_KILL_SLACK_MS, `dropped ssh ${n}`);
          expectGone(`604.${n}`, Date.now() + SSH_KILL_SLACK_MS, `dropped ssh ${n}`);
          return ledger.record('ssh-drop', 'ok');
        }
        // Never established, or it finished before the kill: still nothing of it may stay.
        expectGone(`603.${n}`, Date.now() + SSH_KILL_SLACK_MS, `ssh ${n} that was not killed`);
        expectGone(`604.${n}`, Date.now() + SSH_KILL_SLACK_MS, `ssh ${n} that was not killed`);
        if (res.code === 0) return ledger.record('ssh-drop', 'wrong', 'the session finished before it could be killed');
        ledger.record('ssh-drop', ...tuple(classifySsh(res)));
      },
      async ephemeral() {
        const n = ++seq;
        try {
          const res = await unaryCall<{ sandbox: { metadata: { id: string } } }>(client(), 'CreateSandbox', {
            name: `eph-${n}`,
            annotations: { 'openshell.nvidia.com/retention': 'ephemeral' },
            spec: { command: ['sh', '-c', `sleep 1; exit ${n % 2 ? 3 : 0}`] },
          });
          ephemeralIds.push(res.sandbox.metadata.id);
          ledger.record('create-ephemeral', 'ok');
        } catch (err) {
          ledger.record('create-ephemeral', ...tuple(classifyError(err, false)));
        }
      },
    };
    ops.claim = async () => {
      const n = ++seq;
      try {
        const res = await unaryCall<{ sandbox: { metadata: { id: string }; status?: { phase?: number } } }>(client(), 'CreateSandbox', {
          name: `pc-${n}`,
          annotations: { 'openshell.nvidia.com/retention': 'ephemeral', 'sandgate.dev/pool': POOL },
          spec: { command: ['sh', '-c', 'sleep 1; exit 0'] },
        });
        const id = res.sandbox.metadata.id;
        if (claimedIds.has(id)) ledger.violate('pool claim', `sandbox ${id} was acknowledged to two creates`);
        claimedIds.add(id);
        ephemeralIds.push(id);
        // Ready in the answer: a member was claimed (else the pool was empty and it started cold).
        if (res.sandbox.status?.phase === SandboxPhase.READY) warmClaims++;
        ledger.record('pool-claim', 'ok');
      } catch (err) {
        ledger.record('pool-claim', ...tuple(classifyError(err, false)));
      }
    };
    // Claims take half of the creates' share rather than adding to it: every claim makes the
    // refill boot a member, so the suite boots as many supervisors a second as before the pool
    // (a create is the heaviest op on two cores, and the failover figures compare across runs).
    const weights: [string, number][] = [
      ['claim', 0.5],
      ['exec', 5],
      ['exec-timeout', 2],
      ['exec-cancel', 1],
      ['interactive', 2],
      ['ephemeral', 0.5],
      ['ssh', 1],
      ['ssh-drop', 1],
    ];
    const total = weights.reduce((a, [, w]) => a + w, 0);
    const chooseOp = () => {
      let x = rng() * total;
      for (const [name, w] of weights) if ((x -= w) < 0) return name;
      return 'exec';
    };

    const workload = Array.from({ length: workers }, async () => {
      while (Date.now() < stopAt) {
        const op = chooseOp();
        await ops[op]!().catch((err: unknown) => ledger.violate(`op ${op} threw`, String(err)));
      }
    });

    // The chaos: something bad every few seconds, replicas brought back, Redis restarted once.
    // A negative run of `fencing` freezes first: the freeze is what fencing is there for.
    let restarting: Promise<void> | undefined;
    const chaos = (async () => {
      let redisRestarted = false;
      let redisFrozen = false;
      let longFreezeDone = false;
      let terminated = false;
      // Short runs (CI's negative runs) freeze early, so the freeze fits before the quiet end.
      const freezeAt = breaks.includes('fencing') ? 0 : durationMs < 60_000 ? 0.15 : 0.6;
      while (Date.now() < stopAt - 15_000) {
        await sleep(between(rng, 4_000, 7_000));
        if (Date.now() >= stopAt - 15_000) break;
        const elapsed = 1 - (stopAt - Date.now()) / durationMs;
        // A shard's failover on a cluster, with the write-loss window made wide on purpose: no
        // replica gets any write while creates are attempted (guarded, those touching a shard are
        // refused UNAVAILABLE; with `--break redis-wait` the primaries alone acknowledge them), then
        // the primary holding the most of their records dies, and its replica, which never saw
        // them, is promoted. The old node comes back, empty, as its replica.
        if (!redisRestarted && elapsed >= (durationMs < 60_000 ? 0 : 0.4) && shards) {
          redisRestarted = true;
          owners.ignoreDeletionsUntil = Number.POSITIVE_INFINITY;
          const { primaries: livePrimaries, replicas: frozenReplicas } = await shards.roles();
          // Who takes over which primary, asked now: frozen, a replica answers nothing.
          const heirs = new Map<number, number>();
          for (const p of frozenReplicas) {
            const of = await shards.primaryOfReplica(p);
            if (of !== null && !heirs.has(of)) heirs.set(of, p);
          }
          console.log(`[${secs(t0)}] every Redis replica frozen (${frozenReplicas.map((p) => `:${p}`).join(' ')}) and cut off; creating meanwhile`);
          for (const p of frozenReplicas) shards.signal(p, 'SIGSTOP');
          // Frozen alone, a replica would still find the primary's writes in its socket buffer
          // when thawed: the primaries drop their replication links too (a frozen replica cannot
          // reconnect), so nothing written from now on reaches a replica before the kill.
          for (const p of livePrimaries) await shards.node(p).call('CLIENT', 'KILL', 'TYPE', 'replica').catch(() => undefined);
          const before = acknowledged.length;
          // Guarded creates wait for replicas that cannot answer, and their WAITs hold the
          // primaries' connections meanwhile: give them a few seconds, not all they would take.
          // One acknowledged later (after the failover) is an acknowledged create like any other.
          const tries = [1, 2, 3].map((i) => createWhileCut(`kept-cut-${i}`, Date.now() + CLUSTER_CUT_MS - 1_000));
          const attempts = await Promise.race([Promise.all(tries), sleep(CLUSTER_CUT_MS).then(() => tries.map(() => false))]);
          const tally = new Map<number, number>();
          for (const kept of acknowledged.slice(before)) {
            const port = await shards.primaryOfKey(k.sandbox(kept.id)).catch(() => null);
            if (port !== null) tally.set(port, (tally.get(port) ?? 0) + 1);
          }
          const old = [...tally].sort((a, b) => b[1] - a[1])[0]?.[0] ?? (await shards.primaryOfKey(k.sandboxIndex()));
          const heir = heirs.get(old);
          console.log(`[${secs(t0)}] kill -9 of the Redis primary :${old} (${attempts.filter(Boolean).length}/${attempts.length} creates acknowledged while no replica had anything, ${tally.get(old) ?? 0} of them recorded there); replicas thawed`);
          shards.signal(old, 'SIGKILL');
          for (const p of frozenReplicas) shards.signal(p, 'SIGCONT');
          const promoted = heir !== undefined && (await shards.waitPromoted(heir, 60_000).then(() => true, () => false));
          if (promoted) {
            await shards.restartNode(old);
            await shards.waitReplicating(old, heir!, 60_000).catch(() => undefined);
          }
          console.log(`[${secs(t0)}] shard of :${old} now served by :${promoted ? heir : 'none'}; :${old} back as its replica`);
          owners.ignoreDeletionsUntil = Date.now() + OWNER_TTL_MS + 5_000;
          scenario('redis primary failover', promoted, `${attempts.filter(Boolean).length}/${attempts.length} creates acknowledged while no replica had anything`);
          continue;
        }
        // A primary frozen past the failover: its replica takes over; thawed, it comes back still
        // believing it is the primary, with connections that were open to it, until the cluster
        // demotes it. No create acknowledged to a client may be among what it took meanwhile.
        if (!redisFrozen && elapsed >= 0.2 && shards && durationMs >= 60_000) {
          redisFrozen = true;
          owners.ignoreDeletionsUntil = Number.POSITIVE_INFINITY;
          const old = await shards.primaryOfKey(k.sandboxIndex());
          const heir = (await shards.replicasOf(old))[0];
          const frozenAt = Date.now();
          console.log(`[${secs(t0)}] SIGSTOP of the Redis primary :${old}; creating meanwhile`);
          shards.signal(old, 'SIGSTOP');
          const whileFrozen = Promise.all([1, 2].map((i) => createKept(`kept-frozen-${i}`)));
          const promoted = heir !== undefined && (await shards.waitPromoted(heir, 60_000).then(() => true, () => false));
          await sleep(Math.max(0, frozenAt + REDIS_FREEZE_MIN_MS - Date.now()));
          shards.signal(old, 'SIGCONT');
          console.log(`[${secs(t0)}] SIGCONT of :${old} after ${((Date.now() - frozenAt) / 1000).toFixed(1)} s (its slots now on :${promoted ? heir : 'none'}); creating at once`);
          const afterThaw = Promise.all([1, 2].map((i) => createKept(`kept-stale-${i}`)));
          const demoted = promoted && (await shards.waitReplicating(old, heir!, 60_000).then(() => true, () => false));
          const acked = [...(await whileFrozen), ...(await afterThaw)].filter(Boolean).length;
          console.log(`[${secs(t0)}] :${old} ${demoted ? 'demoted, replicating from' : 'NOT replicating from'} :${promoted ? heir : 'none'} (${acked}/4 creates acknowledged)`);
          owners.ignoreDeletionsUntil = Date.now() + OWNER_TTL_MS + 5_000;
          scenario('redis primary frozen, back stale', demoted, `${acked}/4 creates acknowledged`);
          continue;
        }
        // Before the long freeze in a short run, so both fit before the quiet end.
        if (!redisRestarted && elapsed >= (durationMs < 60_000 ? 0 : 0.4) && group) {
          redisRestarted = true;
          // The write-loss window asynchronous replication leaves, made wide on purpose: the
          // primary loses its replicas (their replication login is switched off), creates are
          // attempted meanwhile (guarded, they are refused UNAVAILABLE; with `--break redis-wait`
          // the primary alone acknowledges them), then the primary dies and a replica that never
          // saw them is promoted. The old node comes back, empty, as a replica.
          owners.ignoreDeletionsUntil = Number.POSITIVE_INFINITY;
          const old = await group.primaryPort();
          console.log(`[${secs(t0)}] Redis primary :${old} cut off from its replicas; creating meanwhile`);
          await group.cutReplication();
          // Up to 15 s of tries: under load (three chaos runs at once in CI) the balancer marks
          // replicas down and shuts their connections, and in 5 s every try could fail that way,
          // leaving nothing acknowledged to lose (the `--break redis-wait` run passed, CI, once).
          // A try that is acknowledged, or refused by the guard, ends its loop at once.
          const cutAt = Date.now();
          const acknowledgedWhileCut: boolean[] = [];
          const tries = Promise.all([1, 2].map((i) => createWhileCut(`kept-cut-${i}`, cutAt + SENTINEL_CUT_MS).then((ok) => void acknowledgedWhileCut.push(ok))));
          await Promise.race([tries, sleep(SENTINEL_CUT_LIMIT_MS)]);
          const attempts = [...acknowledgedWhileCut];
          console.log(`[${secs(t0)}] kill -9 of the Redis primary :${old} after ${((Date.now() - cutAt) / 1000).toFixed(1)} s (${attempts.filter(Boolean).length}/2 creates acknowledged while cut off${attempts.length < 2 ? `, ${2 - attempts.length} still in flight` : ''})`);
          group.signal(old, 'SIGKILL');
          await group.restoreReplication();
          const promoted = await group.waitFailover(old, 60_000).catch(() => null);
          if (promoted !== null) await group.restartNode(old, promoted);
          console.log(`[${secs(t0)}] Redis primary now :${promoted ?? 'none'}; :${old} back as its replica`);
          owners.ignoreDeletionsUntil = Date.now() + OWNER_TTL_MS + 5_000;
          scenario('redis primary failover', promoted !== null, `${attempts.filter(Boolean).length}/2 creates acknowledged while cut off`);
          continue;
        }
        // The other way a primary goes: frozen (SIGSTOP) for longer than the Sentinels' failover
        // timeout, so that it comes back still believing it is the primary, with connections
        // that were open to it, until the Sentinels demote it. Whatever it takes in that window
        // is lost in its resync; no create acknowledged to a client may be among it.
        if (!redisFrozen && elapsed >= 0.2 && group && durationMs >= 60_000) {
          redisFrozen = true;
          owners.ignoreDeletionsUntil = Number.POSITIVE_INFINITY;
          const old = await group.primaryPort();
          const frozenAt = Date.now();
          console.log(`[${secs(t0)}] SIGSTOP of the Redis primary :${old}; creating meanwhile`);
          group.signal(old, 'SIGSTOP');
          const whileFrozen = Promise.all([1, 2].map((i) => createKept(`kept-frozen-${i}`)));
          const promoted = await group.waitFailover(old, 60_000).catch(() => null);
          await sleep(Math.max(0, frozenAt + REDIS_FREEZE_MIN_MS - Date.now()));
          group.signal(old, 'SIGCONT');
          console.log(`[${secs(t0)}] SIGCONT of :${old} after ${((Date.now() - frozenAt) / 1000).toFixed(1)} s (primary now :${promoted ?? 'none'}); creating at once`);
          const afterThaw = Promise.all([1, 2].map((i) => createKept(`kept-stale-${i}`)));
          const demoted = promoted !== null && (await group.waitReplicating(old, promoted, 60_000).then(() => true, () => false));
          const acked = [...(await whileFrozen), ...(await afterThaw)].filter(Boolean).length;
          console.log(`[${secs(t0)}] :${old} ${demoted ? 'demoted, replicating from' : 'NOT replicating from'} :${promoted ?? 'none'} (${acked}/4 creates acknowledged)`);
          owners.ignoreDeletionsUntil = Date.now() + OWNER_TTL_MS + 5_000;
          scenario('redis primary frozen, back stale', demoted, `${acked}/4 creates acknowledged`);
          continue;
        }
        if (!longFreezeDone && elapsed >= freezeAt) {
          // A replica holding sessions stalls (a GC pause, a VM migration) long enough for its
          // supervisors to give up on it and claim anew elsewhere; then it wakes up still
          // believing it owns them. Only fencing keeps its stale renewals and releases from
          // clobbering the new owners' records. Precondition: the replica is running and owns
          // sessions; otherwise the freeze waits for the next round.
          const running = cluster.replicas.map((rep, i) => ({ rep, i })).filter(({ rep }) => rep.proc && rep.proc.exitCode === null);
          const counts = await Promise.all(running.map(({ rep }) => ownedBy(r, pool, rep.id)));
          const best = counts.reduce((b, c, k) => (c.length > counts[b]!.length ? k : b), 0);
          if (running.length === 0 || counts[best]!.length === 0) {
            scenario('long freeze of an owner', false, 'no running replica owned a session');
            continue;
          }
          longFreezeDone = true;
          const victim = running[best]!.rep;
          const owned = counts[best]!;
          console.log(`[${secs(t0)}] SIGSTOP ${victim.id} for at least ${LONG_FREEZE_MS / 1000} s (owns ${owned.length} pool sandboxes)`);
          victim.proc!.kill('SIGSTOP');
          const frozenAt = Date.now();
          await sleep(LONG_FREEZE_MS);
          // It stays frozen until its sessions were claimed elsewhere (at most 30 s): waking up
          // after they moved is the case fencing exists for, so the run makes sure it happens.
          const movedCount = async () =>
            (await Promise.all(owned.map((sb) => r.hget(keysFor(r).owner(sb.id), 'replica').catch(() => null)))).filter((o) => o && o !== victim.id).length;
          let moved = await movedCount();
          while (moved < owned.length && Date.now() - frozenAt < 30_000) {
            await sleep(250);
            moved = await movedCount();
          }
          victim.proc!.kill('SIGCONT');
          console.log(`[${secs(t0)}] SIGCONT ${victim.id} after ${((Date.now() - frozenAt) / 1000).toFixed(1)} s: ${moved}/${owned.length} of its sessions had moved`);
          scenario('long freeze of an owner', moved > 0, `${victim.id}: ${moved}/${owned.length} sessions moved`);
          // Its supervisors gave it up for dead: each of its sandboxes must answer again (through
          // the balancer) within 30 s of the wake-up. Judged only from now on: while the replica is
          // frozen, a client channel the balancer pinned to it would just hang.
          expectFailover(owned, Date.now(), 'long freeze (from SIGCONT)');
          // A negative run of `fencing`: nothing more, so no later chaos repairs what the stale
          // owner's unfenced release did before the owner records are judged.
          if (breaks.includes('fencing')) break;
          continue;
        }
        if (!redisRestarted && elapsed >= 0.4 && single) {
          redisRestarted = true;
          console.log(`[${secs(t0)}] restart redis`);
          // Records lost in the restart are Redis's doing, not a stale owner's: only the gap
          // limit judges them.
          owners.ignoreDeletionsUntil = Number.POSITIVE_INFINITY;
          await single.restart();
          owners.ignoreDeletionsUntil = Date.now() + OWNER_TTL_MS + 5_000;
          scenario('redis restart', true);
          continue;
        }
        const victim = Math.floor(rng() * cluster.replicas.length);
        const roll = rng();
        // At most one replica down at a time; while one restarts (slow on a loaded machine) the
        // chaos goes on with the others instead of waiting for it.
        if (restarting !== undefined || !cluster.replicas[victim]!.proc) {
          scenario('action skipped: a replica is still restarting', false);
          continue;
        }
        const owned = await ownedBy(r, pool, cluster.replicas[victim]!.id);
        let diedBy = 'SIGKILL';
        if (roll < 0.15 && !terminated) {
          terminated = true;
          diedBy = 'SIGTERM (drain)';
          scenario('SIGTERM (drain)', true, `${owned.length} sessions`);
          console.log(`[${secs(t0)}] SIGTERM ${cluster.replicas[victim]!.id}`);
          await cluster.signal(victim, 'SIGTERM');
        } else if (roll < 0.35) {
          scenario('short freeze (4 s)', true);
          console.log(`[${secs(t0)}] SIGSTOP ${cluster.replicas[victim]!.id} for 4 s`);
          const proc = cluster.replicas[victim]!.proc!;
          proc.kill('SIGSTOP');
          await sleep(4_000);
          proc.kill('SIGCONT');
          continue;
        } else {
          scenario('SIGKILL', true, `${owned.length} sessions`);
          console.log(`[${secs(t0)}] SIGKILL ${cluster.replicas[victim]!.id} (owns ${owned.length} pool sandboxes)`);
          await cluster.signal(victim, 'SIGKILL');
        }
        const diedAt = Date.now();
        expectFailover(owned, diedAt, diedBy);
        const downFor = between(rng, 1_000, 2_000);
        restarting = (async () => {
          await sleep(downFor);
          await restartReplica(cluster, victim, scenario).catch((err: unknown) =>
            ledger.violate('failover', `${cluster.replicas[victim]!.id} could not be started again: ${String(err).split(';')[0]}`),
          );
          restarting = undefined;
        })();
      }
      await restarting;
    })();

    await Promise.all([...workload, chaos]);
    // Everything back up; then wait, on conditions, for durable work to finish.
    for (let i = 0; i < cluster.replicas.length; i++) if (!cluster.replicas[i]!.proc) await restartReplica(cluster, i, scenario);
    console.log(`[${secs(t0)}] workload done; quiescing`);
    await Promise.all(pendingChecks);

    // ---- invariants ----------------------------------------------------------------------------
    // End state, re-read until it is clean or the quiesce limit passes (--quiesce-limit, 45 s by
    // default): long enough for the reconcile sweep (every 10 s) to finish a create interrupted
    // 30 s ago and remove orphaned compute, and for every cleanup job to run. A negative run waits
    // the whole limit.
    const endState = async () => {
      let ephemeralLeft = 0;
      let neverRan = 0;
      /** What is left of each ephemeral sandbox not deleted: its record's phase, or its compute alone. */
      const ephemeralLeftovers: string[] = [];
      for (const id of ephemeralIds) {
        const rec = await store.get(id);
        const reason = rec?.sandbox.status?.conditions?.[0]?.reason;
        if (rec && (reason === 'ComputeFailed' || reason === 'ProvisioningTimeout')) neverRan++;
        else if (rec || (await liveSupervisors(lb.address)).has(id)) {
          ephemeralLeft++;
          ephemeralLeftovers.push(`${id} (${rec ? `record in phase ${rec.sandbox.status?.phase ?? '?'}${reason ? `, ${reason}` : ''}` : 'compute without a record'})`);
        }
      }
      const records = await store.list();
      const recordIds = new Set(records.map((x) => x.sandbox.metadata!.id!));
      // Compute is judged by what runs, not by what the state directory says: a supervisor
      // process of this cluster (it dials this run's balancer) whose sandbox has no record.
      const live = await liveSupervisors(lb.address);
      const orphans = [...live.keys()].filter((id) => !recordIds.has(id));
      const stuck = records.filter((x) => [1, 4, 6, 8].includes(x.sandbox.status?.phase ?? 0));
      // Only this run's markers (other processes on the machine may run sleeps of their own).
      const leftovers = await countMatching(new RegExp(`sleep 60[0-4]\\.${RUN_TAG}\\d{7}`));
      // The pool: its member set and the records in its workspace are the same ids, within its
      // size; a claim whose answer was lost (its replica killed) is ephemeral too, so it goes.
      const members = new Set(await r.smembers(k.workspaceSandboxes(`pool:${POOL}`)));
      const inPoolWorkspace = records.filter((x) => x.sandbox.metadata!.workspace === `pool:${POOL}`).map((x) => x.sandbox.metadata!.id!);
      const leakedMembers = inPoolWorkspace.filter((id) => !members.has(id)).length + [...members].filter((id) => !recordIds.has(id)).length;
      const strayClaims = records.filter((x) => x.sandbox.metadata!.name!.startsWith('pc-') && !claimedIds.has(x.sandbox.metadata!.id!)).length;
      return { ephemeralLeft, ephemeralLeftovers, neverRan, records, live, orphans, stuck, leftovers, members: members.size, leakedMembers, strayClaims };
    };
    const quiesceStart = Date.now();
    let end = await endState();
    // A pool sandbox without an owner record counts too: with fencing the record is back within
    // seconds; a record an unfenced stale owner deleted never comes back, so the gap outlasts the
    // limit and the owner-records invariant sees it.
    while (
      Date.now() - quiesceStart < quiesceLimitMs &&
      (end.ephemeralLeft || end.orphans.length || end.stuck.length || end.leftovers || owners.openGaps() > 0 || end.leakedMembers || end.strayClaims)
    ) {
      await sleep(1_000);
      end = await endState();
    }
    console.log(`[${secs(t0)}] end state read after ${((Date.now() - quiesceStart) / 1000).toFixed(0)} s of quiescing`);

    const results: [InvariantId, boolean, string][] = [];
        const outlived = ledger.violations.filter((v) => v.kind === 'process outlived its exec').length;
    results.push(['exec-processes', outlived === 0 && end.leftovers === 0, `${outlived} late (checked live at each deadline), ${end.leftovers} left at the end`]);
    // An ephemeral sandbox whose main process never ran (its launch failed) stays, in Error, for
    // the user to see why; every one whose main process finished must be gone, record and compute.
    results.push([
      'ephemeral-deleted',
      end.ephemeralLeft === 0,
      `${ephemeralIds.length - end.ephemeralLeft - end.neverRan}/${ephemeralIds.length - end.neverRan} deleted${end.neverRan ? ` (${end.neverRan} never launched)` : ''}${end.ephemeralLeftovers.length ? `; left: ${end.ephemeralLeftovers.join(', ')}` : ''}`,
    ]);
    results.push(['no-orphan-compute', end.orphans.length === 0, `${end.orphans.length} live supervisor(s) without a record of ${end.live.size} live`]);
    results.push(['no-stuck-record', end.stuck.length === 0, `${end.stuck.length} of ${end.records.length} (${end.stuck.map((x) => x.sandbox.metadata?.name).join(',')})`]);

    samplingDone = true;
    await sampling;
    results.push(['owner-records', owners.violations === 0, owners.summary()]);

    // ---- an owner moved in calm weather, under warm owner hints -------------------------------
    // The chaos may leave every replica's hint right by chance (CI: a session drained away and
    // came back to the replica it started on, and the owner-hints negative run passed
    // `reachable`). So one sandbox made now is routed to from every replica, each then holding a
    // hint that names its owner; the owner drains (SIGTERM) and, once the session moved, starts
    // again with an empty cache. The third replica's hint is then stale for certain: it must
    // forget it on 'not here' and look the owner up again.
    const calm = await moveUnderWarmHints(cluster, clients[0]!, store, r, scenario).catch((err: unknown) => {
      scenario('owner moved under warm hints', false, String(err).split('\n')[0]);
      return undefined;
    });
    if (calm) {
      scenario('owner moved under warm hints', true, `${calm.from} → ${calm.to}`);
      console.log(`[${secs(t0)}] ${calm.sandbox.name}: owner ${calm.from} drained and started again; the session is on ${calm.to}`);
    }

    // Every pool sandbox answers through every replica at the end.
    let unreachable = 0;
    for (const sb of calm ? [...pool, calm.sandbox] : pool) {
      for (const rep of cluster.replicas) {
        const c = openShellClient(rep.grpcAddress);
        const res = await exec(c, { sandbox_id: sb.id, command: ['true'] });
        c.close();
        if (res.error || res.exit !== 0) unreachable++;
      }
    }
    results.push(['reachable', unreachable === 0, `${unreachable} failures of ${(pool.length + (calm ? 1 : 0)) * cluster.replicas.length}`]);

    const callViolations = ledger.violations.filter((v) => v.kind.endsWith(': wrong') || v.kind.endsWith(': hang') || v.kind.startsWith('op '));
    results.push(['calls', callViolations.length === 0, `${callViolations.length} violations`]);
    const failoverViolations = ledger.violations.filter((v) => v.kind === 'failover').length;
    const fo = summarise(failovers.map((f) => f.ms));
    // Which fault the slow ones followed: the p99 alone cannot say what to make faster.
    const byFault = new Map<string, number[]>();
    for (const f of failovers) byFault.set(f.after, [...(byFault.get(f.after) ?? []), f.ms]);
    for (const [after, ms] of byFault) {
      const x = summarise(ms);
      console.log(`failover after ${after}: n=${x.n} p50=${x.p50.toFixed(0)} ms p99=${x.p99.toFixed(0)} ms max=${Math.max(...ms).toFixed(0)} ms`);
    }
    for (const f of [...failovers].sort((a, b) => b.ms - a.ms).slice(0, 3)) console.log(`slow failover: ${f.ms} ms after ${f.after} at [${f.at}], ${f.sandbox}`);
    // Judged only when it happened: a run in which no owner of a live sandbox died or froze (every
    // session lost before, as `--break supervisor-reconnect` can make it) proves nothing, and
    // passing it then let that negative run pass `failover` (CI, 4a2f81f).
    results.push([
      'failover',
      failoverViolations === 0 && fo.n > 0,
      fo.n === 0 && failoverViolations === 0
        ? 'n=0: no owner of a live sandbox died or froze, so no failover was seen'
        : `n=${fo.n} p50=${fo.p50.toFixed(0)} ms p99=${fo.p99.toFixed(0)} ms, ${failoverViolations} never`,
    ]);
    // A check only means something if its scenario ran: the long freeze must have moved sessions,
    // the special scenarios must have happened, and the workload must have killed SSH sessions
    // mid-session and timed out execs.
    const required = [
      'long freeze of an owner',
      'record lost under live compute',
      'create interrupted before launch',
      'owner moved under warm hints',
      ...(replicated ? ['redis primary failover', ...(durationMs >= 60_000 ? ['redis primary frozen, back stale'] : [])] : durationMs >= 60_000 ? ['redis restart'] : []),
    ];
    if (replicated) {
      // Judged on the end state: the record, and a supervisor process of it running.
      const lost = [];
      for (const k of acknowledged) if (!(await store.get(k.id)) || !end.live.has(k.id)) lost.push(k.name);
      results.push([
        'acknowledged-creates',
        lost.length === 0,
        `${acknowledged.length - lost.length}/${acknowledged.length} acknowledged creates there with their compute${lost.length ? `; lost: ${lost.join(', ')}` : ''}`,
      ]);
    }
    const doubleClaims = ledger.violations.filter((v) => v.kind === 'pool claim').length;
    results.push([
      'pool-claims',
      doubleClaims === 0 && end.members <= POOL_SIZE && end.leakedMembers === 0 && end.strayClaims === 0,
      `${claimedIds.size} claims acknowledged (${warmClaims} warm), ${doubleClaims} handed out twice; ${end.members}/${POOL_SIZE} members, ${end.leakedMembers} leaked; ${end.strayClaims} unanswered claim(s) left`,
    ]);
    scenario('warm pool claims', warmClaims > 0, `${warmClaims}`);
    required.push('warm pool claims');
    const finishedEphemerals = ephemeralIds.length - end.neverRan;
    scenario('ephemeral sandboxes that ran', finishedEphemerals > 0, `${finishedEphemerals}`);
    required.push('ephemeral sandboxes that ran');
    const missing = required.filter((name) => !scenarios.get(name)?.happened);
    results.push(['scenarios', missing.length === 0, missing.length ? `did not happen: ${missing.join(', ')}` : `${required.length} special scenarios happened`]);

    console.log('\ncalls');
    console.log(table(['call', 'ok', 'UNAVAILABLE', 'wrong', 'hang'], [...ledger.counts].map(([k, c]) => [k, c.ok, c.retriable, c.wrong, c.hang])));
    if (ledger.retriableMessages.size) {
      console.log('\nUNAVAILABLE messages');
      console.log(table(['message', 'count'], [...ledger.retriableMessages].sort((a, b) => b[1] - a[1]).slice(0, 10).map(([m, n]) => [m, n])));
    }
    console.log('\nscenarios (how many of each really happened)');
    console.log(table(['scenario', 'happened', 'skipped', 'notes'], [...scenarios].map(([k, c]) => [k, c.happened, c.skipped, c.notes.join('; ')])));
    console.log('\ninvariants');
    console.log(table(['id', 'invariant', 'result', 'detail'], results.map(([id, ok, detail]) => [id, INVARIANTS[id], ok ? 'PASS' : 'FAIL', detail])));
    for (const v of ledger.violations.slice(0, 20)) console.log(`violation @${(v.atMs / 1000).toFixed(1)}s ${v.kind}: ${v.detail}`);
    const passed = results.every(([, ok]) => ok);
    const failedIds = results.filter(([, ok]) => !ok).map(([id]) => id);
    for (const id of failedIds) console.log(`failed invariant: ${id}`);
    if (breaks.length) {
      // A negative run: the invariant each fault targets must be among the failures.
      for (const b of breaks) {
        const target = BREAK_TARGETS[b]!;
        console.log(`negative run --break ${b}: expected invariant '${target}' ${failedIds.includes(target) ? 'FAILED, as it must' : 'did NOT fail: this check cannot catch what it guards'}`);
      }
    }
    if (!passed || values['keep-logs']) {
      // Keep what explains the failure: every replica's log and every supervisor's log.
      const dir = `${os.tmpdir()}/sandgate-chaos-${seed}-${Date.now()}`;
      mkdirSync(dir, { recursive: true });
      for (const rep of cluster.replicas) writeFileSync(`${dir}/${rep.id}.log`, rep.logs.join(''));
      writeFileSync(`${dir}/haproxy.log`, lb.log());
      // Logs and handles only: each sandbox's disk image is a sparse 10Gi file (a plain copy writes
      // every byte), and its work directory is that disk's contents.
      const keep = (src: string) => !/\/(disk\.img(\.partial)?|work)$/.test(src);
      if (existsSync(`${cluster.stateDir}/sandboxes`)) cpSync(`${cluster.stateDir}/sandboxes`, `${dir}/sandboxes`, { recursive: true, filter: keep });
      console.log(`logs kept in ${dir}`);
    }
    console.log(`\nchaos ${passed ? 'PASSED' : 'FAILED'} (seed ${seed}, ${((Date.now() - t0) / 1000).toFixed(0)} s)`);
    process.exitCode = passed ? 0 : 1;

    // Clean up: delete what is left through the gateway (the finally below removes any compute
    // a negative run left without a record).
    for (const rec of await store.list()) {
      await unaryCall(clients[0]!, 'DeleteSandbox', { name: rec.sandbox.metadata!.name }).catch(() => undefined);
    }
  } finally {
    // Whatever happened, a step of the set-up that threw included, no sandbox outlives the run:
    // the state directory goes below, and its supervisors would dial dead replicas forever.
    const driver = new LocalDriver({ stateDir: cluster.stateDir, supervisorEntry: `${repoRoot}/apps/supervisor/src/main.ts` });
    for (const c of await driver.list().catch(() => [])) await driver.delete(c.sandboxId, c.handle).catch(() => undefined);
    if (sshDir) rmSync(sshDir, { recursive: true, force: true });
    for (const c of clients) c.close();
    await lb.stop();
    await cluster.stop();
    cluster.cleanup();
    await single?.stop();
    if (!single) r.disconnect(); // (single.stop() closes its own clients)
    await group?.stop();
    await shards?.stop();
  }
}

async function countMatching(re: RegExp): Promise<number> {
  const { readdir, readFile } = await import('node:fs/promises');
  let n = 0;
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cmd = await readFile(`/proc/${entry}/cmdline`).then((b) => b.toString().replace(/\0/g, ' '), () => '');
    if (re.test(cmd)) n++;
  }
  return n;
}

/** Fixed-width, so no marker is a prefix of another when matching command lines. */
/** Distinguishes this run's markers from another chaos run's on the same machine. */
const RUN_TAG = String(process.pid % 1000).padStart(3, '0');

function marker(n: number): string {
  return RUN_TAG + String(n).padStart(7, '0');
}

function tuple(x: { outcome: 'ok' | 'retriable' | 'wrong' | 'hang'; detail: string }): ['ok' | 'retriable' | 'wrong' | 'hang', string] {
  return [x.outcome, x.detail];
}

function secs(t0: number, at = Date.now()): string {
  return `${((at - t0) / 1000).toFixed(1)}s`;
}

/**
 * One sandbox made now, routed to from every replica (so each holds a fresh owner hint), then its
 * owner drained (SIGTERM) until the session is claimed by another replica, and started again.
 * Resolves with the sandbox and the two owners; throws when a step does not happen in time.
 */
async function moveUnderWarmHints(
  cluster: Cluster,
  client: AnyClient,
  store: SandboxStore,
  r: RedisClient,
  scenario: (name: string, happened: boolean, note?: string) => void,
): Promise<{ sandbox: { id: string; name: string }; from: string; to: string }> {
  const res = await setupCreate(client, { name: 'moved-calm', spec: { command: ['sleep', 'infinity'] } });
  const sandbox = { id: res.sandbox.metadata.id, name: res.sandbox.metadata.name };
  await waitFor('moved-calm ready', async () => (await store.get(sandbox.id))?.sandbox.status?.phase === SandboxPhase.READY, 30_000);
  const from = await waitFor('moved-calm owner record', async () => (await r.hget(keysFor(r).owner(sandbox.id), 'replica')) ?? undefined, 20_000);
  for (const rep of cluster.replicas) {
    const c = openShellClient(rep.grpcAddress);
    const got = await exec(c, { sandbox_id: sandbox.id, command: ['true'] });
    c.close();
    if (got.error || got.exit !== 0) throw new Error(`moved-calm: exec through ${rep.id} before the move failed: ${got.error?.message ?? `exit ${got.exit}`}`);
  }
  const index = cluster.replicas.findIndex((rep) => rep.id === from);
  if (index < 0) throw new Error(`moved-calm: owner ${from} is not a replica of this run`);
  await cluster.signal(index, 'SIGTERM');
  // 15 s: the move takes about a second (CI: drain, claim and restart in 2.7 s), and a run whose
  // supervisors do not reconnect (the supervisor-reconnect negative run) waits all of it.
  const to = await waitFor('moved-calm claimed by another replica', async () => {
    const owner = await r.hget(keysFor(r).owner(sandbox.id), 'replica');
    return owner && owner !== from ? owner : undefined;
  }, 15_000);
  await restartReplica(cluster, index, scenario);
  return { sandbox, from, to };
}

async function ownedBy(r: RedisClient, pool: { id: string; name: string }[], replicaId: string) {
  const out: { id: string; name: string }[] = [];
  for (const sb of pool) if ((await r.hget(keysFor(r).owner(sb.id), 'replica')) === replicaId) out.push(sb);
  return out;
}

/**
 * A create of the run's setup (before any chaos): retried while the balancer answers UNAVAILABLE
 * (an overloaded machine drops connections), and idempotent by name.
 */
async function setupCreate(client: AnyClient, req: { name: string; spec: object; annotations?: Record<string, string> }): Promise<{ sandbox: { metadata: { id: string; name: string } } }> {
  type Res = { sandbox: { metadata: { id: string; name: string } } };
  // ALREADY_EXISTS: an earlier attempt won, and from then on the sandbox is read, not created. The
  // read is retried alike (CI: a GetSandbox after ALREADY_EXISTS met "Connection dropped" and
  // ended the `--break supervisor-reconnect` run in its set-up).
  let created = false;
  for (let attempt = 1; ; attempt++) {
    try {
      return created ? await unaryCall<Res>(client, 'GetSandbox', { name: req.name }) : await unaryCall<Res>(client, 'CreateSandbox', req);
    } catch (err) {
      const code = (err as { code?: number }).code;
      if (code === 6 && !created) {
        created = true;
        continue;
      }
      if (code !== 14 || attempt >= 5) throw err;
      await sleep(1_000 * attempt);
    }
  }
}

/**
 * Starts a killed replica again. On an overloaded machine a start can miss the harness's readiness
 * deadline: it is then killed and started once more (counted), rather than ending the run.
 */
async function restartReplica(cluster: Cluster, i: number, scenario: (name: string, happened: boolean, note?: string) => void): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await cluster.startReplica(i);
      return;
    } catch (err) {
      scenario('replica restart retried (slow start)', true, `${cluster.replicas[i]!.id} attempt ${attempt}`);
      if (attempt >= 3) throw err;
      console.log(`replica ${cluster.replicas[i]!.id} did not become ready; starting it again (${String(err).split(';')[0]})`);
    }
  }
}

/**
 * Supervisor processes of this run's cluster (they dial its balancer), by sandbox id: the live
 * evidence of compute. Read from /proc, so a dead process never counts whatever its state
 * directory says.
 */
async function liveSupervisors(balancer: string): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const pid of await pidsMatching('apps/supervisor/src/main.ts')) {
    try {
      const argv0 = (await readFile(`/proc/${pid}/cmdline`)).toString().split('\0')[0] ?? '';
      if (!argv0.endsWith('node')) continue; // the bwrap processes around it share its argv tail
      const env = (await readFile(`/proc/${pid}/environ`)).toString().split('\0');
      if (!env.includes(`SANDGATE_GATEWAY=${balancer}`)) continue;
      const id = env.find((e) => e.startsWith('SANDGATE_SANDBOX_ID='))?.slice('SANDGATE_SANDBOX_ID='.length);
      if (id) out.set(id, pid);
    } catch {
      // gone while we looked
    }
  }
  return out;
}

/**
 * Samples every pool sandbox's owner record while the chaos happens, and judges each sample
 * against the replica incarnations the harness started (a pid and the time it was first seen).
 * A record may be missing only briefly (OWNER_GAP_LIMIT_MS); it may never name a replica that is
 * dead, nor a replica's *earlier* incarnation (the pair replica+fence was first seen before that
 * replica's current process started), once the TTL has had time to expire it.
 */
class OwnerSampler {
  violations = 0;
  private samples = 0;
  private maxGapMs = 0;
  private readonly missingSince = new Map<string, number>();
  private readonly firstSeen = new Map<string, number>();
  private readonly reported = new Set<string>();
  /** Per replica id: current pid (null while dead), since when. */
  private readonly incarnation = new Map<string, { pid: number | null; since: number }>();
  private readonly r: RedisClient;
  private readonly cluster: Cluster;
  private readonly pool: { id: string; name: string }[];
  private readonly ledger: Ledger;

  constructor(r: RedisClient, cluster: Cluster, pool: { id: string; name: string }[], ledger: Ledger) {
    this.r = r;
    this.cluster = cluster;
    this.pool = pool;
    this.ledger = ledger;
  }

  async run(done: () => boolean): Promise<void> {
    while (!done()) {
      await this.sample().catch(() => undefined); // Redis restarting: no evidence either way
      await sleep(250);
    }
    // A gap still open at the end is not yet evidence either way: judged by its length so far, a
    // record an unfenced stale release deleted late in the run passed as a gap of 19.5 s (CI,
    // the `--break fencing` negative run, once). So sampling goes on until every open gap has
    // closed or outlasted the limit: with fencing its holder re-creates the record at the next
    // renewal (within seconds), without it the record never comes back.
    const watchUntil = Date.now() + OWNER_GAP_LIMIT_MS + 2_000;
    while (Date.now() < watchUntil && [...this.missingSince.values()].some((since) => Date.now() - since <= OWNER_GAP_LIMIT_MS)) {
      await sleep(250);
      await this.sample().catch(() => undefined);
    }
    const now = Date.now();
    for (const [id, since] of this.missingSince) this.noteGap(id, now - since);
    this.judgeFromLogs();
  }

  private readonly last = new Map<string, { replica: string; fence: string; ttl: number } | undefined>();
  /** When the last sample was taken (0: none yet), and the first. */
  private lastSampleAt = 0;
  private firstSampleAt = 0;
  private judgedSessions = 0;
  /** Records that vanished well before their TTL could run out: somebody deleted them. */
  private readonly deletions: { id: string; holder: string; fence: string; atMs: number; holderRunning: boolean }[] = [];
  /** Per replica, whether it was running (alive and not stopped) at each sample. */
  private readonly running = new Map<string, { atMs: number; running: boolean }[]>();
  /** Windows in which records may be lost without anyone deleting them (a Redis restart or failover). */
  private readonly ignoreWindows: { from: number; to: number }[] = [];
  private ignoreUntil = 0;

  /** Set around a Redis restart, which may lose records without anyone deleting them. */
  set ignoreDeletionsUntil(until: number) {
    const now = Date.now();
    const open = this.ignoreWindows.at(-1);
    if (open && open.to >= now) open.to = until;
    else this.ignoreWindows.push({ from: now, to: until });
    this.ignoreUntil = until;
  }

  get ignoreDeletionsUntil(): number {
    return this.ignoreUntil;
  }

  private ignored(from: number, to: number): boolean {
    return this.ignoreWindows.some((w) => w.from <= to && w.to >= from);
  }

  /**
   * Judged from the replicas' own logs once the run is over (no race with the chaos): each
   * replica logs every session it accepts (with its fence) and closes, and closes a session
   * before it releases its record. With fencing, a record disappears before its TTL only when
   * its holder released it, so after that holder logged the session closed, and a session that
   * lives for seconds has its record there to be seen. Two violations, then:
   * - a record deleted while its holder, running, still held the session (an unfenced stale
   *   release of another replica's record);
   * - a session held for OWNER_UNSEEN_LIMIT_MS by a running replica whose record was never
   *   seen (deleted as soon as it was made).
   * Earlier this was a probe that asked the holder to exec at once; it lost its race against the
   * holder closing the session, or against the access rule, which refuses while the record is
   * missing (CI, 2026-12-07, three times).
   */
  private judgeFromLogs(): void {
    const sessions = this.sessionsFromLogs();
    this.judgedSessions = sessions.length;
    for (const d of this.deletions) {
      if (!d.holderRunning || this.ignored(d.atMs - 1_000, d.atMs)) continue;
      const s = sessions.find((x) => x.replica === d.holder && x.sandboxId === d.id && x.fence === d.fence);
      if (!s || (s.closedAt !== null && s.closedAt <= d.atMs + 50)) continue;
      this.violate(
        `deleted:${d.id}|${d.holder}|${d.fence}`,
        `${d.id}: owner record (${d.holder}, fence ${d.fence}) deleted while ${d.holder} held the session (${s.closedAt === null ? 'never closed' : `closed ${s.closedAt - d.atMs} ms later`})`,
      );
    }
    const sampledUntil = this.lastSampleAt;
    for (const s of sessions) {
      const end = Math.min(s.closedAt ?? sampledUntil, sampledUntil);
      if (s.acceptedAt < this.firstSampleAt || end - s.acceptedAt < OWNER_UNSEEN_LIMIT_MS) continue;
      if (this.ignored(s.acceptedAt, end) || !this.ranThroughout(s.replica, s.acceptedAt, end)) continue;
      if (this.firstSeen.has(`${s.sandboxId}|${s.replica}|${s.fence}`)) continue;
      this.violate(
        `unseen:${s.sandboxId}|${s.replica}|${s.fence}`,
        `${s.sandboxId}: ${s.replica} held the session (fence ${s.fence}) for ${((end - s.acceptedAt) / 1000).toFixed(1)} s and its owner record was never there`,
      );
    }
  }

  /** Did `replica` run (alive, not stopped) at every sample from `from` to `to`? */
  private ranThroughout(replica: string, from: number, to: number): boolean {
    const seen = (this.running.get(replica) ?? []).filter((x) => x.atMs >= from && x.atMs <= to);
    return seen.length > 0 && seen.every((x) => x.running);
  }

  /** The pool sandboxes' sessions as each replica logged them: accepted (with its fence), closed. */
  private sessionsFromLogs(): { replica: string; sandboxId: string; sessionId: string; fence: string; acceptedAt: number; closedAt: number | null }[] {
    const ids = new Set(this.pool.map((sb) => sb.id));
    const out: { replica: string; sandboxId: string; sessionId: string; fence: string; acceptedAt: number; closedAt: number | null }[] = [];
    for (const rep of this.cluster.replicas) {
      const byId = new Map<string, (typeof out)[number]>();
      for (const line of rep.logs.join('').split('\n')) {
        if (!line.startsWith('{')) continue;
        let rec: { msg?: string; ts?: string; sandboxId?: string; sessionId?: string; fence?: unknown };
        try {
          rec = JSON.parse(line) as typeof rec;
        } catch {
          continue;
        }
        if (!rec.sandboxId || !ids.has(rec.sandboxId) || !rec.sessionId || !rec.ts) continue;
        if (rec.msg === 'supervisor session accepted') {
          const s = { replica: rep.id, sandboxId: rec.sandboxId, sessionId: rec.sessionId, fence: String(rec.fence), acceptedAt: Date.parse(rec.ts), closedAt: null };
          byId.set(rec.sessionId, s);
          out.push(s);
        } else if (rec.msg === 'supervisor session closed') {
          const s = byId.get(rec.sessionId);
          if (s && s.closedAt === null) s.closedAt = Date.parse(rec.ts);
        }
      }
    }
    return out;
  }

  /** Pool sandboxes without an owner record at the last sample. */
  openGaps(): number {
    return this.missingSince.size;
  }

  summary(): string {
    return `${this.violations} violation(s) in ${this.samples} samples; longest gap without a record ${(this.maxGapMs / 1000).toFixed(1)} s (limit ${OWNER_GAP_LIMIT_MS / 1000} s); ${this.judgedSessions} sessions judged from the replicas' logs, ${this.deletions.length} record(s) gone before their TTL`;
  }

  private violate(key: string, detail: string): void {
    if (this.reported.has(key)) return;
    this.reported.add(key);
    this.violations++;
    this.ledger.violate('owner record', detail);
  }

  private noteGap(id: string, gapMs: number): void {
    this.maxGapMs = Math.max(this.maxGapMs, gapMs);
    if (gapMs > OWNER_GAP_LIMIT_MS) this.violate(`gap:${id}:${this.missingSince.get(id)}`, `${id}: no owner record for ${(gapMs / 1000).toFixed(1)} s while its supervisor runs`);
  }

  private async sample(): Promise<void> {
    const now = Date.now();
    for (const rep of this.cluster.replicas) {
      const pid = rep.proc && rep.proc.exitCode === null && rep.proc.signalCode === null ? (rep.proc.pid ?? null) : null;
      const cur = this.incarnation.get(rep.id);
      if (!cur || cur.pid !== pid) this.incarnation.set(rep.id, { pid, since: now });
      // Running: alive and not stopped (SIGSTOP: state T), so able to renew, release, close.
      let running = false;
      try {
        running = pid !== null && readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'T';
      } catch {
        running = false;
      }
      const list = this.running.get(rep.id) ?? [];
      list.push({ atMs: now, running });
      this.running.set(rep.id, list);
    }
    const [records, ttls] = await Promise.all([
      Promise.all(this.pool.map((sb) => this.r.hgetall(keysFor(this.r).owner(sb.id)))),
      Promise.all(this.pool.map((sb) => this.r.pttl(keysFor(this.r).owner(sb.id)))),
    ]);
    this.samples++;
    const late = OWNER_TTL_MS + 3_000;
    const sinceLast = this.lastSampleAt ? now - this.lastSampleAt : Number.POSITIVE_INFINITY;
    this.firstSampleAt ||= now;
    this.lastSampleAt = now;
    this.pool.forEach((sb, k) => {
      const rec = records[k]!;
      const before = this.last.get(sb.id);
      this.last.set(sb.id, rec.replica ? { replica: rec.replica, fence: rec.fence ?? '', ttl: ttls[k]! } : undefined);
      // Gone sooner than its TTL could have run out since it was last seen: deleted, not expired.
      if (!rec.replica && before && sinceLast < before.ttl - 500) {
        const holderRunning = this.running.get(before.replica)?.at(-1)?.running ?? false;
        this.deletions.push({ id: sb.id, holder: before.replica, fence: before.fence, atMs: now, holderRunning });
      }
      if (!rec.replica) {
        if (!this.missingSince.has(sb.id)) this.missingSince.set(sb.id, now);
        this.noteGap(sb.id, now - this.missingSince.get(sb.id)!);
        return;
      }
      const since = this.missingSince.get(sb.id);
      if (since !== undefined) {
        this.noteGap(sb.id, now - since);
        this.missingSince.delete(sb.id);
      }
      const claim = `${sb.id}|${rec.replica}|${rec.fence}`;
      if (!this.firstSeen.has(claim)) this.firstSeen.set(claim, now);
      const inc = this.incarnation.get(rec.replica);
      if (!inc) return this.violate(`unknown:${claim}`, `${sb.id}: owner record names '${rec.replica}', which this cluster never ran`);
      if (inc.pid === null && now - inc.since > late) {
        return this.violate(`dead:${claim}`, `${sb.id}: owner record names ${rec.replica}, dead for ${((now - inc.since) / 1000).toFixed(1)} s`);
      }
      if (inc.pid !== null && this.firstSeen.get(claim)! < inc.since && now - inc.since > late) {
        this.violate(`stale:${claim}`, `${sb.id}: owner record (fence ${rec.fence}) was claimed by an earlier incarnation of ${rec.replica}, not pid ${inc.pid}`);
      }
    });
  }
}

await main();
