// Issue 16, item 1: what a spawn costs a Node process as its own memory grows. Node's
// child_process.spawn forks the calling process, and a fork copies the page tables of its
// anonymous memory, so a supervisor (or any large process) pays for its own size at every process
// it starts: the spare wrapper's refill after each exec is such a fork. Several Node processes
// side by side, each holding a different amount of touched anonymous memory, take turns spawning
// `/bin/true` to its exit in batches (round-robin, so machine noise hits every size alike).
// Beside them, one started as a supervisor is (its V8 flags, SUPERVISOR_NODE_FLAGS) that loaded
// the supervisor's modules (supervisor-main.ts) and holds nothing more: about the size an idle
// supervisor forks at.
//   node load-tests/fork-cost.ts [--held-mib 0,25,50,100,200] [--iterations 200] [--batch 10]
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { SUPERVISOR_NODE_FLAGS } from '@sandgate/compute';
import { COMMON_OPTIONS, emitReport, fixed, mib, now, onCleanup, runMain, withTimeout, type BenchReport } from './bench.ts';
import { smapsRollup } from './env.ts';
import { ms, summarise } from './stats.ts';

const { values } = parseArgs({
  options: {
    'held-mib': { type: 'string', default: '0,25,50,100,200' },
    iterations: { type: 'string', default: '200' },
    batch: { type: 'string', default: '10' },
    ...COMMON_OPTIONS,
  },
});

const here = path.dirname(fileURLToPath(import.meta.url));
const CHILD = path.join(here, 'fork-cost-child.ts');
const SUPERVISOR_MAIN = path.join(here, '..', 'apps', 'supervisor', 'src', 'supervisor-main.ts');

interface Spawner {
  label: string;
  heldMib: number;
  proc: ChildProcess;
  next: () => Promise<string>;
  samples: number[];
  /** Of each, the time inside spawn() itself: the spawning process's event loop blocked. */
  blocked: number[];
}

async function startSpawner(heldMib: number, load?: string): Promise<Spawner> {
  const label = load ? "the supervisor's flags and modules" : `${heldMib} MiB held`;
  const flags = load ? SUPERVISOR_NODE_FLAGS : [];
  const proc = spawn(process.execPath, [...flags, CHILD, String(heldMib), ...(load ? [load] : [])], { stdio: ['pipe', 'pipe', 'inherit'] });
  onCleanup(`spawner (${label})`, () => proc.kill('SIGKILL'));
  const lines = createInterface({ input: proc.stdout! })[Symbol.asyncIterator]();
  const next = async () => {
    const r = await lines.next();
    if (r.done) throw new Error(`the spawner (${label}) exited`);
    return r.value;
  };
  await withTimeout(next(), 60_000, `the spawner (${label}) to start`);
  return { label, heldMib, proc, next, samples: [], blocked: [] };
}

/**
 * The floor: a small native process (dash) starting `/bin/true` to its exit in a loop, per start
 * (the loop's time less an empty loop's, over its count), so no Node fork is in it.
 */
async function shellFloor(count: number): Promise<number> {
  const timeLoop = (n: number) =>
    new Promise<number>((resolve, reject) => {
      const t = performance.now();
      const c = spawn('/bin/sh', ['-c', `i=0; while [ $i -lt ${n} ]; do /bin/true; i=$((i+1)); done`], { stdio: 'ignore' });
      c.on('error', reject);
      c.on('exit', (code) => (code === 0 ? resolve(performance.now() - t) : reject(new Error(`/bin/sh loop exited ${code}`))));
    });
  return ((await timeLoop(count)) - (await timeLoop(0))) / count;
}

async function main(): Promise<void> {
  const t0 = now();
  const sizes = values['held-mib'].split(',').map(Number);
  const iterations = Number(values.iterations);
  const batch = Number(values.batch);
  if (sizes.some((s) => !(s >= 0)) || !(iterations >= 1) || !(batch >= 1)) throw new Error('--held-mib needs sizes >= 0, --iterations and --batch numbers >= 1');
  const spawners: Spawner[] = [];
  for (const s of sizes) spawners.push(await startSpawner(s));
  const supervisorLike = await startSpawner(0, SUPERVISOR_MAIN);
  // A warm-up batch each (the first spawns load child_process's code paths).
  const all = [...spawners, supervisorLike];
  for (const sp of all) {
    sp.proc.stdin!.write(`${batch}\n`);
    await sp.next();
  }
  const floor: number[] = [];
  for (let done = 0; done < iterations; done += batch) {
    for (const sp of all) {
      sp.proc.stdin!.write(`${Math.min(batch, iterations - done)}\n`);
      for (const [total, blocked] of JSON.parse(await sp.next()) as [number, number][]) {
        sp.samples.push(total);
        sp.blocked.push(blocked);
      }
    }
    floor.push(await shellFloor(batch));
  }
  const rows: string[][] = [];
  const base = summarise(spawners[0]!.samples).p50;
  for (const sp of all) {
    const s = summarise(sp.samples);
    const anon = await smapsRollup(sp.proc.pid!, 'Anonymous');
    const rss = await smapsRollup(sp.proc.pid!, 'Rss');
    rows.push([sp.label, mib(anon), mib(rss), ms(s.p50), ms(s.p90), ms(s.p99), fixed(s.p50 / base), ms(summarise(sp.blocked).p50)]);
  }
  const f = summarise(floor);
  rows.push([`a native process (/bin/sh), per start in a loop of ${batch}`, '', '', ms(f.p50), ms(f.p90), ms(f.p99), fixed(f.p50 / base), '']);
  // Per MiB of anonymous memory: the slope between the smallest and the largest spawner.
  const first = spawners[0]!;
  const last = spawners[spawners.length - 1]!;
  const anonFirst = await smapsRollup(first.proc.pid!, 'Anonymous');
  const anonLast = await smapsRollup(last.proc.pid!, 'Anonymous');
  const slope = (summarise(last.samples).p50 - summarise(first.samples).p50) / ((anonLast - anonFirst) / 2 ** 20);
  const report: BenchReport = {
    id: 'fork-cost',
    title: "A spawn's cost against the spawning process's size (issue 16)",
    command: `node load-tests/fork-cost.ts --held-mib ${values['held-mib']} --iterations ${iterations} --batch ${batch}`,
    tables: [
      {
        caption: `child_process.spawn('/bin/true') to its exit from Node processes holding more and more touched anonymous memory, ${iterations} each, round-robin in batches of ${batch}`,
        headers: ['spawning process', 'anonymous (smaps)', 'RSS', 'p50', 'p90', 'p99', `p50 / the ${sizes[0]} MiB one's`, 'p50 inside spawn() (event loop blocked)'],
        rows,
      },
    ],
    notes: [
      `p50 grows by ${fixed(slope * 1000, 1)} µs per MiB of anonymous memory (between the smallest and the largest spawner): what every process a large Node process starts costs it on this machine`,
    ],
    durationMs: now() - t0,
  };
  emitReport(report, values['report-json']);
  for (const sp of all) sp.proc.stdin!.end();
}

await runMain(main);
