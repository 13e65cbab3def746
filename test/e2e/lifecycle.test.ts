// Issue 4 acceptance: one lifecycle, one access rule, the same answer from every replica.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { status as grpcStatus } from '@grpc/grpc-js';
import { Queue } from 'bullmq';
import { QUEUE_NAME, jobIds } from '@sandgate/jobs';
import { ClusterCounter, jobQueueFor, keysFor, SandboxFeed, SandboxStore, type RedisClient } from '@sandgate/store';
import { Phase } from '@sandgate/core';
import { Cluster, runCli } from '../harness/cluster.ts';
import { startRedis, type TestRedis } from '../harness/redis.ts';
import { openShellClient, unaryCall, type AnyClient } from '../harness/grpc-client.ts';
import { createSandbox, deleteAllSandboxes, killSupervisor, ownerOf } from '../harness/sandbox.ts';
import { waitFor } from '../harness/wait.ts';

let redis: TestRedis;
let r: RedisClient;
let cluster: Cluster;

beforeAll(async () => {
  redis = await startRedis();
  r = redis.client();
  cluster = await Cluster.start({ redisUrl: redis.url, replicas: 3 });
});

afterAll(async () => {
  // Leave nothing behind: delete whatever the tests left.
  if (cluster) await deleteAllSandboxes(gw(0));
  await cluster?.stop();
  cluster?.cleanup();
  await redis?.stop();
});

const gw = (i: number) => cluster.replicas[i]!.grpcAddress;
const replicaIndex = (id: string) => cluster.replicas.findIndex((x) => x.id === id);

interface SandboxJson {
  metadata: { id: string; name: string };
  status: { phase: string; exitCode?: number; mainProcessInstanceId?: string; conditions?: { reason?: string }[] };
}

async function getJson(name: string, via = 0): Promise<SandboxJson | null> {
  const res = await runCli(['sandbox', 'get', name, '-o', 'json'], { gateway: gw(via) });
  if (res.code !== 0) return null;
  return JSON.parse(res.stdout.toString()) as SandboxJson;
}

async function computeGone(sandboxId: string): Promise<boolean> {
  const { existsSync } = await import('node:fs');
  return !existsSync(`${cluster.stateDir}/sandboxes/${sandboxId}`);
}

describe('ephemeral sandboxes', () => {
  for (const [label, cmd] of [
    ['exit 0', ['/bin/true']],
    ['exit 3', ['sh', '-c', 'exit 3']],
  ] as const) {
    it(`are deleted without a CLI delete while the supervisor is connected (${label})`, async () => {
      const before = Number((await r.get(keysFor(r).counter(ClusterCounter.ephemeralDeletedWhileConnected))) ?? 0);
      const name = `eph-${label.replace(' ', '')}`;
      const t0 = Date.now();
      const res = await runCli(['sandbox', 'create', '--name', name, '--no-keep', '--detach', '-o', 'json', '--', ...cmd], { gateway: gw(1) });
      expect(res.code, res.stderr).toBe(0);
      const id = (JSON.parse(res.stdout.toString()) as SandboxJson).metadata.id;
      await waitFor('record and compute gone', async () => (await getJson(name, 2)) === null && (await computeGone(id)), 10_000, 100);
      expect(Date.now() - t0).toBeLessThan(10_000);
      // The deletion began while the supervisor session was still live: no disconnect needed first.
      expect(Number(await r.get(keysFor(r).counter(ClusterCounter.ephemeralDeletedWhileConnected)))).toBe(before + 1);
      expect(await r.exists(keysFor(r).sandbox(id), keysFor(r).owner(id))).toBe(0);
    });
  }

  it('are still deleted when the owner replica is killed right after the exit report', async () => {
    const name = 'eph-crash';
    const res = await runCli(['sandbox', 'create', '--name', name, '--no-keep', '--detach', '-o', 'json', '--', 'sh', '-c', 'sleep 2; exit 0'], {
      gateway: gw(0),
    });
    expect(res.code, res.stderr).toBe(0);
    const id = (JSON.parse(res.stdout.toString()) as SandboxJson).metadata.id;
    const owner = replicaIndex(await ownerOf(r, id));
    // The exit report is durable the moment the phase leaves Ready: kill the owner right then.
    // The crash window is "exit recorded, record not deleted yet": the wait must see exactly that
    // (a record in a post-exit phase), or the test proves nothing and fails.
    // Polled straight from Redis: the window lasts milliseconds, a CLI call per poll would miss it.
    const store = new SandboxStore(r);
    const phaseAtCrash = await waitFor('exit recorded, record still there', async () => {
      const phase = (await store.get(id))?.sandbox.status?.phase;
      return phase !== undefined && phase !== Phase.READY && phase !== Phase.PROVISIONING ? phase : undefined;
    }, 30_000, 2);
    expect([Phase.COMPLETED, Phase.DELETING]).toContain(phaseAtCrash);
    await cluster.signal(owner, 'SIGKILL');
    await waitFor('ephemeral sandbox deleted after owner crash', async () => (await getJson(name, (owner + 1) % 3)) === null && (await computeGone(id)), 30_000, 250);
    await cluster.startReplica(owner);
  });
  it('are deleted when their compute vanished while the record still said Ready (a failover that lost their exit and delete)', async () => {
    // After a Redis failover, a finished ephemeral sandbox can come back as its older record
    // (Ready) while the cleanup that deleted its compute is lost with the old primary. Here: the
    // owner is frozen, so nothing writes the supervisor's end, and the supervisor is killed.
    const name = 'eph-vanished';
    const res = await runCli(['sandbox', 'create', '--name', name, '--no-keep', '--detach', '-o', 'json', '--', 'sleep', 'infinity'], { gateway: gw(0) });
    expect(res.code, res.stderr).toBe(0);
    const id = (JSON.parse(res.stdout.toString()) as SandboxJson).metadata.id;
    const store = new SandboxStore(r);
    await waitFor('Ready', async () => (await store.get(id))?.sandbox.status?.phase === Phase.READY, 30_000, 100);
    const owner = replicaIndex(await ownerOf(r, id));
    // Everything that happens to it from here, in order: its snapshots and its log lines.
    const feed = new SandboxFeed(r);
    const follower = feed.follow(id, (await feed.start(id, 0))!.from, { logs: true });
    const ownerProc = cluster.replicas[owner]!.proc!;
    ownerProc.kill('SIGSTOP');
    const seen: string[] = [];
    try {
      expect(await killSupervisor(id)).toBe(1);
      // The sweep (another replica's worker) finds the compute gone under a Ready record, marks
      // it ComputeVanished, and the ephemeral sandbox goes: record and compute.
      const deadline = Date.now() + 45_000;
      while (!seen.includes('deleted')) {
        if (Date.now() > deadline) throw new Error(`not deleted within 45 s; saw ${JSON.stringify(seen)}`);
        for (const e of await follower.next(1_000)) {
          if (e.kind === 'log') seen.push(`log: ${e.line.message}`);
          else if (e.event.kind === 'deleted') seen.push('deleted');
          else seen.push(`${e.event.sandbox.status?.phase === Phase.ERROR ? 'Error' : 'phase ' + String(e.event.sandbox.status?.phase)} ${e.event.sandbox.status?.conditions?.[0]?.reason ?? ''}`);
        }
      }
    } finally {
      ownerProc.kill('SIGCONT');
      follower.close();
    }
    expect(seen).toContain('Error ComputeVanished');
    expect(seen).toContain('log: sandbox compute vanished');
    expect(seen.indexOf('Error ComputeVanished')).toBeLessThan(seen.indexOf('deleted'));
    expect(await store.get(id)).toBeNull();
    await waitFor('compute gone', () => computeGone(id), 15_000, 100);
    expect(await getJson(name, (owner + 1) % 3)).toBeNull();
  });
});

describe('retained sandboxes and the access rule', () => {
  for (const [label, cmd, phase, code] of [
    ['exit 0', ['/bin/true'], 'SANDBOX_PHASE_COMPLETED', 0],
    ['exit 3', ['sh', '-c', 'exit 3'], 'SANDBOX_PHASE_ERROR', 3],
  ] as const) {
    it(`${label}: ${phase}, exec works through every replica, and is refused once the supervisor is gone`, async () => {
      const name = `keep-${code}`;
      const res = await runCli(['sandbox', 'create', '--name', name, '--detach', '--', ...cmd], { gateway: gw(0) });
      expect(res.code, res.stderr).toBe(0);
      const sb = await waitFor('main process result', async () => {
        const s = await getJson(name);
        return s?.status.phase === phase ? s : undefined;
      });
      expect(sb.status.exitCode ?? 0).toBe(code);
      if (code !== 0) expect(sb.status.conditions?.[0]?.reason).toBe('MainProcessFailed');
      for (let i = 0; i < 3; i++) {
        const ex = await runCli(['sandbox', 'exec', name, '--', 'cat', '/proc/1/cmdline'], { gateway: gw(i) });
        expect(ex.code, `replica ${i}: ${ex.stderr}`).toBe(0);
      }
      // The supervisor dies: from then on no replica may let anyone in.
      expect(await killSupervisor(sb.metadata.id)).toBe(1);
      for (let i = 0; i < 3; i++) {
        await waitFor(`refusal through replica ${i}`, async () => {
          const ex = await runCli(['sandbox', 'exec', name, '--', 'true'], { gateway: gw(i) });
          return ex.code === 1 && ex.stderr.includes('FAILED_PRECONDITION') && ex.stderr.includes('sandbox is not ready');
        }, 15_000, 200);
      }
    });
  }

  it('attached create prints all the output, then exits with the main process code', async () => {
    const res = await runCli(['sandbox', 'create', '--name', 'attached', '--', 'sh', '-c', 'seq 1 100000; exit 5'], { gateway: gw(1) });
    const lines = res.stdout.toString().trimEnd().split('\n');
    expect(lines).toHaveLength(100000);
    expect(lines[0]).toBe('1');
    expect(lines[99999]).toBe('100000');
    expect(res.code).toBe(5);
  });
});

describe('stop and start', () => {
  it('stop refuses exec; start makes a new run with a new instance id', async () => {
    const sb = await createSandbox(gw(0), 'stopstart');
    const before = (await getJson('stopstart'))!.status.mainProcessInstanceId;
    await runCli(['sandbox', 'exec', 'stopstart', '--', 'sh', '-c', 'echo kept > /sandbox/file'], { gateway: gw(1) });
    const stop = await runCli(['sandbox', 'stop', 'stopstart'], { gateway: gw(2) });
    expect(stop.code, stop.stderr).toBe(0);
    expect((await getJson('stopstart'))!.status.phase).toBe('SANDBOX_PHASE_STOPPED');
    const refused = await runCli(['sandbox', 'exec', 'stopstart', '--', 'true'], { gateway: gw(1) });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('sandbox is not ready');
    const start = await runCli(['sandbox', 'start', 'stopstart'], { gateway: gw(1) });
    expect(start.code, start.stderr).toBe(0);
    const after = (await getJson('stopstart'))!;
    expect(after.status.phase).toBe('SANDBOX_PHASE_READY');
    expect(after.status.mainProcessInstanceId).toBeTruthy();
    expect(after.status.mainProcessInstanceId).not.toBe(before);
    const file = await runCli(['sandbox', 'exec', 'stopstart', '--', 'cat', '/sandbox/file'], { gateway: gw(0) });
    expect(file.stdout.toString()).toBe('kept\n');
    expect(sb.id).toBe(after.metadata.id);
  });

  it('start on a Ready sandbox changes nothing: same run, same instance, same compute, no error', async () => {
    const client = openShellClient(gw(0));
    const sb = await createSandbox(gw(0), 'startready');
    await waitFor('Ready', async () => (await getJson('startready'))?.status.phase === 'SANDBOX_PHASE_READY', 30_000);
    const before = (await getJson('startready'))!;
    const [runBefore, computeBefore] = await r.hmget(keysFor(r).sandbox(sb.id), 'runstart', 'compute');
    const err = (await unaryCall(client, 'StartSandbox', { name: 'startready' }).then(() => null, (e: unknown) => e)) as { code: number; details: string } | null;
    client.close();
    expect(err).toBeNull();
    const after = (await getJson('startready'))!;
    const [runAfter, computeAfter] = await r.hmget(keysFor(r).sandbox(sb.id), 'runstart', 'compute');
    expect(after.status.phase).toBe('SANDBOX_PHASE_READY');
    expect(after.status.mainProcessInstanceId).toBeTruthy();
    expect(after.status.mainProcessInstanceId).toBe(before.status.mainProcessInstanceId);
    expect(runAfter).toBe(runBefore);
    expect(computeAfter).toBe(computeBefore);
    // The same supervisor session still serves it: exec works without a reconnect.
    const echo = await runCli(['sandbox', 'exec', 'startready', '--', 'echo', 'same'], { gateway: gw(1) });
    expect(echo.stdout.toString()).toBe('same\n');
  });
});

describe('restart policies', () => {
  interface Status {
    phase?: number;
    restart_count?: number;
    exit_code?: number;
  }
  const status = async (client: AnyClient, name: string): Promise<Status> =>
    ((await unaryCall<{ sandbox: { status?: Status } }>(client, 'GetSandbox', { name })).sandbox.status ?? {});
  const COMPLETED = 9;

  /** Creates `name` with `policy` (2 on-failure, 3 always) running `sh -c 'sleep 0.5; exit CODE'`. */
  async function create(client: AnyClient, name: string, policy: number, code: number): Promise<number> {
    await unaryCall(client, 'CreateSandbox', { name, spec: { command: ['sh', '-c', `sleep 0.5; exit ${code}`], restart_policy: policy } });
    return Date.now();
  }

  /** Times (ms since `createdAt`) at which each sandbox's restart_count first reached 1, 2, …, `n`. */
  async function restartTimesOf(client: AnyClient, names: string[], createdAt: number, n: number): Promise<Map<string, number[]>> {
    const seen = new Map<string, Status>();
    const times = new Map<string, number[]>(names.map((name) => [name, []]));
    await waitFor(`${names.join(', ')}: ${n} restarts`, async () => {
      for (const name of names) {
        const s = await status(client, name);
        seen.set(name, s);
        const t = times.get(name)!;
        while (t.length < Math.min(s.restart_count ?? 0, n)) t.push(Date.now() - createdAt);
      }
      return names.every((name) => times.get(name)!.length >= n);
    }, 60_000, 50).catch((err: unknown) => {
      throw new Error(`${String(err)}:\n${names.map((name) => `${name} ${JSON.stringify(seen.get(name))}`).join('\n')}`);
    });
    return times;
  }

  const restartTimes = async (client: AnyClient, name: string, createdAt: number, n: number): Promise<number[]> =>
    (await restartTimesOf(client, [name], createdAt, n)).get(name)!;

  it('on-failure: a non-zero exit restarts with growing backoff (1 s, then 2 s)', async () => {
    const client = openShellClient(gw(0));
    const createdAt = await create(client, 'restart-onfail', 2, 3);
    const [first, second] = await restartTimes(client, 'restart-onfail', createdAt, 2);
    // Each run lives ≥ 0.5 s; the backoff after run k is 2^(k-1) s.
    expect(first!).toBeGreaterThanOrEqual(500 + 1000);
    expect(second! - first!).toBeGreaterThanOrEqual(500 + 2000);
    client.close();
  });

  it('on-failure: exit 0 completes and is not restarted', async () => {
    const client = openShellClient(gw(1));
    await create(client, 'restart-onfail-ok', 2, 0);
    await waitFor('Completed', async () => (await status(client, 'restart-onfail-ok')).phase === COMPLETED, 30_000);
    // Longer than the first backoff (1 s): a restart would have happened by now.
    const completedAt = Date.now();
    await waitFor('first backoff passed', () => Date.now() - completedAt > 3_000, 5_000);
    const s = await status(client, 'restart-onfail-ok');
    expect(s.restart_count ?? 0).toBe(0);
    expect(s.phase).toBe(COMPLETED);
    client.close();
  });

  it('always: even exit 0 restarts, with backoff; six at once, a restart while the first launch is still watched is not taken for a failed launch', async () => {
    // The second half is a CI failure of this test: the first run's launch watch (checks at 0.3,
    // 1, 2, 4 … s, while the phase says Provisioning or Starting) saw the restart's Starting
    // phase, inspected the old run's compute (just stopped by the restart) and marked the new run
    // ComputeFailed; nothing restarted it after that. Six sandboxes at once keep the first
    // supervisors slow to connect, so the watch is still running, and their runs' lengths are
    // spread so that the restarts fall across its checks.
    const client = openShellClient(gw(2));
    const names = Array.from({ length: 6 }, (_, i) => `restart-always-${i}`);
    const createdAt = Date.now();
    await Promise.all(
      names.map((name, i) =>
        // 0.5 … 1.0 s (`0.${5 + i}` made the sixth `sleep 0.10`, shorter than the bound below
        // assumes: a CI run measured 2434 ms between its restarts, against ≥ 2500).
        unaryCall(client, 'CreateSandbox', { name, spec: { command: ['sh', '-c', `sleep ${(0.5 + i / 10).toFixed(1)}; exit 0`], restart_policy: 3 } }),
      ),
    );
    const times = await restartTimesOf(client, names, createdAt, 2);
    for (const name of names) {
      const [first, second] = times.get(name)!;
      // Each run lives ≥ 0.5 s; the backoff after run k is 2^(k-1) s.
      expect(first!, name).toBeGreaterThanOrEqual(500 + 1000);
      expect(second! - first!, name).toBeGreaterThanOrEqual(500 + 2000);
    }
    for (const name of names) await unaryCall(client, 'DeleteSandbox', { name });
    client.close();
  });

  it('a restart whose job was lost (as a Redis failover can lose it) still happens: the reconcile sweep enqueues it again', async () => {
    // The queue paused, no worker takes the restart job; it is removed before anything ran it,
    // as a failover that lost BullMQ's write would. Only the sweep can restart the sandbox now.
    const queue = new Queue(QUEUE_NAME, { connection: r, prefix: jobQueueFor(r).prefix });
    await queue.pause();
    try {
      const client = openShellClient(gw(0));
      await create(client, 'restart-lost', 2, 3);
      const sb = await waitFor('the exit, with a restart due', async () => {
        const got = (await unaryCall<{ sandbox: { metadata: { id: string }; status?: Status & { next_restart_at_ms?: number | string; main_process_instance_id?: string } } }>(client, 'GetSandbox', { name: 'restart-lost' })).sandbox;
        return Number(got.status?.next_restart_at_ms ?? 0) > 0 ? got : undefined;
      }, 30_000);
      const jobId = jobIds.restart(sb.metadata.id, sb.status!.main_process_instance_id!);
      expect(await queue.remove(jobId)).toBe(1);
      await queue.resume();
      // Due 1 s after the exit; taken for lost RESTART_OVERDUE_MS (10 s) later, at a sweep (every 10 s).
      const [first] = await restartTimes(client, 'restart-lost', Date.now(), 1);
      expect(first).toBeDefined();
      client.close();
    } finally {
      await queue.resume();
      await queue.close();
    }
  });
});

describe('restart policies without the durable restart job (the `jobs` debug fault)', () => {
  // The companion of the restart-policy tests above: with the mechanism they exercise (the
  // durable `restart` job) switched off, the same on-failure sandbox is never restarted, so their
  // decisive assertion, restart_count rising with backoff, fails without it.
  let redis2: TestRedis;
  let cluster2: Cluster;
  beforeAll(async () => {
    redis2 = await startRedis();
    cluster2 = await Cluster.start({ redisUrl: redis2.url, replicas: 1, env: { SANDGATE_DEBUG_BREAK: 'jobs', SANDGATE_DEBUG_UNSAFE: '1' } });
  });
  afterAll(async () => {
    await runCli(['sandbox', 'delete', 'restart-nojobs'], { gateway: cluster2?.replicas[0]!.grpcAddress }).catch(() => undefined);
    await cluster2?.stop();
    cluster2?.cleanup();
    await redis2?.stop();
  });

  it('on-failure: a non-zero exit is not restarted', async () => {
    const client = openShellClient(cluster2.replicas[0]!.grpcAddress);
    const status = async () =>
      ((await unaryCall<{ sandbox: { status?: { phase?: number; restart_count?: number } } }>(client, 'GetSandbox', { name: 'restart-nojobs' })).sandbox
        .status ?? {});
    await unaryCall(client, 'CreateSandbox', { name: 'restart-nojobs', spec: { command: ['sh', '-c', 'sleep 0.5; exit 3'], restart_policy: 2 } });
    await waitFor('Error (MainProcessFailed)', async () => (await status()).phase === Phase.ERROR, 30_000);
    const failedAt = Date.now();
    // Past the first two backoffs (1 s, then 2 s) with slack: the tests above saw two restarts by now.
    await waitFor('the first two backoffs passed', () => Date.now() - failedAt > 6_000, 8_000);
    const s = await status();
    expect(s.restart_count ?? 0).toBe(0);
    expect(s.phase).toBe(Phase.ERROR);
    client.close();
  });
});

describe('watch across replicas', () => {
  it('a watcher on replica A sees every phase change driven through replica C, in order', async () => {
    const sb = await createSandbox(gw(2), 'watched');
    const client = openShellClient(gw(0));
    const phases: number[] = [];
    const ended = new Promise<void>((resolve, reject) => {
      const call = client.WatchSandbox({ id: sb.id, follow_status: true, log_sources: [] });
      call.on('data', (ev: { sandbox?: { status?: { phase?: number } } }) => {
        if (ev.sandbox) phases.push(ev.sandbox.status?.phase ?? 0);
      });
      call.on('end', resolve);
      call.on('error', reject);
    });
    await waitFor('initial snapshot', () => phases.length >= 1);
    expect(phases[0]).toBe(2);
    expect((await runCli(['sandbox', 'stop', 'watched'], { gateway: gw(2) })).code).toBe(0);
    expect((await runCli(['sandbox', 'start', 'watched'], { gateway: gw(2) })).code).toBe(0);
    expect((await runCli(['sandbox', 'delete', 'watched'], { gateway: gw(2) })).code).toBe(0);
    await ended;
    client.close();
    // Ready, Stopping, Stopped, Starting, Ready, Deleting — and the stream ends with the sandbox.
    expect(phases).toEqual([2, 6, 7, 8, 2, 4]);
  });

  it('logs record the lifecycle and are readable through any replica', async () => {
    await runCli(['sandbox', 'create', '--name', 'logged', '--detach', '--', '/bin/true'], { gateway: gw(0) });
    await waitFor('completed', async () => (await getJson('logged'))?.status.phase === 'SANDBOX_PHASE_COMPLETED');
    const logs = await runCli(['logs', 'logged'], { gateway: gw(2) });
    expect(logs.code).toBe(0);
    expect(logs.stdout.toString()).toContain('sandbox created');
    expect(logs.stdout.toString()).toContain('main process exited with code 0');
  });
});

describe('provisioning deadline', () => {
  it('a sandbox whose supervisor never connects becomes Error at the deadline, even with its creator killed', async () => {
    // A replica that hands supervisors an address nobody listens on, with a 6 s deadline: long
    // enough that the compute is still there to be seen below on a loaded machine (with 3 s it was
    // sometimes removed first).
    const bogus = await cluster.addReplica({ supervisorEndpoint: '127.0.0.1:9', env: { SANDGATE_PROVISION_DEADLINE_SECONDS: '6' } });
    const res = await runCli(['sandbox', 'create', '--name', 'never', '--detach', '--', 'sleep', 'infinity'], {
      gateway: gw(bogus),
      env: { SANDGATE_PROVISION_TIMEOUT: '1' },
    });
    expect(res.code).toBe(1); // the CLI gave up waiting; the sandbox exists
    // The compute exists (its handle names a live process) before the deadline: otherwise
    // "removed" below would pass for compute that never was.
    const { readFileSync } = await import('node:fs');
    const id = (await waitFor('record of never', () => getJson('never', 0)))!.metadata.id;
    const handle = await waitFor('compute handle', () => {
      try {
        return JSON.parse(readFileSync(`${cluster.stateDir}/sandboxes/${id}/handle.json`, 'utf8')) as { pid: number };
      } catch {
        return undefined;
      }
    });
    const alive = (pid: number) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    expect(alive(handle.pid)).toBe(true);
    await cluster.signal(bogus, 'SIGKILL');
    const sb = await waitFor('Error at the deadline', async () => {
      const s = await getJson('never', 0);
      return s?.status.phase === 'SANDBOX_PHASE_ERROR' ? s : undefined;
    }, 20_000, 250);
    expect(sb.status.conditions?.[0]?.reason).toBe('ProvisioningTimeout');
    await waitFor('compute removed: the process its handle names is gone', () => !alive(handle.pid), 10_000);
  });
});

describe('conformance', () => {
  let client: AnyClient;
  beforeAll(() => {
    client = openShellClient(gw(1));
  });
  afterAll(() => client.close());

  it('repeat delete answers NOT_FOUND', async () => {
    await createSandbox(gw(0), 'twice');
    expect(await unaryCall(client, 'DeleteSandbox', { name: 'twice' })).toEqual({ deleted: true });
    const err = (await unaryCall(client, 'DeleteSandbox', { name: 'twice' }).catch((e: unknown) => e)) as { code: number; details: string };
    expect(err.code).toBe(grpcStatus.NOT_FOUND);
    expect(err.details).toBe('sandbox not found');
  });

  it('concurrent creates with one name through three replicas: exactly one wins', async () => {
    const results = await Promise.allSettled(
      [0, 1, 2, 0, 1, 2].map((i) =>
        unaryCall(openShellClient(gw(i)), 'CreateSandbox', { name: 'same', spec: { command: ['sleep', 'infinity'] } }),
      ),
    );
    expect(results.filter((x) => x.status === 'fulfilled')).toHaveLength(1);
    for (const x of results) if (x.status === 'rejected') expect((x.reason as { code: number }).code).toBe(grpcStatus.ALREADY_EXISTS);
  });

  it('lists by label selector', async () => {
    for (const [name, team] of [['lab-a', 'red'], ['lab-b', 'blue']] as const) {
      expect((await runCli(['sandbox', 'create', '--name', name, '--label', `team=${team}`, '--label', 'env=ci', '--detach', '--', 'sleep', 'infinity'], { gateway: gw(0) })).code).toBe(0);
    }
    const red = (await unaryCall<{ sandboxes: { metadata: { name: string } }[] }>(client, 'ListSandboxes', { label_selector: 'team=red' })).sandboxes;
    expect(red.map((s) => s.metadata.name)).toEqual(['lab-a']);
    const ci = (await unaryCall<{ sandboxes: { metadata: { name: string } }[] }>(client, 'ListSandboxes', { label_selector: 'env=ci' })).sandboxes;
    expect(ci.map((s) => s.metadata.name).sort()).toEqual(['lab-a', 'lab-b']);
  });
});
