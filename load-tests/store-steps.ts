// What creates and deletes in single-slot steps cost (issue 17): SandboxStore.create and
// SandboxStore.remove, one at a time, on one redis-server and on a Redis Cluster of three
// primaries with a replica each, side by side in one run (batches alternate between the two).
//   node load-tests/store-steps.ts [--sandboxes 2000] [--batch 100]
//
// Since 1eb5d76 a create is four scripts, each on one slot (reserve-sandbox-4 on the workspace's
// slot, create-sandbox-record-2 on the sandbox's, index-sandbox-1 on the global index's,
// settle-entry-1 on the workspace's again), where it was one script over every key before; a
// delete is three (seal-ssh-sessions, remove-sandbox-record-n, unindex-sandbox-4) where it was
// two. The same steps run on every Redis mode, so one Redis pays the extra round trips too: this
// measures them, and counts the commands each operation sends (client side, on the connection the
// store uses: round trips, with no pipelining in these paths).
import { randomBytes, randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { SandboxPhase, type Sandbox } from '@sandgate/protocols';
import { readyCondition } from '@sandgate/core';
import { SandboxStore, WorkspaceStore, type RedisClient } from '@sandgate/store';
import { hashCredential } from '@sandgate/gateway';
import { startRedis } from '../test/harness/redis.ts';
import { startRedisCluster } from '../test/harness/redis-cluster.ts';
import { summarise, ms } from './stats.ts';
import { COMMON_OPTIONS, emitReport, fixed, now, onCleanup, runMain, type BenchReport } from './bench.ts';

const { values } = parseArgs({
  options: { ...COMMON_OPTIONS, sandboxes: { type: 'string', default: '2000' }, batch: { type: 'string', default: '100' } },
});
const N = Number(values.sandboxes);
const BATCH = Number(values.batch);
const WORKSPACE = 'default';

interface Side {
  label: string;
  redis: RedisClient;
  store: SandboxStore;
  sent: number;
  create: number[];
  remove: number[];
  createCommands: number[];
  removeCommands: number[];
}

/** Counts what the client sends: every command goes through sendCommand, on Redis and Cluster alike. */
function countCommands(side: Side): void {
  const redis = side.redis as unknown as { sendCommand: (...args: unknown[]) => unknown };
  const send = redis.sendCommand.bind(redis);
  redis.sendCommand = (...args: unknown[]) => {
    side.sent++;
    return send(...args);
  };
}

function sandboxOf(id: string, name: string): Sandbox {
  const at = Date.now();
  return {
    metadata: { id, name, created_at_ms: at, labels: {}, annotations: {}, resource_version: 0, workspace: WORKSPACE },
    spec: { command: ['sleep', 'infinity'], environment: {}, providers: [] },
    status: {
      sandbox_name: name,
      phase: SandboxPhase.PROVISIONING,
      conditions: [readyCondition('False', 'Provisioning', 'Waiting for the sandbox supervisor to connect', new Date(at))],
    },
  };
}

async function batch(side: Side, first: number, count: number): Promise<void> {
  const made: { id: string; name: string }[] = [];
  for (let i = first; i < first + count; i++) {
    const s = { id: randomUUID(), name: `steps-${i}` };
    const sent0 = side.sent;
    const t0 = now();
    await side.store.create(sandboxOf(s.id, s.name), hashCredential(randomBytes(32).toString('base64url')));
    side.create.push(now() - t0);
    side.createCommands.push(side.sent - sent0);
    made.push(s);
  }
  for (const s of made) {
    const sent0 = side.sent;
    const t0 = now();
    if (!(await side.store.remove(s.id, WORKSPACE, s.name))) throw new Error(`${side.label}: ${s.id} was not there to delete`);
    side.remove.push(now() - t0);
    side.removeCommands.push(side.sent - sent0);
  }
}

async function main(): Promise<void> {
  const t0 = Date.now();
  const single = await startRedis();
  onCleanup('redis-server', () => single.stop());
  const cluster = await startRedisCluster();
  onCleanup('redis cluster', () => cluster.stop());
  const sides: Side[] = [];
  for (const [label, redis] of [
    ['one redis-server', single.client()],
    ['Redis Cluster, 3 primaries', cluster.client()],
  ] as const) {
    onCleanup(`${label} client`, () => redis.disconnect());
    await new WorkspaceStore(redis).ensureDefault();
    const side: Side = { label, redis, store: new SandboxStore(redis), sent: 0, create: [], remove: [], createCommands: [], removeCommands: [] };
    countCommands(side);
    await batch(side, -BATCH, BATCH); // warm-up: scripts loaded, connections to every node open
    Object.assign(side, { create: [], remove: [], createCommands: [], removeCommands: [] });
    sides.push(side);
  }
  // Alternate batches so both sides see the same machine.
  for (let i = 0; i < N; i += BATCH) for (const side of sides) await batch(side, i, Math.min(BATCH, N - i));

  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  const rows = sides.map((s) => {
    const c = summarise(s.create);
    const r = summarise(s.remove);
    return [s.label, ms(c.p50), ms(c.p99), fixed(mean(s.createCommands), 2), ms(r.p50), ms(r.p99), fixed(mean(s.removeCommands), 2)];
  });
  const [a, b] = sides.map((s) => ({ c: summarise(s.create), r: summarise(s.remove) }));
  rows.push(['ratio cluster / one', fixed(b!.c.p50 / a!.c.p50), fixed(b!.c.p99 / a!.c.p99), '', fixed(b!.r.p50 / a!.r.p50), fixed(b!.r.p99 / a!.r.p99), '']);
  const report: BenchReport = {
    id: 'store-steps',
    title: 'Creates and deletes in single-slot steps, on one Redis and on a cluster',
    command: `node load-tests/store-steps.ts --sandboxes ${N} --batch ${BATCH}`,
    tables: [
      {
        caption: `SandboxStore.create then SandboxStore.remove, one at a time, ${N} sandboxes per side in alternating batches of ${BATCH} (after a warm-up batch); commands counted as the client sends them`,
        headers: ['Redis', 'create p50', 'create p99', 'commands per create', 'delete p50', 'delete p99', 'commands per delete'],
        rows,
      },
    ],
    notes: [
      'each command is a round trip here: these paths send one at a time (a step needs the answer of the one before)',
      'the same steps on both sides: the single-slot protocol runs on every Redis mode, so the cluster column differs only by where the keys live',
    ],
    durationMs: Date.now() - t0,
  };
  emitReport(report, values['report-json']);
}

await runMain(main);
