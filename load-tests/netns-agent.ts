// Issue 16, items 2 and 4: what the native netns agent (apps/supervisor/native/sandgate-netns.c)
// saves a sandbox against the Node one (workload/netns-agent.ts) it replaces: its start on the
// way to Ready, and its memory in the per-sandbox footprint. One replica, local driver; sandboxes
// created one after another, alternately with the native agent hidden (not executable, so the
// supervisor starts the Node agent and logs `agent: node`) and present. Then, all of them idle,
// the proportional set size (PSS, /proc/PID/smaps_rollup) of each sandbox's processes besides
// its workload: bwrap, the supervisor, the agent.
//   node load-tests/netns-agent.ts [--sandboxes 10] [--settle-seconds 10]
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { SandboxPhase, type SandboxResponse } from '@sandgate/protocols';
import { NATIVE_NETNS_AGENT } from '@sandgate/supervisor';
import { openShellClient, unaryCall } from '../test/harness/grpc-client.ts';
import { sleep } from '../test/harness/wait.ts';
import { COMMON_OPTIONS, emitReport, mib, now, onCleanup, runMain, type BenchReport } from './bench.ts';
import { sandboxFootprint as footprint, startEnv } from './env.ts';
import { execRun } from './exec-client.ts';
import { ms, summarise } from './stats.ts';

const { values } = parseArgs({
  options: {
    sandboxes: { type: 'string', default: '10' },
    'settle-seconds': { type: 'string', default: '10' },
    ...COMMON_OPTIONS,
  },
});
const perKind = Number(values.sandboxes);
const settleSeconds = Number(values['settle-seconds']);

type Kind = 'node' | 'native';
interface Made {
  kind: Kind;
  id: string;
  readyMs: number;
  firstExecMs: number;
  startedAtEpochMs: number;
}

/** Marks of the supervisor's log (ms from the CreateSandbox call), and the agent it logged. */
function timeline(stateDir: string, m: Made): { marks: Map<string, number>; agent?: string } {
  const marks = new Map<string, number>();
  let agent: string | undefined;
  const file = path.join(fs.realpathSync(stateDir), 'sandboxes', m.id, 'supervisor.log');
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    if (!line.startsWith('{')) continue;
    const rec = JSON.parse(line) as { msg?: string; ts?: string; agent?: string };
    if (!rec.msg || !rec.ts || marks.has(rec.msg)) continue;
    marks.set(rec.msg, Date.parse(rec.ts) - m.startedAtEpochMs);
    if (rec.msg === 'workload network namespace ready') agent = rec.agent;
  }
  return { marks, agent };
}

async function main(): Promise<void> {
  const started = now();
  if (!fs.existsSync(NATIVE_NETNS_AGENT)) throw new Error(`${NATIVE_NETNS_AGENT} not built (npm install runs apps/supervisor/native/build.sh)`);
  const { cluster } = await startEnv({ replicas: 1 });
  const client = openShellClient(cluster.replicas[0]!.grpcAddress);
  onCleanup('grpc client', () => client.close());
  const mode = fs.statSync(NATIVE_NETNS_AGENT).mode & 0o7777;
  onCleanup('native netns agent mode', () => fs.chmodSync(NATIVE_NETNS_AGENT, mode));
  const made: Made[] = [];
  const names: string[] = [];
  onCleanup('sandboxes', async () => {
    for (const name of names) await unaryCall(client, 'DeleteSandbox', { name }).catch(() => undefined);
  });
  for (let i = 0; i < 2 * perKind; i++) {
    // ABBA, so a drift of the machine over the run hits both alike.
    const kind: Kind = i % 4 === 0 || i % 4 === 3 ? 'node' : 'native';
    const name = `bench-netns-${i}`;
    names.push(name);
    if (kind === 'node') fs.chmodSync(NATIVE_NETNS_AGENT, 0o644);
    try {
      const t0 = now();
      const startedAtEpochMs = Date.now();
      const res = await unaryCall<SandboxResponse>(client, 'CreateSandbox', { name, labels: {}, annotations: {}, spec: { command: ['sleep', 'infinity'], environment: {}, providers: [] } });
      const id = res.sandbox!.metadata!.id!;
      let phase = res.sandbox?.status?.phase;
      while (phase !== SandboxPhase.READY) {
        if (phase === SandboxPhase.ERROR) throw new Error(`${name} went to Error`);
        if (now() - t0 > 60_000) throw new Error(`${name} not Ready after 60 s`);
        await sleep(5);
        phase = (await unaryCall<SandboxResponse>(client, 'GetSandbox', { name })).sandbox?.status?.phase;
      }
      const readyMs = now() - t0;
      const r = await execRun(client, id, ['true'], { deadlineMs: 30_000 });
      if (r.exitCode !== 0) throw new Error(`${name}: true exited ${r.exitCode}`);
      made.push({ kind, id, readyMs, firstExecMs: now() - t0, startedAtEpochMs });
    } finally {
      fs.chmodSync(NATIVE_NETNS_AGENT, mode);
    }
  }
  const timelines = made.map((m) => ({ m, ...timeline(cluster.stateDir, m) }));
  for (const t of timelines) if (t.agent !== t.m.kind) throw new Error(`sandbox ${t.m.id} (${t.m.kind}) logged agent ${t.agent}`);
  await sleep(settleSeconds * 1000);
  const prints = await Promise.all(made.map(async (m) => ({ m, f: await footprint(m.id) })));

  const side = (kind: Kind) => timelines.filter((t) => t.m.kind === kind);
  const mark = (kind: Kind, msg: string) => summarise(side(kind).map((t) => t.marks.get(msg)).filter((v): v is number => v !== undefined));
  const rowMs = (label: string, a: ReturnType<typeof summarise>, b: ReturnType<typeof summarise>) => [label, ms(a.p50), ms(b.p50), (b.p50 / a.p50).toFixed(2), ms(a.p90), ms(b.p90)];
  const field = (kind: Kind, f: (x: { m: Made; f: Awaited<ReturnType<typeof footprint>> }) => number) => summarise(prints.filter((p) => p.m.kind === kind).map(f));
  const rowMem = (label: string, f: (x: { m: Made; f: Awaited<ReturnType<typeof footprint>> }) => number) => {
    const a = field('node', f);
    const b = field('native', f);
    return [label, mib(a.p50), mib(b.p50), (b.p50 / a.p50).toFixed(2), mib(b.p50 - a.p50)];
  };
  const report: BenchReport = {
    id: 'netns-agent',
    title: 'The netns agent: Node vs native',
    command: `node load-tests/netns-agent.ts --sandboxes ${perKind} --settle-seconds ${settleSeconds}`,
    tables: [
      {
        caption: `start of a sandbox, ${perKind} per agent, one after another (ABBA), one replica, local driver; ms from the CreateSandbox call (supervisor log marks; Ready: GetSandbox polled every 5 ms)`,
        headers: ['mark', 'Node agent p50', 'native agent p50', 'native / Node', 'Node p90', 'native p90'],
        rows: [
          rowMs('supervisor process loaded its code', mark('node', 'supervisor starting'), mark('native', 'supervisor starting')),
          rowMs('workload network namespace ready', mark('node', 'workload network namespace ready'), mark('native', 'workload network namespace ready')),
          rowMs('control session established', mark('node', 'control session established'), mark('native', 'control session established')),
          rowMs('phase Ready', summarise(side('node').map((t) => t.m.readyMs)), summarise(side('native').map((t) => t.m.readyMs))),
          rowMs('first `true` exited 0', summarise(side('node').map((t) => t.m.firstExecMs)), summarise(side('native').map((t) => t.m.firstExecMs))),
          rowMs('namespace ready − code loaded (the agent\'s start)', summarise(side('node').map((t) => t.marks.get('workload network namespace ready')! - t.marks.get('supervisor starting')!)), summarise(side('native').map((t) => t.marks.get('workload network namespace ready')! - t.marks.get('supervisor starting')!))),
        ],
      },
      {
        caption: `memory of each sandbox's processes besides its workload, all ${2 * perKind} sandboxes idle for ${settleSeconds} s; PSS (shared pages divided among their sharers), median per sandbox`,
        headers: ['process', 'Node agent', 'native agent', 'native / Node', 'native − Node'],
        rows: [
          rowMem('netns agent', (x) => x.f.agent),
          rowMem('supervisor', (x) => x.f.supervisor),
          rowMem('bwrap', (x) => x.f.bwrap),
          rowMem('per-sandbox footprint (all three)', (x) => x.f.agent + x.f.supervisor + x.f.bwrap),
        ],
      },
    ],
    notes: [`agents found: ${[...new Set(prints.map((p) => `${p.m.kind}=${p.f.agentName}`))].join(', ')}`],
    durationMs: now() - started,
  };
  emitReport(report, values['report-json']);
}

await runMain(main);
