// Issue 16, item 3: what a warm-pool member costs while it waits, next to an idle sandbox. One
// replica, local driver: a pool of N members (started with their main process deferred) and N
// ordinary sandboxes running `sleep infinity`, all idle for a while; then the proportional set
// size (PSS, /proc/PID/smaps_rollup) of each sandbox's processes besides its workload: the bwrap
// chain, the supervisor, the netns agent and the spare exec wrapper. A member has no workload.
// Issue 16 measures the footprint over 100 idle sandboxes: `--sandboxes 100 --pool-size 10` (a
// pool holds at most 64 members; its members and the idle sandboxes are medians of their own).
// `--tls`: the replica serves TLS, as `sandgate up` runs it, so every supervisor's session is TLS.
//   node load-tests/pool-footprint.ts [--sandboxes 5] [--pool-size N (default: --sandboxes)] [--settle-seconds 10] [--tls]
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { SandboxPhase, type SandboxResponse } from '@sandgate/protocols';
import { keys } from '@sandgate/store';
import { openShellClient, unaryCall } from '../test/harness/grpc-client.ts';
import { sleep, waitFor } from '../test/harness/wait.ts';
import { COMMON_OPTIONS, emitReport, mib, now, onCleanup, runMain, type BenchReport } from './bench.ts';
import { sandboxFootprint, startEnv } from './env.ts';
import { summarise } from './stats.ts';

const { values } = parseArgs({
  options: {
    sandboxes: { type: 'string', default: '5' },
    'pool-size': { type: 'string' },
    'settle-seconds': { type: 'string', default: '10' },
    tls: { type: 'boolean', default: false },
    ...COMMON_OPTIONS,
  },
});
const perKind = Number(values.sandboxes);
const poolSize = Number(values['pool-size'] ?? values.sandboxes);
const settleSeconds = Number(values['settle-seconds']);
const POOL = 'bench-footprint';

async function main(): Promise<void> {
  const started = now();
  const { cluster, redis: server } = await startEnv({ replicas: 1, tls: values.tls });
  const client = openShellClient(cluster.replicas[0]!.grpcAddress);
  onCleanup('grpc client', () => client.close());
  const redis = new Redis(server.url);
  onCleanup('redis', () => void redis.disconnect());
  const names: string[] = [];
  onCleanup('sandboxes', async () => {
    for (const name of names) await unaryCall(client, 'DeleteSandbox', { name }).catch(() => undefined);
  });
  onCleanup('pool', () => unaryCall(client, 'DeletePool', { name: POOL }).catch(() => undefined));

  await unaryCall(client, 'SetPool', { name: POOL, size: poolSize });
  const idle: string[] = [];
  for (let i = 0; i < perKind; i++) {
    const name = `bench-idle-${i}`;
    names.push(name);
    const res = await unaryCall<SandboxResponse>(client, 'CreateSandbox', { name, labels: {}, annotations: {}, spec: { command: ['sleep', 'infinity'], environment: {}, providers: [] } });
    idle.push(res.sandbox!.metadata!.id!);
  }
  for (const name of names) {
    await waitFor(`${name} Ready`, async () => (await unaryCall<SandboxResponse>(client, 'GetSandbox', { name })).sandbox?.status?.phase === SandboxPhase.READY, 60_000, 50);
  }
  await waitFor(`${poolSize} Ready members`, async () => {
    const res = await unaryCall<{ pools?: { name?: string; ready?: number }[] }>(client, 'ListPools', {});
    return (res.pools ?? []).find((p) => p.name === POOL)?.ready === poolSize;
  }, 120_000, 100);
  const members = await redis.smembers(keys.workspaceSandboxes(`pool:${POOL}`));
  await sleep(settleSeconds * 1000);
  const measure = (ids: string[]) => Promise.all(ids.map((id) => sandboxFootprint(id)));
  const [memberPrints, idlePrints] = [await measure(members), await measure(idle)];

  type Print = Awaited<ReturnType<typeof sandboxFootprint>>;
  const row = (label: string, f: (p: Print) => number) => {
    const m = summarise(memberPrints.map(f));
    const i = summarise(idlePrints.map(f));
    return [label, mib(m.p50), mib(i.p50), (m.p50 / i.p50).toFixed(2), mib(m.p50 - i.p50)];
  };
  const report: BenchReport = {
    id: 'pool-footprint',
    title: 'A warm-pool member while it waits vs an idle sandbox',
    command: `node load-tests/pool-footprint.ts --sandboxes ${perKind}${poolSize !== perKind ? ` --pool-size ${poolSize}` : ''} --settle-seconds ${settleSeconds}${values.tls ? ' --tls' : ''}`,
    tables: [
      {
        caption: `PSS of each sandbox's processes besides its workload, ${poolSize} members of one pool and ${perKind} sandboxes running \`sleep infinity\`, all idle for ${settleSeconds} s, one replica${values.tls ? ' serving TLS' : ''}, local driver; median per sandbox`,
        headers: ['process', 'pool member', 'idle sandbox', 'member / idle', 'member − idle'],
        rows: [
          row('supervisor', (p) => p.supervisor),
          row('… of it anonymous (V8 heap, malloc, stacks)', (p) => p.supervisorAnon),
          row('netns agent', (p) => p.agent),
          row('spare exec wrapper', (p) => p.spare),
          row('bwrap', (p) => p.bwrap),
          row('per-sandbox footprint (all four)', (p) => p.supervisor + p.agent + p.spare + p.bwrap),
        ],
      },
    ],
    notes: [`members measured: ${memberPrints.length}, idle sandboxes: ${idlePrints.length}; agents: ${[...new Set([...memberPrints, ...idlePrints].map((p) => p.agentName))].join(', ')}`],
    durationMs: now() - started,
  };
  emitReport(report, values['report-json']);
}

await runMain(main);
