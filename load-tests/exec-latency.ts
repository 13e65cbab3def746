// Exec latency of `true` through the owner replica vs through a non-owner (one relay hop),
// measured side by side in one run (interleaved, so machine noise hits both alike).
//   node load-tests/exec-latency.ts [--iterations 300] [--warmup 20]
import { spawn } from 'node:child_process';
import { parseArgs } from 'node:util';
import { summarise, ms } from './stats.ts';
import { COMMON_OPTIONS, emitReport, now, runMain, type BenchReport } from './bench.ts';
import { readFileSync } from 'node:fs';
import { startRelayPair, supervisorPid } from './env.ts';
import { execOnce } from './exec-client.ts';
import type { AnyClient } from '../test/harness/grpc-client.ts';
import type { ExecSandboxEvent } from '@sandgate/protocols';


type Summary = ReturnType<typeof summarise>;

/** Direct, relayed, the paired-difference overhead (the figure that counts) and, for contrast, the difference of percentiles. */
function overheadRows(direct: Summary, relayed: Summary, paired: Summary, pairing: string): string[][] {
  const row = (label: string, s: Pick<Summary, 'p50' | 'p90' | 'p99' | 'mean'>) => [label, ms(s.p50), ms(s.p90), ms(s.p99), ms(s.mean)];
  return [
    row('direct (owner replica)', direct),
    row('relayed (non-owner → owner)', relayed),
    row(`relay overhead: paired difference (${pairing})`, paired),
    row('(difference of the percentiles above; not an overhead figure)', {
      p50: relayed.p50 - direct.p50,
      p90: relayed.p90 - direct.p90,
      p99: relayed.p99 - direct.p99,
      mean: relayed.mean - direct.mean,
    }),
  ];
}

export interface ExecLatencyOptions {
  iterations: number;
  warmup: number;
}

export async function run(opts: ExecLatencyOptions): Promise<BenchReport> {
  const t0 = now();
  const pair = await startRelayPair('bench-latency');
  const { sandbox: sbx, direct, relayed } = pair;
  for (let i = 0; i < opts.warmup; i++) {
    await execOnce(direct, sbx.id);
    await execOnce(relayed, sbx.id);
  }
  const d: number[] = [];
  const r: number[] = [];
  const b: number[] = [];
  for (let i = 0; i < opts.warmup; i++) await bareSpawn();
  // ABBA: pairs alternate direct-first and relayed-first, so whatever the second run of a pair
  // inherits from the first (a warm cache, a GC the first one triggered) does not bias one path.
  // The bare spawn (issue 16's floor) goes between them, so it sees the same machine.
  for (let i = 0; i < opts.iterations; i++) {
    if (i % 2 === 0) {
      d.push(await execOnce(direct, sbx.id));
      b.push(await bareSpawn());
      r.push(await execOnce(relayed, sbx.id));
    } else {
      r.push(await execOnce(relayed, sbx.id));
      b.push(await bareSpawn());
      d.push(await execOnce(direct, sbx.id));
    }
  }
  const sd = summarise(d);
  const sr = summarise(r);
  const sb = summarise(b);
  const overSpawn = summarise(d.map((v, i) => v - b[i]!));
  // Each relayed exec against the direct one of its pair: machine noise that spans a pair cancels
  // out, which the difference of two percentiles does not do. These are the overhead figures.
  const paired = summarise(r.map((v, i) => v - d[i]!));
  // The relay hop alone, without process start-up: one line echoed by `cat` in an open
  // interactive exec, through each replica, interleaved.
  const echoDirect = await echoSession(direct, sbx.id);
  const echoRelayed = await echoSession(relayed, sbx.id);
  const ed: number[] = [];
  const er: number[] = [];
  for (let i = 0; i < opts.iterations; i++) {
    if (i % 2 === 0) {
      ed.push(await echoDirect.roundTrip());
      er.push(await echoRelayed.roundTrip());
    } else {
      er.push(await echoRelayed.roundTrip());
      ed.push(await echoDirect.roundTrip());
    }
  }
  const echoPaired = summarise(er.map((v, i) => v - ed[i]!));
  echoDirect.close();
  echoRelayed.close();
  const sed = summarise(ed);
  const ser = summarise(er);
  // CPU per exec of each process on the way, direct then relayed (blocks, not interleaved: a
  // process's CPU counter cannot tell two paths apart).
  const procs = { owner: pair.owner.proc!.pid!, entry: pair.other.proc!.pid!, supervisor: (await supervisorPid(sbx.id))!, client: process.pid };
  const cpuRows: string[][] = [];
  for (const [label, client] of [
    ['direct', direct],
    ['relayed', relayed],
  ] as const) {
    const before = Object.values(procs).map(cpuMs);
    for (let i = 0; i < opts.iterations; i++) await execOnce(client, sbx.id);
    const used = Object.values(procs).map((pid, i) => (cpuMs(pid) - before[i]!) / opts.iterations);
    cpuRows.push([label, ...used.map((v) => `${v.toFixed(2)} ms`), `${used.reduce((a, b) => a + b, 0).toFixed(2)} ms`]);
  }
  return {
    id: 'exec-latency',
    title: 'Exec latency: direct vs relayed',
    command: `node load-tests/exec-latency.ts --iterations ${opts.iterations} --warmup ${opts.warmup}`,
    tables: [
      {
        caption: `exec latency of \`true\`, ${opts.iterations} iterations each after ${opts.warmup} warm-up pairs, interleaved ABBA; local driver`,
        headers: ['path', 'p50', 'p90', 'p99', 'mean'],
        rows: overheadRows(sd, sr, paired, 'relayed − direct of the same ABBA pair'),
      },
      {
        caption: `exec of \`true\` through the owner against a bare \`child_process.spawn('/bin/true')\` from this (the client's) Node process, same iterations, interleaved (issue 16's floor)`,
        headers: ['path', 'p50', 'p90', 'p99', 'mean'],
        rows: [
          ['bare spawn of /bin/true', ms(sb.p50), ms(sb.p90), ms(sb.p99), ms(sb.mean)],
          ['exec through the owner', ms(sd.p50), ms(sd.p90), ms(sd.p99), ms(sd.mean)],
          ['exec − spawn, paired', ms(overSpawn.p50), ms(overSpawn.p90), ms(overSpawn.p99), ms(overSpawn.mean)],
          ['exec / spawn (target p50 ≤ 2)', ratio(sd.p50, sb.p50), ratio(sd.p90, sb.p90), ratio(sd.p99, sb.p99), ratio(sd.mean, sb.mean)],
        ],
      },
      {
        caption: `stdin → stdout round trip of one line through an open interactive \`cat\` exec, ${opts.iterations} each, interleaved ABBA (the relay hop without process start-up)`,
        headers: ['path', 'p50', 'p90', 'p99', 'mean'],
        rows: overheadRows(sed, ser, echoPaired, 'same ABBA pair'),
      },
      {
        caption: `CPU time (user + system, from /proc, 10 ms ticks) per exec of \`true\`, ${opts.iterations} direct then ${opts.iterations} relayed: what each path costs the machine`,
        headers: ['path', 'owner replica', 'entry replica', 'supervisor', 'client', 'all four'],
        rows: cpuRows,
      },
    ],
    notes: [`targets (issue 7): p50 overhead < 1 ms, p99 overhead < 5 ms, judged on the paired differences; issue 16: exec p50 ≤ 2 × the bare spawn's, relay overhead p50 < 0.5 ms, p99 < 2 ms`],
    durationMs: now() - t0,
  };
}

/** CPU time (user + system) a process has used, in ms. */
function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15)
  return (ticks * 1000) / CLOCK_TICKS_PER_SECOND;
}
/** USER_HZ: 100 on every Linux this runs on (getconf CLK_TCK). */
const CLOCK_TICKS_PER_SECOND = 100;

/** ms from spawning /bin/true until it exited: the floor an exec is measured against. */
function bareSpawn(): Promise<number> {
  const t = now();
  return new Promise((resolve, reject) => {
    const child = spawn('/bin/true', [], { stdio: 'ignore' });
    child.once('error', reject);
    child.once('exit', () => resolve(now() - t));
  });
}

const ratio = (a: number, b: number) => (a / b).toFixed(2);

/** An interactive `cat` through one replica; each round trip writes a line and waits for it back. */
async function echoSession(client: AnyClient, sandboxId: string): Promise<{ roundTrip(): Promise<number>; close(): void }> {
  const call = client.ExecSandboxInteractive();
  let waiting: ((ms: number) => void) | null = null;
  let sentAt = 0;
  let received = '';
  call.on('data', (ev: ExecSandboxEvent) => {
    if (!ev.stdout?.data) return;
    received += Buffer.from(ev.stdout.data).toString();
    if (received.endsWith('\n') && waiting) {
      received = '';
      const done = waiting;
      waiting = null;
      done(now() - sentAt);
    }
  });
  call.on('error', () => undefined);
  call.write({ start: { sandbox_id: sandboxId, command: ['cat'], environment: {} } });
  const roundTrip = () =>
    new Promise<number>((resolve) => {
      waiting = resolve;
      sentAt = now();
      call.write({ stdin: Buffer.from('ping\n') });
    });
  for (let i = 0; i < 20; i++) await roundTrip(); // warm-up (and proof the exec is running)
  return { roundTrip, close: () => call.end() };
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
