// Issue 16, item 1: what starting a terminal's process through posix_spawn (the sandgate-spawn
// addon's spawnPty) instead of node-pty (a fork of the supervisor) saves an exec on a PTY. Two
// sandboxes on one replica: the first started while the addon is hidden (renamed, so its
// supervisor starts terminals with node-pty), the second with it; each sandbox's log says which
// its supervisor uses. Then `true` is run with `tty: true` in each through the replica,
// interleaved ABBA, and each supervisor's CPU time (from /proc) is divided by its execs.
// (With the addon hidden, that supervisor's spare wrappers are forked by Node too; an exec on a
// terminal takes no spare, so the PTY execs measured here differ only in how their process starts.)
//   node load-tests/pty-spawn.ts [--iterations 300] [--warmup 20]
import { parseArgs } from 'node:util';
import { openShellClient } from '../test/harness/grpc-client.ts';
import { COMMON_OPTIONS, emitReport, fixed, now, onCleanup, runMain, type BenchReport } from './bench.ts';
import { cpuMs, sandboxesWithoutAndWithAddon, startEnv } from './env.ts';
import { execPairsAbba } from './exec-client.ts';
import { ms, summarise } from './stats.ts';

const { values } = parseArgs({
  options: {
    iterations: { type: 'string', default: '300' },
    warmup: { type: 'string', default: '20' },
    ...COMMON_OPTIONS,
  },
});
const iterations = Number(values.iterations);
const warmup = Number(values.warmup);

async function main(): Promise<void> {
  const started = now();
  const { cluster } = await startEnv({ replicas: 1 });
  const gateway = cluster.replicas[0]!.grpcAddress;
  const { without: forked, with: spawned } = await sandboxesWithoutAndWithAddon(
    cluster.stateDir,
    gateway,
    { without: 'bench-pty-node-pty', with: 'bench-pty-posix' },
    'pty_spawner',
    { without: 'node-pty', with: 'posix_spawn' },
  );
  const pids = { forked: forked.pid, spawned: spawned.pid };
  const kinds = { forked: 'node-pty', spawned: 'posix_spawn' };
  const client = openShellClient(gateway);
  onCleanup('grpc client', () => client.close());
  const tty = { tty: true };
  await execPairsAbba(client, forked.id, spawned.id, 0, warmup, tty);
  const cpuBefore = { forked: await cpuMs(pids.forked), spawned: await cpuMs(pids.spawned) };
  const { a: f, b: s } = await execPairsAbba(client, forked.id, spawned.id, iterations, 0, tty);
  const cpu = { forked: ((await cpuMs(pids.forked)) - cpuBefore.forked) / iterations, spawned: ((await cpuMs(pids.spawned)) - cpuBefore.spawned) / iterations };
  const sf = summarise(f);
  const ss = summarise(s);
  const paired = summarise(s.map((v, i) => v - f[i]!));
  const row = (label: string, x: ReturnType<typeof summarise>, cpuPerExec: string) => [label, ms(x.p50), ms(x.p90), ms(x.p99), ms(x.mean), cpuPerExec];
  const report: BenchReport = {
    id: 'pty-spawn',
    title: 'Exec of `true` on a PTY: the process forked by node-pty vs started through posix_spawn',
    command: `node load-tests/pty-spawn.ts --iterations ${iterations} --warmup ${warmup}`,
    tables: [
      {
        caption: `exec latency of \`true\` with \`tty: true\` through the owner replica (local driver, one replica), ${iterations} each after ${warmup} warm-up pairs, interleaved ABBA; one supervisor starts terminals with node-pty, the other through the sandgate-spawn addon`,
        headers: ['terminal process started by', 'p50', 'p90', 'p99', 'mean', "the supervisor's CPU per exec"],
        rows: [
          row('node-pty (a fork of the supervisor)', sf, `${fixed(cpu.forked)} ms`),
          row('posix_spawn (the addon)', ss, `${fixed(cpu.spawned)} ms`),
          [...row('posix_spawn − node-pty, paired (same ABBA pair)', paired, '').slice(0, 5), `${fixed(cpu.spawned - cpu.forked)} ms`],
        ],
      },
      {
        caption: 'ratios (posix_spawn / node-pty; below 1.00 = less)',
        headers: ['', 'p50', 'p99', 'mean', "supervisor's CPU per exec"],
        rows: [['posix_spawn / node-pty', fixed(ss.p50 / sf.p50), fixed(ss.p99 / sf.p99), fixed(ss.mean / sf.mean), fixed(cpu.spawned / cpu.forked)]],
      },
    ],
    notes: [`pty spawners as each sandbox's supervisor logged them: ${kinds.forked}, ${kinds.spawned}; CPU from /proc/PID/stat (10 ms ticks) over the ${iterations} measured execs`],
    durationMs: now() - started,
  };
  emitReport(report, values['report-json']);
}

await runMain(main);
