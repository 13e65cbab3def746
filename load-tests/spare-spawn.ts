// Issue 16, item 1: what starting the spare wrappers through the native spawn (posix_spawn, the
// sandgate-spawn addon) instead of Node's spawn (a fork of the supervisor) saves an exec. Two
// sandboxes on one replica: the first started while the addon is hidden (renamed, so its
// supervisor spawns its spares through Node), the second with it; each sandbox's log says which
// its supervisor uses. Then `true` is run in each through the replica, interleaved ABBA, and each
// supervisor's CPU time (from /proc) is divided by its execs: a supervisor starts the next spare
// after every exec, so that is where the fork shows. Then bursts of `--concurrency` execs at once
// in each sandbox in turn: one of a burst finds the waiting spare, and the others are forks of the
// supervisor with Node's spawn, spares started on the spot with the addon.
//   node load-tests/spare-spawn.ts [--iterations 300] [--warmup 20] [--concurrency 4]
import { parseArgs } from 'node:util';
import { openShellClient } from '../test/harness/grpc-client.ts';
import { COMMON_OPTIONS, emitReport, fixed, now, onCleanup, runMain, type BenchReport } from './bench.ts';
import { cpuMs, sandboxesWithoutAndWithAddon, startEnv } from './env.ts';
import { execOnce, execPairsAbba } from './exec-client.ts';
import { ms, summarise } from './stats.ts';

const { values } = parseArgs({
  options: {
    iterations: { type: 'string', default: '300' },
    warmup: { type: 'string', default: '20' },
    concurrency: { type: 'string', default: '4' },
    ...COMMON_OPTIONS,
  },
});
const iterations = Number(values.iterations);
const warmup = Number(values.warmup);
const concurrency = Number(values.concurrency);

async function main(): Promise<void> {
  const started = now();
  const { cluster } = await startEnv({ replicas: 1 });
  const gateway = cluster.replicas[0]!.grpcAddress;
  const { without: forked, with: spawned } = await sandboxesWithoutAndWithAddon(
    cluster.stateDir,
    gateway,
    { without: 'bench-spare-node', with: 'bench-spare-posix' },
    'spare_spawner',
    { without: 'node', with: 'posix_spawn' },
  );
  const pids = { forked: forked.pid, spawned: spawned.pid };
  const kinds = { forked: 'node', spawned: 'posix_spawn' };
  const client = openShellClient(gateway);
  onCleanup('grpc client', () => client.close());
  await execPairsAbba(client, forked.id, spawned.id, 0, warmup);
  const cpuBefore = { forked: await cpuMs(pids.forked), spawned: await cpuMs(pids.spawned) };
  const { a: f, b: s } = await execPairsAbba(client, forked.id, spawned.id, iterations, 0);
  const cpu = { forked: ((await cpuMs(pids.forked)) - cpuBefore.forked) / iterations, spawned: ((await cpuMs(pids.spawned)) - cpuBefore.spawned) / iterations };
  // Bursts: `concurrency` execs at once, in one sandbox and then the other (alternating which
  // goes first); the time of each burst until its last exec ended.
  const bursts = Math.max(1, Math.round(iterations / concurrency / 2));
  const burst = async (id: string) => {
    const t0 = now();
    await Promise.all(Array.from({ length: concurrency }, () => execOnce(client, id)));
    return now() - t0;
  };
  const bf: number[] = [];
  const bs: number[] = [];
  const burstCpuBefore = { forked: await cpuMs(pids.forked), spawned: await cpuMs(pids.spawned) };
  for (let i = 0; i < bursts; i++) {
    if (i % 2 === 0) {
      bf.push(await burst(forked.id));
      bs.push(await burst(spawned.id));
    } else {
      bs.push(await burst(spawned.id));
      bf.push(await burst(forked.id));
    }
  }
  const burstCpu = {
    forked: ((await cpuMs(pids.forked)) - burstCpuBefore.forked) / (bursts * concurrency),
    spawned: ((await cpuMs(pids.spawned)) - burstCpuBefore.spawned) / (bursts * concurrency),
  };
  const sbf = summarise(bf);
  const sbs = summarise(bs);
  const sf = summarise(f);
  const ss = summarise(s);
  const paired = summarise(s.map((v, i) => v - f[i]!));
  const row = (label: string, x: ReturnType<typeof summarise>, cpuPerExec: string) => [label, ms(x.p50), ms(x.p90), ms(x.p99), ms(x.mean), cpuPerExec];
  const report: BenchReport = {
    id: 'spare-spawn',
    title: "Exec of `true`: spare wrappers forked by Node vs started through posix_spawn",
    command: `node load-tests/spare-spawn.ts --iterations ${iterations} --warmup ${warmup} --concurrency ${concurrency}`,
    tables: [
      {
        caption: `exec latency of \`true\` through the owner replica (local driver, one replica), ${iterations} each after ${warmup} warm-up pairs, interleaved ABBA; one supervisor starts its spare wrappers with Node's spawn, the other through the sandgate-spawn addon`,
        headers: ['spares started by', 'p50', 'p90', 'p99', 'mean', "the supervisor's CPU per exec"],
        rows: [
          row("Node's spawn (a fork of the supervisor)", sf, `${fixed(cpu.forked)} ms`),
          row('posix_spawn (the addon)', ss, `${fixed(cpu.spawned)} ms`),
          [...row('posix_spawn − Node, paired (same ABBA pair)', paired, '').slice(0, 5), `${fixed(cpu.spawned - cpu.forked)} ms`],
        ],
      },
      {
        caption: 'ratios (posix_spawn / Node; below 1.00 = less)',
        headers: ['', 'p50', 'p99', 'mean', "supervisor's CPU per exec"],
        rows: [['posix_spawn / Node', fixed(ss.p50 / sf.p50), fixed(ss.p99 / sf.p99), fixed(ss.mean / sf.mean), fixed(cpu.spawned / cpu.forked)]],
      },
      {
        caption: `${bursts} bursts of ${concurrency} execs of \`true\` at once in each sandbox, alternating: the time of a burst until its last exec ended`,
        headers: ['spares started by', 'burst p50', 'burst p90', 'burst mean', "the supervisor's CPU per exec"],
        rows: [
          ["Node's spawn (a fork of the supervisor)", ms(sbf.p50), ms(sbf.p90), ms(sbf.mean), `${fixed(burstCpu.forked)} ms`],
          ['posix_spawn (the addon)', ms(sbs.p50), ms(sbs.p90), ms(sbs.mean), `${fixed(burstCpu.spawned)} ms`],
          ['posix_spawn / Node', fixed(sbs.p50 / sbf.p50), fixed(sbs.p90 / sbf.p90), fixed(sbs.mean / sbf.mean), fixed(burstCpu.spawned / burstCpu.forked)],
        ],
      },
    ],
    notes: [`spare spawners as each sandbox's supervisor logged them: ${kinds.forked}, ${kinds.spawned}; CPU from /proc/PID/stat (10 ms ticks) over the ${iterations} measured execs`],
    durationMs: now() - started,
  };
  emitReport(report, values['report-json']);
}

await runMain(main);
