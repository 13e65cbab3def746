// The chaos suite: three replicas behind haproxy, a mixed workload through the load balancer,
// and replicas killed (SIGKILL), frozen (SIGSTOP) and drained (SIGTERM) at random, plus one Redis
// restart and one long freeze of the busiest owner (its supervisors move away meanwhile). At the end it checks sandgate's promises and prints them with counts; exit 1 if any
// invariant fails. Bounded in time, loopback only, seeded for reproducibility.
//
//   npm run chaos -- [--duration 300] [--seed 42] [--workers 6]
//   SANDGATE_DEBUG_DISABLE_FENCING=1 / SANDGATE_DEBUG_DISABLE_JOBS=1 (or --no-fencing / --no-jobs)
//   make the replicas drop a safety mechanism, so the run must fail: proof the checks can fail.
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import os from 'node:os';
import { parseArgs } from 'node:util';
import type { ServiceError } from '@grpc/grpc-js';
import { SandboxPhase } from '@sandgate/protocols';
import { keys, SandboxStore } from '@sandgate/store';
import { Cluster, runCli } from '../test/harness/cluster.ts';
import { startHaproxy } from '../test/harness/haproxy.ts';
import { freePort } from '../test/harness/ports.ts';
import { startRedis } from '../test/harness/redis.ts';
import { openShellClient, unaryCall, type AnyClient } from '../test/harness/grpc-client.ts';
import { pidsMatching } from '../test/harness/sandbox.ts';
import { sleep, waitFor } from '../test/harness/wait.ts';
import { Ledger, classifyError } from './chaos/ledger.ts';
import { between, pick, seeded } from './chaos/rng.ts';
import { summarise, table } from './stats.ts';

const { values } = parseArgs({
  options: {
    duration: { type: 'string', default: '300' },
    seed: { type: 'string', default: String(Date.now() % 100000) },
    workers: { type: 'string', default: '6' },
    'no-fencing': { type: 'boolean', default: false },
    'no-jobs': { type: 'boolean', default: false },
  },
});
const durationMs = Number(values.duration) * 1000;
const seed = Number(values.seed);
const workers = Number(values.workers);
const noFencing = values['no-fencing'] || process.env.SANDGATE_DEBUG_DISABLE_FENCING === '1';
const noJobs = values['no-jobs'] || process.env.SANDGATE_DEBUG_DISABLE_JOBS === '1';
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
/**
 * SSH: the proxy notices its ssh client died (stdin closed), the relay hops close, and the
 * supervisor kills the channel's processes; a frozen replica on the path is noticed by the peer
 * link's silence limit instead.
 */
const SSH_KILL_SLACK_MS = 10_000;

interface SshResult {
  code: number | null;
  stdout: string;
  stderr: string;
  /** We killed the client on purpose (kill -9 after `killAfterMs`). */
  killed: boolean;
  /** The client was still running at the call deadline. */
  hung: boolean;
}

/** Runs one command over real OpenSSH; optionally kill -9s the client after `killAfterMs`. */
function runSsh(config: string, host: string, command: string, killAfterMs?: number): Promise<SshResult> {
  return new Promise((resolve) => {
    const proc = spawn('ssh', ['-F', config, '-o', 'ConnectTimeout=20', host, command], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let killed = false;
    let hung = false;
    proc.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    proc.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const killer = killAfterMs
      ? setTimeout(() => {
          killed = proc.exitCode === null;
          proc.kill('SIGKILL');
        }, killAfterMs)
      : undefined;
    const deadline = setTimeout(() => {
      hung = true;
      proc.kill('SIGKILL');
    }, CALL_DEADLINE_MS);
    proc.on('close', (code) => {
      clearTimeout(killer);
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
  console.log(`chaos: seed=${seed} duration=${durationMs / 1000}s workers=${workers}${noFencing ? ' FENCING DISABLED' : ''}${noJobs ? ' JOBS DISABLED' : ''}`);
  const redis = await startRedis({ persistent: true });
  const r = redis.client();
  const lbPort = await freePort();
  const cluster = await Cluster.start({
    redisUrl: redis.url,
    replicas: 3,
    supervisorEndpoint: `127.0.0.1:${lbPort}`,
    env: {
      SANDGATE_LOG_LEVEL: 'info',
      ...(noFencing ? { SANDGATE_DEBUG_DISABLE_FENCING: '1' } : {}),
      ...(noJobs ? { SANDGATE_DEBUG_DISABLE_JOBS: '1' } : {}),
    },
  });
  const lb = await startHaproxy(lbPort, cluster.replicas.map((x) => ({ name: x.id, grpcPort: x.grpcPort, httpPort: x.httpPort })));
  // Several client channels, so the balancer spreads them over the replicas.
  const clients = Array.from({ length: 4 }, () => openShellClient(lb.address));
  const client = () => pick(rng, clients);
  const store = new SandboxStore(r);

  const stopAt = t0 + durationMs;
  let seq = 0;
  const ephemeralIds: string[] = [];
  const pendingChecks: Promise<void>[] = [];
  const failovers: number[] = [];
  let sshDir = '';

  try {
    // A pool of long-lived sandboxes the execs go to.
    const pool: { id: string; name: string }[] = [];
    for (let i = 0; i < POOL_SIZE; i++) {
      const res = await unaryCall<{ sandbox: { metadata: { id: string; name: string } } }>(clients[0]!, 'CreateSandbox', {
        name: `pool-${i}`,
        spec: { command: ['sleep', 'infinity'] },
      });
      pool.push({ id: res.sandbox.metadata.id, name: res.sandbox.metadata.name });
    }
    for (const p of pool) {
      await waitFor(`pool sandbox ${p.name} ready`, async () => (await store.get(p.id))?.sandbox.status?.phase === SandboxPhase.READY, 30_000);
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

    const ops: Record<string, () => Promise<void>> = {
      async exec() {
        const token = `tok${++seq}`;
        const sb = pick(rng, pool);
        const res = await exec(client(), { sandbox_id: sb.id, command: ['sh', '-c', 'echo "$0"', token] });
        if (res.error) return ledger.record('exec', ...tuple(classifyError(res.error, res.deadlineHit)));
        if (res.exit === 0 && res.stdout === `${token}\n`) return ledger.record('exec', 'ok');
        ledger.record('exec', 'wrong', `exit ${res.exit} stdout ${JSON.stringify(res.stdout.slice(0, 80))}`);
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
        // end must take every process of the channel with it.
        const n = marker(++seq);
        const sb = pick(rng, pool);
        const res = await runSsh(sshConfigs.get(sb.name)!, `sandgate-${sb.name}`, `sleep 603.${n} & sleep 604.${n}; echo late`, 2_500);
        expectGone(`603.${n}`, Date.now() + SSH_KILL_SLACK_MS, `dropped ssh ${n}`);
        expectGone(`604.${n}`, Date.now() + SSH_KILL_SLACK_MS, `dropped ssh ${n}`);
        if (res.killed) return ledger.record('ssh-drop', 'ok');
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
    const weights: [string, number][] = [
      ['exec', 5],
      ['exec-timeout', 2],
      ['exec-cancel', 1],
      ['interactive', 2],
      ['ephemeral', 1],
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
    const chaos = (async () => {
      let redisRestarted = false;
      let longFreezeDone = false;
      let terminated = false;
      while (Date.now() < stopAt - 15_000) {
        await sleep(between(rng, 4_000, 7_000));
        if (Date.now() >= stopAt - 15_000) break;
        if (!redisRestarted && Date.now() - t0 > durationMs * 0.4) {
          redisRestarted = true;
          console.log(`[${secs(t0)}] restart redis`);
          await redis.restart();
          continue;
        }
        if (!longFreezeDone && Date.now() - t0 > durationMs * 0.6) {
          // The replica holding the most sessions stalls (a GC pause, a VM migration) long enough
          // for its supervisors to give up on it and claim anew elsewhere; then it wakes up still
          // believing it owns them. Only fencing keeps its stale renewals and releases from
          // clobbering the new owners' records.
          longFreezeDone = true;
          const counts = await Promise.all(cluster.replicas.map((rep) => ownedBy(r, pool, rep.id)));
          const busiest = counts.reduce((best, c, i) => (c.length > counts[best]!.length ? i : best), 0);
          const proc = cluster.replicas[busiest]!.proc;
          if (proc && proc.exitCode === null) {
            console.log(`[${secs(t0)}] SIGSTOP ${cluster.replicas[busiest]!.id} for ${LONG_FREEZE_MS / 1000} s (owns ${counts[busiest]!.length} pool sandboxes)`);
            proc.kill('SIGSTOP');
            await sleep(LONG_FREEZE_MS);
            proc.kill('SIGCONT');
          }
          continue;
        }
        const victim = Math.floor(rng() * cluster.replicas.length);
        const owned = await ownedBy(r, pool, cluster.replicas[victim]!.id);
        const roll = rng();
        if (roll < 0.15 && !terminated) {
          terminated = true;
          console.log(`[${secs(t0)}] SIGTERM ${cluster.replicas[victim]!.id}`);
          await cluster.signal(victim, 'SIGTERM');
        } else if (roll < 0.35) {
          console.log(`[${secs(t0)}] SIGSTOP ${cluster.replicas[victim]!.id} for 4 s`);
          const proc = cluster.replicas[victim]!.proc!;
          proc.kill('SIGSTOP');
          await sleep(4_000);
          proc.kill('SIGCONT');
          continue;
        } else {
          console.log(`[${secs(t0)}] SIGKILL ${cluster.replicas[victim]!.id} (owns ${owned.length} pool sandboxes)`);
          await cluster.signal(victim, 'SIGKILL');
        }
        const diedAt = Date.now();
        // Failover: time until each of its sandboxes answers an exec again, through the balancer.
        for (const sb of owned) {
          pendingChecks.push(
            (async () => {
              for (;;) {
                const res = await exec(clients[0]!, { sandbox_id: sb.id, command: ['true'] });
                if (!res.error && res.exit === 0) return void failovers.push(Date.now() - diedAt);
                if (Date.now() - diedAt > 30_000) return ledger.violate('failover', `${sb.name} unreachable for 30 s`);
                await sleep(50);
              }
            })(),
          );
        }
        await sleep(between(rng, 1_000, 2_000));
        await cluster.startReplica(victim);
      }
    })();

    await Promise.all([...workload, chaos]);
    // Everything back up; then give durable work time to finish.
    for (let i = 0; i < cluster.replicas.length; i++) if (!cluster.replicas[i]!.proc) await cluster.startReplica(i);
    console.log(`[${secs(t0)}] workload done; quiescing`);
    await Promise.all(pendingChecks);
    // Long enough for the reconcile sweep (every 10 s) to finish a create interrupted by a crash
    // (it waits 30 s after the create) and for every cleanup job to run.
    await sleep(45_000);

    // ---- invariants ----------------------------------------------------------------------------
    const results: [string, boolean, string][] = [];
    // Only this run's markers (other processes on the machine may run sleeps of their own).
    const leftovers = await countMatching(/sleep 60[0-4]\.\d{7}/);
    const outlived = ledger.violations.filter((v) => v.kind === 'process outlived its exec').length;
    results.push(['no process of an exec or SSH channel outlives its deadline, cancel or connection', outlived === 0 && leftovers === 0, `${outlived} late, ${leftovers} left at the end`]);

    // An ephemeral sandbox whose main process never ran (its launch failed) stays, in Error, for
    // the user to see why; every one whose main process finished must be gone.
    let ephemeralLeft = 0;
    let neverRan = 0;
    for (const id of ephemeralIds) {
      const rec = await store.get(id);
      const reason = rec?.sandbox.status?.conditions?.[0]?.reason;
      if (rec && (reason === 'ComputeFailed' || reason === 'ProvisioningTimeout')) neverRan++;
      else if (rec || existsSync(`${cluster.stateDir}/sandboxes/${id}`)) ephemeralLeft++;
    }
    results.push([
      'every finished ephemeral sandbox is deleted',
      ephemeralLeft === 0,
      `${ephemeralIds.length - ephemeralLeft - neverRan}/${ephemeralIds.length - neverRan} deleted${neverRan ? ` (${neverRan} never launched)` : ''}`,
    ]);

    const records = await store.list();
    const recordIds = new Set(records.map((x) => x.sandbox.metadata!.id!));
    const dirs = existsSync(`${cluster.stateDir}/sandboxes`) ? readdirSync(`${cluster.stateDir}/sandboxes`) : [];
    const orphans = dirs.filter((d) => !recordIds.has(d));
    results.push(['no compute without a record', orphans.length === 0, `${orphans.length} orphaned of ${dirs.length}`]);

    const stuck = records.filter((x) => [1, 4, 6, 8].includes(x.sandbox.status?.phase ?? 0));
    results.push(['no record stuck in a transitional phase', stuck.length === 0, `${stuck.length} of ${records.length} (${stuck.map((s) => s.sandbox.metadata?.name).join(',')})`]);

    let deadOwners = 0;
    const ownerKeys = await r.keys('sg:own:*');
    for (const k of ownerKeys) {
      const replica = await r.hget(k, 'replica');
      if (!replica || !(await r.exists(keys.replica(replica)))) deadOwners++;
    }
    results.push(['no owner key names a dead replica', deadOwners === 0, `${deadOwners} of ${ownerKeys.length}`]);

    // Every pool sandbox answers through every replica at the end.
    let unreachable = 0;
    for (const sb of pool) {
      for (const rep of cluster.replicas) {
        const c = openShellClient(rep.grpcAddress);
        const res = await exec(c, { sandbox_id: sb.id, command: ['true'] });
        c.close();
        if (res.error || res.exit !== 0) unreachable++;
      }
    }
    results.push(['every live sandbox is reachable through every replica', unreachable === 0, `${unreachable} failures of ${pool.length * cluster.replicas.length}`]);

    const callViolations = ledger.violations.filter((v) => v.kind.endsWith(': wrong') || v.kind.endsWith(': hang') || v.kind.startsWith('op '));
    results.push(['every call succeeded or failed with UNAVAILABLE; no wrong result, no hang', callViolations.length === 0, `${callViolations.length} violations`]);
    const failoverViolations = ledger.violations.filter((v) => v.kind === 'failover').length;
    const fo = summarise(failovers);
    results.push(['sandboxes of a dead replica are reachable again', failoverViolations === 0, `n=${fo.n} p50=${fo.p50.toFixed(0)} ms p99=${fo.p99.toFixed(0)} ms, ${failoverViolations} never`]);

    console.log('\ncalls');
    console.log(table(['call', 'ok', 'UNAVAILABLE', 'wrong', 'hang'], [...ledger.counts].map(([k, c]) => [k, c.ok, c.retriable, c.wrong, c.hang])));
    if (ledger.retriableMessages.size) {
      console.log('\nUNAVAILABLE messages');
      console.log(table(['message', 'count'], [...ledger.retriableMessages].sort((a, b) => b[1] - a[1]).slice(0, 10).map(([m, n]) => [m, n])));
    }
    console.log('\ninvariants');
    console.log(table(['invariant', 'result', 'detail'], results.map(([name, ok, detail]) => [name, ok ? 'PASS' : 'FAIL', detail])));
    for (const v of ledger.violations.slice(0, 20)) console.log(`violation @${(v.atMs / 1000).toFixed(1)}s ${v.kind}: ${v.detail}`);
    const passed = results.every(([, ok]) => ok);
    if (!passed) {
      // Keep what explains the failure: every replica's log and every supervisor's log.
      const dir = `${os.tmpdir()}/sandgate-chaos-${seed}-${Date.now()}`;
      mkdirSync(dir, { recursive: true });
      for (const rep of cluster.replicas) writeFileSync(`${dir}/${rep.id}.log`, rep.logs.join(''));
      if (existsSync(`${cluster.stateDir}/sandboxes`)) cpSync(`${cluster.stateDir}/sandboxes`, `${dir}/sandboxes`, { recursive: true });
      console.log(`logs kept in ${dir}`);
    }
    console.log(`\nchaos ${passed ? 'PASSED' : 'FAILED'} (seed ${seed}, ${((Date.now() - t0) / 1000).toFixed(0)} s)`);
    process.exitCode = passed ? 0 : 1;

    // Clean up: delete what is left.
    for (const rec of await store.list()) {
      await unaryCall(clients[0]!, 'DeleteSandbox', { name: rec.sandbox.metadata!.name }).catch(() => undefined);
    }
  } finally {
    if (sshDir) rmSync(sshDir, { recursive: true, force: true });
    for (const c of clients) c.close();
    await lb.stop();
    await cluster.stop();
    cluster.cleanup();
    await redis.stop();
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
function marker(n: number): string {
  return String(n).padStart(7, '0');
}

function tuple(x: { outcome: 'ok' | 'retriable' | 'wrong' | 'hang'; detail: string }): ['ok' | 'retriable' | 'wrong' | 'hang', string] {
  return [x.outcome, x.detail];
}

function secs(t0: number): string {
  return `${((Date.now() - t0) / 1000).toFixed(1)}s`;
}

async function ownedBy(r: import('ioredis').Redis, pool: { id: string; name: string }[], replicaId: string) {
  const out: { id: string; name: string }[] = [];
  for (const sb of pool) if ((await r.hget(keys.owner(sb.id), 'replica')) === replicaId) out.push(sb);
  return out;
}

await main();
