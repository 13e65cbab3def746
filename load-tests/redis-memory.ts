// Redis memory per sandbox record and per live supervisor session (issue 17).
//   node load-tests/redis-memory.ts [--sandboxes 1000] [--redis single|cluster]
//
// A fresh redis-server (the harness', locked like `sandgate up`'s), or with `--redis cluster` a
// fresh Redis Cluster of three primaries with a replica each (the key layout with hash tags;
// used_memory and the key counts summed over the primaries: each replica holds a copy on top);
// INFO memory `used_memory` is read after each step, through the real store classes and in the order the replicas write:
//   1. N sandbox records as CreateSandbox leaves them: SandboxStore.create (Provisioning, a Ready
//      condition), the mutate adding the compute handle and `runstart`, the "sandbox created" log line.
//   2. N live supervisor sessions as SessionRegistry.accept makes them: OwnershipStore.lease + claim
//      (sg:own, sg:fence), the mutate to Ready with `ownfence` (one more event), and the usage
//      sample the owner publishes every 15 s (sg:usage).
//   3. N SSH sessions (CreateSshSession: the token hash and its entry in the sandbox's session index).
// Then every sandbox is deleted (SandboxStore.remove) and the key space must be the baseline's but
// for the event streams, which linger 60 s by design (their final `deleted` entry); those are
// then dropped (what their expiry does) and memory must be back at the baseline.
// One warm-up sandbox goes through every step first, so the Lua script cache and the allocator's
// first arenas are in the baseline, not in the figures.
import { randomBytes, randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { SandboxPhase, type Sandbox } from '@sandgate/protocols';
import { onSupervisorConnected, readyCondition, type LifecycleStatus } from '@sandgate/core';
import { OwnershipStore, SandboxLogStore, SandboxStore, SandboxUsageStore, SshSessionStore, WorkspaceStore, keysFor } from '@sandgate/store';
import { hashCredential } from '@sandgate/gateway';
import type { RedisClient } from '@sandgate/store';
import { scanAllKeys, startRedis } from '../test/harness/redis.ts';
import { sleep } from '../test/harness/wait.ts';
import { COMMON_OPTIONS, emitReport, onCleanup, runMain, type BenchReport } from './bench.ts';
import { redisPrimaries } from './env.ts';

const { values } = parseArgs({ options: { ...COMMON_OPTIONS, sandboxes: { type: 'string', default: '1000' }, redis: { type: 'string', default: 'single' } } });
const N = Number(values.sandboxes);
if (values.redis !== 'single' && values.redis !== 'cluster') throw new Error(`--redis must be single or cluster, got '${values.redis}'`);
const ON_CLUSTER = values.redis === 'cluster';
const WORKSPACE = 'default';
const OWNER_TTL_MS = 6000;
const USAGE_TTL_MS = 45_000;
const SSH_TTL_MS = 86_400_000;
const BATCH = 200;

/** A field of INFO memory, summed over the primaries (one server: its own). */
async function memoryField(redis: RedisClient, field: string): Promise<number> {
  let total = 0;
  for (const node of redisPrimaries(redis)) total += Number(new RegExp(`^${field}:(\\d+)`, 'm').exec(await node.info('memory'))?.[1] ?? 0);
  return total;
}

/** used_memory, once serverCron has shrunk or grown the hash tables it has pending. */
async function usedMemory(redis: RedisClient): Promise<number> {
  await sleep(300);
  return memoryField(redis, 'used_memory');
}

async function keyNames(redis: RedisClient): Promise<string[]> {
  const out: string[] = [];
  for await (const batch of scanAllKeys(redis)) out.push(...batch);
  return out.sort();
}

async function keyCount(redis: RedisClient): Promise<number> {
  let total = 0;
  for (const node of redisPrimaries(redis)) total += await node.dbsize();
  return total;
}

interface Sbx {
  id: string;
  name: string;
}

async function inBatches<T>(items: T[], fn: (item: T) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < items.length; i += BATCH) await Promise.all(items.slice(i, i + BATCH).map(fn));
}

async function main(): Promise<void> {
  const t0 = Date.now();
  // The harness' Redis mode (test/harness/redis.ts) picks what startRedis() makes.
  if (ON_CLUSTER) process.env.SANDGATE_TEST_REDIS = 'cluster';
  const server = await startRedis();
  onCleanup('redis-server', () => server.stop());
  const redis = server.client();
  onCleanup('redis client', () => redis.disconnect());
  const keys = keysFor(redis);
  await redis.ping(); // a cluster client knows its primaries once connected
  const store = new SandboxStore(redis);
  const ownership = new OwnershipStore(redis, OWNER_TTL_MS);
  const logs = new SandboxLogStore(redis);
  const usage = new SandboxUsageStore(redis);
  const ssh = new SshSessionStore(redis);
  await new WorkspaceStore(redis).ensureDefault();

  const createRecord = async (s: Sbx) => {
    const now = Date.now();
    const sandbox: Sandbox = {
      metadata: { id: s.id, name: s.name, created_at_ms: now, labels: {}, annotations: {}, resource_version: 0, workspace: WORKSPACE },
      spec: { command: ['sleep', 'infinity'], environment: {}, providers: [] },
      status: {
        sandbox_name: s.name,
        phase: SandboxPhase.PROVISIONING,
        conditions: [readyCondition('False', 'Provisioning', 'Waiting for the sandbox supervisor to connect', new Date(now))],
      },
    };
    await store.create(sandbox, hashCredential(randomBytes(32).toString('base64url')));
    const handle = { pid: 100_000 + Math.floor(Math.random() * 1e6), startTime: 1_234_567, dir: `/home/user/.local/state/sandgate/sandboxes/${s.id}` };
    await store.mutate(s.id, (cur) => ({ sandbox: cur.sandbox, extra: { compute: JSON.stringify(handle), runstart: String(now) } }));
    await logs.append(s.id, { timestamp_ms: now, level: 'INFO', target: 'sandgate::lifecycle', source: 'gateway', message: 'sandbox created (driver local)' });
  };
  const openSession = async (s: Sbx) => {
    await ownership.lease(s.id);
    const fence = await ownership.claim(s.id, 'replica-0-host-12345-abcdef', randomUUID(), randomUUID());
    await store.mutate(s.id, (cur) => {
      if (cur.ownerFence > fence) return null;
      const extra = { ownfence: String(fence) };
      const next = onSupervisorConnected(cur.sandbox.status as LifecycleStatus, randomUUID(), new Date());
      if (!next) return { sandbox: cur.sandbox, extra };
      return { sandbox: { ...cur.sandbox, status: { ...(next as object), exit_code: next.exit_code } as typeof cur.sandbox.status }, extra };
    });
    await usage.publish([{ sandboxId: s.id, cpuSeconds: 12.345, memoryBytes: 52_428_800, atMs: Date.now(), replica: 'replica-0-host-12345-abcdef' }], USAGE_TTL_MS);
  };
  const sshSession = async (s: Sbx) => {
    const ok = await ssh.create(randomUUID(), { sandboxId: s.id, runStartedAtMs: Date.now(), expiresAtMs: Date.now() + SSH_TTL_MS, revoked: false, createdAtMs: Date.now() });
    if (!ok) throw new Error(`SSH session refused for ${s.id}`);
  };
  const remove = (s: Sbx) => store.remove(s.id, WORKSPACE, s.name);

  // Warm-up: every script loaded, every code path once.
  const warm: Sbx = { id: randomUUID(), name: 'warm-up' };
  await createRecord(warm);
  await openSession(warm);
  await sshSession(warm);
  await remove(warm);
  await redis.del(keys.events(warm.id));

  const baselineKeys = await keyNames(redis);
  const m0 = await usedMemory(redis);
  const b0 = await memoryField(redis, 'mem_total_replication_buffers'); // the replication backlog, filling up to repl-backlog-size
  const sandboxes: Sbx[] = Array.from({ length: N }, (_, i) => ({ id: randomUUID(), name: `mem-${i}` }));
  await inBatches(sandboxes, createRecord);
  const m1 = await usedMemory(redis);
  const keysPerRecord = ((await keyCount(redis)) - baselineKeys.length) / N;
  await inBatches(sandboxes, openSession);
  const m2 = await usedMemory(redis);
  const keysPerSession = ((await keyCount(redis)) - baselineKeys.length) / N - keysPerRecord;
  await inBatches(sandboxes, sshSession);
  const m3 = await usedMemory(redis);
  const keysPerSsh = ((await keyCount(redis)) - baselineKeys.length) / N - keysPerRecord - keysPerSession;

  // MEMORY USAGE of each key of one sandbox (SAMPLES 0: exact), for the breakdown.
  const s0 = sandboxes[0]!;
  const perKey: [string, number][] = [];
  const digest = (await redis.zrange(keys.sandboxSshSessions(s0.id), '0', '-1'))[0]!;
  for (const [what, key] of [
    ['record (sg:sbx)', keys.sandbox(s0.id)],
    ['name index (sg:sbxname)', keys.sandboxName(WORKSPACE, s0.name)],
    ['event stream (sg:events, 3 entries)', keys.events(s0.id)],
    ['log stream (sg:logs, 1 line)', keys.logs(s0.id)],
    ['owner (sg:own)', keys.owner(s0.id)],
    ['fence (sg:fence)', keys.fence(s0.id)],
    ['usage (sg:usage)', keys.usage(s0.id)],
    ['SSH session (sg:ssh)', keys.sshSession(digest)],
    ['SSH session index (sg:sshsbx, 1 entry)', keys.sandboxSshSessions(s0.id)],
  ] as const) {
    perKey.push([what, Number(await redis.memory('USAGE', key, 'SAMPLES', 0))]);
  }

  await inBatches(sandboxes, remove);
  const m4 = await usedMemory(redis);
  const left = (await keyNames(redis)).filter((k) => !baselineKeys.includes(k));
  const eventStreams = new Set(sandboxes.map((s) => keys.events(s.id)));
  const notEvents = left.filter((k) => !eventStreams.has(k));
  const ttls = await Promise.all(left.map((k) => redis.pttl(k)));
  const lingering = left.length === N && notEvents.length === 0 && ttls.every((t) => t > 0 && t <= 60_000);
  // What the event streams' expiry does 60 s later.
  // (One DEL per key: on a cluster the streams lie in different slots.)
  for (let i = 0; i < left.length; i += 500) await Promise.all(left.slice(i, i + 500).map((k) => redis.del(k)));
  await sleep(3000); // and give Redis time to shrink its emptied tables
  const m5 = await usedMemory(redis);
  const b5 = await memoryField(redis, 'mem_total_replication_buffers');
  const finalKeys = await keyNames(redis);
  const backToBaseline = JSON.stringify(finalKeys) === JSON.stringify(baselineKeys);

  const per = (bytes: number) => Math.round(bytes / N);
  const k = (n: number) => Number(n.toFixed(3));
  const report: BenchReport = {
    id: 'redis-memory',
    title: 'Redis memory per sandbox and per live session',
    command: `node load-tests/redis-memory.ts --sandboxes ${N}${ON_CLUSTER ? ' --redis cluster' : ''}`,
    tables: [
      {
        caption: `INFO memory used_memory on a fresh ${ON_CLUSTER ? 'Redis Cluster (three primaries with a replica each; summed over the primaries)' : 'redis-server'} (${(await redis.info('server')).match(/redis_version:(\S+)/)?.[1] ?? '?'}), ${N} sandboxes, through the store classes`,
        headers: ['step', 'used_memory', 'delta', 'per sandbox', 'keys per sandbox'],
        rows: [
          ['baseline (default workspace, scripts loaded)', m0, '', '', ''],
          [`+ ${N} sandbox records (as CreateSandbox leaves them)`, m1, m1 - m0, per(m1 - m0), k(keysPerRecord)],
          [`+ ${N} live supervisor sessions (claim, Ready, usage)`, m2, m2 - m1, per(m2 - m1), k(keysPerSession)],
          [`+ ${N} SSH sessions (one per sandbox)`, m3, m3 - m2, per(m3 - m2), k(keysPerSsh)],
          ['all deleted (event streams lingering 60 s)', m4, m4 - m0, per(m4 - m0), k(left.length / N)],
          ['event streams expired', m5, m5 - m0, '', k((finalKeys.length - baselineKeys.length) / N)],
        ],
      },
      {
        caption: 'MEMORY USAGE (SAMPLES 0) of one sandbox\'s keys, with every step done',
        headers: ['key', 'bytes'],
        rows: perKey,
      },
    ],
    notes: [
      `after the deletes, the only keys left were the ${N} event streams with a TTL of at most 60 s: ${lingering ? 'yes' : `NO (${left.length} keys left, ${notEvents.length} not event streams: ${notEvents.slice(0, 5).join(', ')})`}`,
      `key space back to the baseline once they expired: ${backToBaseline ? 'yes' : 'NO'}; used_memory ${m5 - m0 >= 0 ? '+' : ''}${m5 - m0} bytes from the baseline (no key: the Lua heap, client buffers), of which ${b5 - b0} bytes the replication backlog filling up (mem_total_replication_buffers ${b0} → ${b5})`,
      'keys per sandbox: 4 for a record (sg:sbx, sg:sbxname, sg:events, sg:logs; its id is a member of sg:sbxs and sg:wssbx:{ws}), 3 for a live session (sg:own, sg:fence, sg:usage), 2 for the first SSH session (sg:ssh, sg:sshsbx), 1 for each further one',
      'not counted: the durable jobs in BullMQ (bull:sandgate:*, a provision deadline per create, kept per BullMQ\'s retention), log lines beyond the first (up to ~2000 per sandbox, trimmed) and events beyond three (up to ~256)',
    ],
    durationMs: Date.now() - t0,
  };
  emitReport(report, values['report-json']);
  if (!lingering || !backToBaseline) throw new Error('a deleted sandbox left keys behind');
}

await runMain(main);
