// The exec-deadline backstop, tested positively: a supervisor that misses an exec's deadline (its
// own timer switched off by the `exec-timeout` debug fault) still has the exec's processes killed,
// by the durable exec-deadline job asking the owner replica to KillExec, and the kill is counted.
// The companion case removes the backstop too (`jobs`): nothing counts a kill then (the exec ends
// only through the entry replica's in-memory deadline, which aborts the path a second later), so
// the first case's decisive assertion, the counted backstop kill, fails without the mechanism.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClusterCounter, keysFor, type RedisClient } from '@sandgate/store';
import type { ClientReadableStream } from '@grpc/grpc-js';
import { EXEC_DEADLINE_GRACE_MS } from '@sandgate/jobs';
import { Cluster, runCli } from '../harness/cluster.ts';
import { startRedis, type TestRedis } from '../harness/redis.ts';
import { openShellClient } from '../harness/grpc-client.ts';
import { createSandbox, pidsMatching, type CreatedSandbox } from '../harness/sandbox.ts';
import { sleep, waitFor } from '../harness/wait.ts';

const TIMEOUT_S = 2;
/** The job fires at deadline + grace; then a queue poll, a KillExec round trip and the kill. */
const BACKSTOP_SLACK_MS = 10_000;

interface Setup {
  redis: TestRedis;
  r: RedisClient;
  cluster: Cluster;
  sbx: CreatedSandbox;
}

async function setUp(name: string, breaks: string): Promise<Setup> {
  const redis = await startRedis();
  const cluster = await Cluster.start({
    redisUrl: redis.url,
    replicas: 2,
    env: { SANDGATE_DEBUG_BREAK: breaks, SANDGATE_DEBUG_UNSAFE: '1' },
  });
  const sbx = await createSandbox(cluster.replicas[0]!.grpcAddress, name);
  return { redis, r: redis.client(), cluster, sbx };
}

async function tearDown(s: Setup | undefined): Promise<void> {
  if (!s) return;
  await runCli(['sandbox', 'delete', s.sbx.name], { gateway: s.cluster.replicas[0]!.grpcAddress }).catch(() => undefined);
  await s.cluster.stop();
  s.cluster.cleanup();
  await s.redis.stop();
}

/** Starts `sleep 600.<tag>` with a 2 s timeout through replica 1; the call stays open. */
function startTimedExec(s: Setup, tag: string): { call: ClientReadableStream<unknown>; close: () => void; startedAt: number; outcome: Promise<{ exitCode?: number; error?: number }> } {
  const client = openShellClient(s.cluster.replicas[1]!.grpcAddress);
  const call = client.ExecSandbox(
    { sandbox_id: s.sbx.id, command: ['sh', '-c', `sleep 600.${tag}`], environment: {}, timeout_seconds: TIMEOUT_S },
    { deadline: Date.now() + 120_000 },
  ) as ClientReadableStream<unknown>;
  let exitCode: number | undefined;
  const outcome = new Promise<{ exitCode?: number; error?: number }>((resolve) => {
    call.on('data', (ev: { exit?: { exit_code?: number } }) => {
      if (ev.exit) exitCode = ev.exit.exit_code ?? 0;
    });
    call.on('error', (err: { code?: number }) => resolve({ exitCode, error: err.code }));
    call.on('end', () => resolve({ exitCode }));
  });
  return {
    call,
    outcome,
    startedAt: Date.now(),
    close: () => {
      call.cancel();
      client.close();
    },
  };
}

describe('the exec-deadline backstop kills what the supervisor failed to', () => {
  let s: Setup | undefined;
  beforeAll(async () => {
    s = await setUp('backstop', 'exec-timeout');
  });
  afterAll(() => tearDown(s));

  it('a timed exec whose supervisor never times it out is killed by the exec-deadline job, and counted', async () => {
    const tag = String(Date.now() % 10_000_000).padStart(7, '0');
    const before = Number((await s!.r.get(keysFor(s!.r).counter(ClusterCounter.execBackstopKills))) ?? 0);
    const exec = startTimedExec(s!, tag);
    try {
      await waitFor('the exec is running', async () => (await pidsMatching(`600.${tag}`)).length > 0, 20_000);
      // The supervisor's own timer is off: only the backstop can end it, after deadline + grace.
      await waitFor(
        'the backstop to kill the exec',
        async () => (await pidsMatching(`600.${tag}`)).length === 0,
        TIMEOUT_S * 1000 + EXEC_DEADLINE_GRACE_MS + BACKSTOP_SLACK_MS + 20_000,
        200,
      );
      // It was the backstop, not something else: it found the process alive and counted it. The
      // count lands after the kill (the supervisor answers KillExec once the tree is dead, then the
      // job counts), so it may come a little after the processes are gone: CI once read it first.
      await waitFor('the backstop kill counted', async () => Number((await s!.r.get(keysFor(s!.r).counter(ClusterCounter.execBackstopKills))) ?? 0) - before >= 1, 10_000, 100);
      // And not earlier than the deadline it enforces.
      expect(Date.now() - exec.startedAt).toBeGreaterThanOrEqual(TIMEOUT_S * 1000);
      // The client learns it as what it is, a timeout (exit 124), not as a broken relay: the
      // supervisor reports the exit of an exec the backstop ended.
      expect(await exec.outcome).toEqual({ exitCode: 124 });
    } finally {
      exec.close();
    }
  });
});

describe('without the backstop (jobs switched off too), nothing counts a backstop kill', () => {
  let s: Setup | undefined;
  beforeAll(async () => {
    s = await setUp('no-backstop', 'exec-timeout,jobs');
  });
  afterAll(() => tearDown(s));

  it('the exec outlives the backstop\'s moment, ends only by the in-memory deadline, and the counter stays 0', async () => {
    const tag = String((Date.now() + 1) % 10_000_000).padStart(7, '0');
    const exec = startTimedExec(s!, tag);
    try {
      await waitFor('the exec is running', async () => (await pidsMatching(`600.${tag}`)).length > 0, 20_000);
      await waitFor('the exec to end', async () => (await pidsMatching(`600.${tag}`)).length === 0, 60_000, 200);
      // Past the moment the positive case's backstop acts (deadline + grace + slack): still 0.
      const settled = exec.startedAt + TIMEOUT_S * 1000 + EXEC_DEADLINE_GRACE_MS + BACKSTOP_SLACK_MS;
      await sleep(Math.max(0, settled - Date.now()));
      expect(Number((await s!.r.get(keysFor(s!.r).counter(ClusterCounter.execBackstopKills))) ?? 0)).toBe(0);
    } finally {
      exec.close();
    }
  });
});
