// Exec latency of `true` through the owner replica vs through a non-owner (one relay hop),
// measured side by side in one run (interleaved, so machine noise hits both alike).
//   node load-tests/exec-latency.ts [--iterations 300] [--warmup 20]
import { parseArgs } from 'node:util';
import { summarise, ms } from './stats.ts';
import { COMMON_OPTIONS, emitReport, now, runMain, type BenchReport } from './bench.ts';
import { startRelayPair } from './env.ts';
import { execOnce } from './exec-client.ts';

export interface ExecLatencyOptions {
  iterations: number;
  warmup: number;
}

export async function run(opts: ExecLatencyOptions): Promise<BenchReport> {
  const t0 = now();
  const { sandbox: sbx, direct, relayed } = await startRelayPair('bench-latency');
  for (let i = 0; i < opts.warmup; i++) {
    await execOnce(direct, sbx.id);
    await execOnce(relayed, sbx.id);
  }
  const d: number[] = [];
  const r: number[] = [];
  for (let i = 0; i < opts.iterations; i++) {
    d.push(await execOnce(direct, sbx.id));
    r.push(await execOnce(relayed, sbx.id));
  }
  const sd = summarise(d);
  const sr = summarise(r);
  return {
    id: 'exec-latency',
    title: 'Exec latency: direct vs relayed',
    command: `node load-tests/exec-latency.ts --iterations ${opts.iterations} --warmup ${opts.warmup}`,
    tables: [
      {
        caption: `exec latency of \`true\`, ${opts.iterations} iterations each after ${opts.warmup} warm-up pairs, interleaved; local driver`,
        headers: ['path', 'p50', 'p90', 'p99', 'mean'],
        rows: [
          ['direct (owner replica)', ms(sd.p50), ms(sd.p90), ms(sd.p99), ms(sd.mean)],
          ['relayed (non-owner → owner)', ms(sr.p50), ms(sr.p90), ms(sr.p99), ms(sr.mean)],
          ['relay overhead', ms(sr.p50 - sd.p50), ms(sr.p90 - sd.p90), ms(sr.p99 - sd.p99), ms(sr.mean - sd.mean)],
          ['ratio relayed/direct', (sr.p50 / sd.p50).toFixed(3), (sr.p90 / sd.p90).toFixed(3), (sr.p99 / sd.p99).toFixed(3), (sr.mean / sd.mean).toFixed(3)],
        ],
      },
    ],
    notes: [`targets (issue 7): p50 overhead < 1 ms, p99 overhead < 5 ms`],
    durationMs: now() - t0,
  };
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: { iterations: { type: 'string', default: '300' }, warmup: { type: 'string', default: '20' }, ...COMMON_OPTIONS },
  });
  await runMain(async () => {
    const report = await run({ iterations: Number(values.iterations), warmup: Number(values.warmup) });
    emitReport(report, values['report-json']);
  });
}
