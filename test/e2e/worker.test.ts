// `sandgate worker`: three replicas that run no workers (SANDGATE_WORKERS=0, the variable of
// --no-workers) and the durable jobs in a process of their own. Jobs wait while no worker runs,
// are done by the standalone worker (including the exec backstop, which must reach the owner
// replica over the peer port), and a worker killed with -9 is replaced by another.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { JobScheduler, RECONCILE_SCHEDULER_ID, QUEUE_NAME } from '@sandgate/jobs';
import { ClusterCounter, jobQueueFor, keysFor, type RedisClient } from '@sandgate/store';
import { Cluster, cliBin, runCli, startWorker, type WorkerProcess } from '../harness/cluster.ts';
import { scanAllKeys, startRedis, type TestRedis } from '../harness/redis.ts';
import { createSandbox, pidsMatching } from '../harness/sandbox.ts';
import { sleep, waitFor } from '../harness/wait.ts';
import { cliEnv } from '../harness/credentials.ts';

let redis: TestRedis;
let r: RedisClient;
let cluster: Cluster;
const workers: WorkerProcess[] = [];

beforeAll(async () => {
  redis = await startRedis();
  r = redis.client();
  cluster = await Cluster.start({ redisUrl: redis.url, replicas: 3, env: { SANDGATE_WORKERS: '0' } });
});

afterAll(async () => {
  const list = await runCli(['sandbox', 'list', '-o', 'json'], { gateway: gw(0) }).catch(() => null);
  if (list?.code === 0) {
    for (const sb of (JSON.parse(list.stdout.toString()) as { sandboxes: { metadata: { name: string } }[] }).sandboxes) {
      await runCli(['sandbox', 'delete', sb.metadata.name], { gateway: gw(0) });
    }
  }
  await Promise.all(workers.map((w) => w.signal('SIGKILL')));
  await cluster?.stop();
  cluster?.cleanup();
  await redis?.stop();
});

const gw = (i: number) => cluster.replicas[i]!.grpcAddress;

interface SandboxJson {
  metadata: { id: string; name: string };
  status: { phase: string; restartCount?: number; mainProcessInstanceId?: string };
}

async function getJson(name: string): Promise<SandboxJson | null> {
  const res = await runCli(['sandbox', 'get', name, '-o', 'json'], { gateway: gw(2) });
  return res.code === 0 ? (JSON.parse(res.stdout.toString()) as SandboxJson) : null;
}

/** Creates an ephemeral sandbox whose main process exits at once; returns its id once it finished. */
async function finishedEphemeral(name: string): Promise<string> {
  const res = await runCli(['sandbox', 'create', '--name', name, '--no-keep', '--detach', '-o', 'json', '--', '/bin/true'], { gateway: gw(1) });
  expect(res.code, res.stderr).toBe(0);
  const id = (JSON.parse(res.stdout.toString()) as SandboxJson).metadata.id;
  await waitFor(`${name} completed`, async () => (await getJson(name))?.status.phase === 'SANDBOX_PHASE_COMPLETED', 15_000, 100);
  return id;
}

const gone = async (name: string, id: string) => (await getJson(name)) === null && !existsSync(`${cluster.stateDir}/sandboxes/${id}`);

/** Whether any key matches the pattern (on every primary of a cluster). */
async function anyKey(pattern: string): Promise<boolean> {
  for await (const batch of scanAllKeys(r, pattern)) if (batch.length > 0) return true;
  return false;
}

const workerLogs = () => `workers:\n${workers.map((w) => `--- ${w.id}\n${w.logs.join('').slice(-3000)}`).join('\n')}`;

async function waitGone(name: string, id: string, why: string): Promise<void> {
  await waitFor(why, () => gone(name, id), 20_000, 100).catch((err: unknown) => {
    throw new Error(`${String(err)}\n${workerLogs()}`);
  });
}

describe('sandgate worker beside replicas without workers', () => {
  it('nothing runs jobs until the worker starts; then it deletes a finished ephemeral sandbox', async () => {
    const id = await finishedEphemeral('eph-waits');
    // Its cleanup job is enqueued; with no worker anywhere it stays pending.
    await waitFor('the cleanup job enqueued', async () => await anyKey(`${jobQueueFor(r).prefix}:${QUEUE_NAME}:ephemeral_${id}_*`), 10_000, 100);
    await sleep(2_000);
    expect(await getJson('eph-waits')).not.toBeNull();
    // With its /metrics on a free port (--metrics-port through the environment).
    workers.push(await startWorker(cluster, 'w1', { SANDGATE_WORKER_METRICS_PORT: '0' }));
    await waitGone('eph-waits', id, 'the standalone worker to delete the ephemeral sandbox');
    expect(await r.exists(keysFor(r).sandbox(id))).toBe(0);
    // The worker installed the cluster's reconcile schedule.
    expect(await r.exists(`${jobQueueFor(r).prefix}:${QUEUE_NAME}:repeat:${RECONCILE_SCHEDULER_ID}`)).toBe(1);
  });

  it('reaches the owner replica for the exec backstop (Peer.KillExec)', async () => {
    const sbx = await createSandbox(gw(0), 'backstop');
    const tok = `${process.pid}${Date.now()}`;
    // No --timeout: the supervisor does not kill it, only the backstop job below can.
    const exec = spawn(process.execPath, [cliBin, 'sandbox', 'exec', 'backstop', '--', 'sleep', `600.${tok}`], {
      env: { ...process.env, SANDGATE_GATEWAY: gw(1), ...cliEnv(cluster.credentials) },
      stdio: ['pipe', 'ignore', 'ignore'],
    });
    const exited = new Promise<number | null>((res) => exec.on('close', (code) => res(code)));
    const execId = await waitFor('the exec tag of the running command', async () => {
      for (const pid of await pidsMatching(`sleep 600.${tok}`)) {
        const environ = await readFile(`/proc/${pid}/environ`).catch(() => null);
        const tag = environ?.toString().split('\0').find((kv) => kv.startsWith('SANDGATE_EXEC_ID='));
        if (tag) return tag.slice('SANDGATE_EXEC_ID='.length);
      }
      return undefined;
    }, 20_000, 50);
    const before = Number((await r.get(keysFor(r).counter(ClusterCounter.execBackstopKills))) ?? 0);
    const scheduler = new JobScheduler(redis.url, { connectionName: 'test:backstop' });
    try {
      // A deadline already past: due at once, as if the supervisor had missed it.
      await scheduler.execDeadline({ sandboxId: sbx.id, execId, deadlineMs: Date.now() - 10_000 });
    } finally {
      await scheduler.close();
    }
    await waitFor('the backstop to kill the exec', async () => (await pidsMatching(`sleep 600.${tok}`)).length === 0, 20_000, 100);
    expect(Number(await r.get(keysFor(r).counter(ClusterCounter.execBackstopKills)))).toBeGreaterThan(before);
    expect(await exited).not.toBe(0);
    await runCli(['sandbox', 'delete', 'backstop'], { gateway: gw(0) });
  });

  it('serves its job metrics on --metrics-port: the backstop kill and the exec-deadline job it ran', async () => {
    const address = workers[0]!.metricsAddress;
    expect(address, 'the worker banner names its metrics address').toMatch(/^127\.0\.0\.1:\d+$/);
    const text = await (await fetch(`http://${address}/metrics`)).text();
    expect(text).toMatch(/^target_info\{[^}]*service_name="sandgate-worker"/m);
    expect(text).toMatch(/^sandgate_exec_backstop_kills_total(\{[^}]*\})? [1-9]/m);
    expect(text).toMatch(/^sandgate_job_duration_count\{queue="sandgate",job_name="exec-deadline"\} [1-9]/m);
    expect(text).toMatch(/^sandgate_job_latency_count\{queue="sandgate",job_name="delete-sandbox"\} [1-9]/m);
    const ready = await fetch(`http://${address}/readyz`);
    expect(ready.status).toBe(200);
  });

  it('restarts a failed main process (restart policy), launching a supervisor that dials --supervisor-endpoint', async () => {
    const res = await runCli(['sandbox', 'create', '--name', 'restarts', '--restart-policy', 'on-failure', '--detach', '--', 'sh', '-c', 'sleep 1; exit 3'], {
      gateway: gw(0),
    });
    expect(res.code, res.stderr).toBe(0);
    const first = await waitFor('the first run to fail', async () => {
      const s = await getJson('restarts');
      return s?.status.phase === 'SANDBOX_PHASE_ERROR' && s.status.mainProcessInstanceId ? s.status.mainProcessInstanceId : undefined;
    }, 30_000, 100);
    // A new run that got as far as its supervisor's hello: a new instance id, counted. Generous:
    // a new bwrap sandbox and a Node supervisor start, on a loaded 2-core machine.
    await waitFor('a restarted run', async () => {
      const s = await getJson('restarts');
      return (s?.status.restartCount ?? 0) >= 1 && !!s?.status.mainProcessInstanceId && s.status.mainProcessInstanceId !== first;
    }, 60_000, 200).catch(async (err: unknown) => {
      throw new Error(`${String(err)}: ${JSON.stringify(await getJson('restarts'))}\n${workerLogs()}`);
    });
    await runCli(['sandbox', 'delete', 'restarts'], { gateway: gw(0) });
  });

  it('a worker killed with -9 is replaced by another that completes the pending job', async () => {
    const w1 = workers[0]!;
    const killed = await w1.signal('SIGKILL');
    expect(killed.signal).toBe('SIGKILL');
    const id = await finishedEphemeral('eph-after-kill');
    await sleep(2_000);
    expect(await getJson('eph-after-kill')).not.toBeNull();
    workers.push(await startWorker(cluster, 'w2'));
    await waitGone('eph-after-kill', id, 'the second worker to delete the ephemeral sandbox');
  });

  it('SIGTERM drains the worker, which then exits 0', async () => {
    const w2 = workers[1]!;
    const { code } = await w2.signal('SIGTERM');
    expect(code, w2.logs.join('').slice(-2000)).toBe(0);
    expect(w2.logs.join('')).toContain('"msg":"worker stopped"');
  });
});
