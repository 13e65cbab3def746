// Issue 16, item 1: what the native wrapper (apps/supervisor/native/sandgate-launch.c) saves an
// exec end to end. Two sandboxes on one replica: the first started while the helper is hidden
// (not executable, so its supervisor confines through the shell chain: bash, nsenter, setpriv,
// env -i), the second with it. Then `true` is run in each through the replica, interleaved ABBA, so
// the machine's noise hits both alike; each sandbox's log says which wrapper its supervisor uses.
//   node load-tests/launcher-exec.ts [--iterations 300] [--warmup 20]
import fs from 'node:fs';
import { parseArgs } from 'node:util';
import { NATIVE_LAUNCHER } from '@sandgate/supervisor';
import { runCli } from '../test/harness/cluster.ts';
import { openShellClient } from '../test/harness/grpc-client.ts';
import { createSandbox } from '../test/harness/sandbox.ts';
import { COMMON_OPTIONS, emitReport, now, onCleanup, runMain, type BenchReport } from './bench.ts';
import { confinedLogField, startEnv } from './env.ts';
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
  if (!fs.existsSync(NATIVE_LAUNCHER)) throw new Error(`${NATIVE_LAUNCHER} not built (npm install runs apps/supervisor/native/build.sh)`);
  const { cluster } = await startEnv({ replicas: 1 });
  const gateway = cluster.replicas[0]!.grpcAddress;
  const mode = fs.statSync(NATIVE_LAUNCHER).mode & 0o7777;
  onCleanup('native launcher mode', () => fs.chmodSync(NATIVE_LAUNCHER, mode));
  fs.chmodSync(NATIVE_LAUNCHER, 0o644);
  let chain;
  try {
    chain = await createSandbox(gateway, 'bench-shell-chain');
  } finally {
    fs.chmodSync(NATIVE_LAUNCHER, mode);
  }
  onCleanup('sandbox bench-shell-chain', () => runCli(['sandbox', 'delete', 'bench-shell-chain'], { gateway }));
  const native = await createSandbox(gateway, 'bench-native');
  onCleanup('sandbox bench-native', () => runCli(['sandbox', 'delete', 'bench-native'], { gateway }));
  const kinds = { chain: confinedLogField(cluster.stateDir, chain.id, 'launcher'), native: confinedLogField(cluster.stateDir, native.id, 'launcher') };
  if (kinds.chain !== 'shell chain' || !kinds.native.endsWith('sandgate-launch')) throw new Error(`unexpected wrappers: ${JSON.stringify(kinds)}`);
  const client = openShellClient(gateway);
  onCleanup('grpc client', () => client.close());
  const { a: c, b: n } = await execPairsAbba(client, chain.id, native.id, iterations, warmup);
  const sc = summarise(c);
  const sn = summarise(n);
  const paired = summarise(n.map((v, i) => v - c[i]!));
  const row = (label: string, s: ReturnType<typeof summarise>) => [label, ms(s.p50), ms(s.p90), ms(s.p99), ms(s.mean)];
  const report: BenchReport = {
    id: 'launcher-exec',
    title: 'Exec of `true`: the shell chain vs the native wrapper',
    command: `node load-tests/launcher-exec.ts --iterations ${iterations} --warmup ${warmup}`,
    tables: [
      {
        caption: `exec latency of \`true\` through the owner replica (local driver, one replica), ${iterations} each after ${warmup} warm-up pairs, interleaved ABBA; one sandbox confines through the shell chain, the other through the native wrapper`,
        headers: ['path', 'p50', 'p90', 'p99', 'mean'],
        rows: [row('shell chain (bash, nsenter, setpriv, env -i)', sc), row('native wrapper (sandgate-launch)', sn), row('native − shell chain, paired (same ABBA pair)', paired)],
      },
      {
        caption: 'ratios (native / shell chain; below 1.00 = faster)',
        headers: ['', 'p50', 'p99', 'mean'],
        rows: [['native / shell chain', (sn.p50 / sc.p50).toFixed(2), (sn.p99 / sc.p99).toFixed(2), (sn.mean / sc.mean).toFixed(2)]],
      },
    ],
    notes: [`wrappers as each sandbox's supervisor logged them: ${kinds.chain}, ${kinds.native}`],
    durationMs: now() - started,
  };
  emitReport(report, values['report-json']);
}

await runMain(main);
