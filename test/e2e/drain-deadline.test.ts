// Issue 17, item 4: a replica whose Redis died stops within its drain deadline when an operator
// sends SIGTERM, as an operator would try it: `sandgate gateway` as its own process holding a live
// supervisor session and its BullMQ worker, `kill -9` of redis-server, then SIGTERM. Before the
// deadline existed the replica kept retrying Redis and ignored the signal. After it, the sandbox is
// not lost: Redis and the replica come back and it serves again. A dead Redis lets the drain's calls
// fail fast, so the drain may finish before the deadline; a frozen one (SIGSTOP: connections kept,
// no answer) holds them, so the second case proves the deadline itself cuts the drain.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Cluster, runCli } from '../harness/cluster.ts';
import { startRedis, type TestRedis } from '../harness/redis.ts';
import { createSandbox } from '../harness/sandbox.ts';
import { waitFor } from '../harness/wait.ts';

const DRAIN_TIMEOUT_MS = 3000;

let redis: TestRedis;
let cluster: Cluster;

beforeAll(async () => {
  redis = await startRedis({ persistent: true });
  cluster = await Cluster.start({ redisUrl: redis.url, replicas: 1, env: { SANDGATE_DRAIN_TIMEOUT_MS: String(DRAIN_TIMEOUT_MS) } });
});

afterAll(async () => {
  if (cluster) await runCli(['sandbox', 'delete', 'drain-me'], { gateway: cluster.replicas[0]!.grpcAddress }).catch(() => undefined);
  await cluster?.stop();
  cluster?.cleanup();
  await redis?.stop();
});

const gw = () => cluster.replicas[0]!.grpcAddress;

/** SIGTERM to the replica; its exit code (or 'still running' past the bound), how long it took, and what it logged meanwhile. */
async function sigterm(): Promise<{ code: number | null | 'still running'; tookMs: number; logs: string }> {
  const replicaLogs = cluster.replicas[0]!.logs;
  const logsBefore = replicaLogs.length;
  const proc = cluster.replicas[0]!.proc!;
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  const sent = Date.now();
  proc.kill('SIGTERM');
  // The bound under test, plus time for the process to act on it on a loaded machine.
  const code = await Promise.race([exited, new Promise<'still running'>((r) => setTimeout(() => r('still running'), DRAIN_TIMEOUT_MS + 7000))]);
  const tookMs = Date.now() - sent;
  if (code !== 'still running') cluster.replicas[0]!.proc = null;
  return { code, tookMs, logs: replicaLogs.slice(logsBefore).join('') };
}

async function echo(text: string): Promise<string> {
  const res = await runCli(['sandbox', 'exec', 'drain-me', '--', 'echo', text], { gateway: gw(), timeoutMs: 20_000 });
  return res.code === 0 ? res.stdout.toString().trim() : `exit ${res.code}: ${res.stderr.toString().trim()}`;
}

describe('SIGTERM with Redis gone', () => {
  it('the replica exits within its drain deadline, saying what it dropped', async () => {
    await createSandbox(gw(), 'drain-me');
    await waitFor('drain-me serving', async () => (await echo('up')) === 'up', 30_000, 250);

    await redis.kill();
    const { code, tookMs } = await sigterm();
    expect(code, `after ${tookMs} ms:\n${cluster.logs()}`).toBe(0);
    // Either the deadline cut the drain short and the replica says what it dropped, or every
    // Redis call of the drain failed fast and it finished on its own first (CI runs of
    // 2026-12-04: 1989 ms and 3288 ms, "replica stopped" with drained true). The bound is the
    // requirement; it held either way.
    if (cluster.logs().includes('drain deadline passed')) expect(tookMs).toBeGreaterThanOrEqual(DRAIN_TIMEOUT_MS - 100);
    else expect(cluster.logs()).toMatch(/"msg":"replica stopped".*"drained":true|"drained":true.*"msg":"replica stopped"/);
  });

  it('nothing is lost: Redis and the replica come back, the sandbox serves again', async () => {
    await redis.restart();
    await cluster.startReplica(0);
    await waitFor('drain-me serving again', async () => (await echo('back')) === 'back', 60_000, 500);
  });
});

describe('SIGTERM with Redis frozen', () => {
  it('the drain hangs on Redis and the deadline cuts it', async () => {
    redis.freeze();
    const { code, tookMs, logs } = await sigterm();
    expect(code, `after ${tookMs} ms:\n${logs}`).toBe(0);
    expect(logs, 'the deadline path, not a drain that finished').toContain('drain deadline passed');
    expect(logs).toMatch(/"msg":"replica stopped".*"drained":false|"drained":false.*"msg":"replica stopped"/);
    expect(tookMs).toBeGreaterThanOrEqual(DRAIN_TIMEOUT_MS - 100);
  });

  it('nothing is lost: Redis thaws, the replica comes back, the sandbox serves again', async () => {
    redis.thaw();
    await cluster.startReplica(0);
    await waitFor('drain-me serving after the freeze', async () => (await echo('thawed')) === 'thawed', 60_000, 500);
  });
});
