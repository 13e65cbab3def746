// What every benchmark shares: the report shape (tables + notes) that scripts print and hand to
// `run-all.ts`, and the cleanup discipline (everything a benchmark starts is stopped again, also
// on an error or Ctrl-C).
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { table } from './stats.ts';

export interface BenchTable {
  /** One line above the table: what was measured, and how. */
  caption: string;
  headers: string[];
  rows: (string | number)[][];
}

export interface BenchReport {
  /** File name without `.ts` (exec-latency, …). */
  id: string;
  title: string;
  /** How to reproduce this run exactly. */
  command: string;
  tables: BenchTable[];
  /** Free-form observations (skips, failures, health checks), one per line. */
  notes: string[];
  durationMs: number;
}

/** The markdown of one report: caption, table, notes. */
export function renderReport(r: BenchReport, opts: { heading?: boolean } = {}): string {
  const out: string[] = [];
  if (opts.heading) out.push(`## ${r.title}`, '', `Reproduce: \`${r.command}\` (took ${(r.durationMs / 1000).toFixed(1)} s)`, '');
  for (const t of r.tables) {
    out.push(t.caption, '', table(t.headers, t.rows), '');
  }
  for (const n of r.notes) out.push(`- ${n}`);
  if (r.notes.length) out.push('');
  return out.join('\n');
}

/** Flags every benchmark accepts besides its own. */
export const COMMON_OPTIONS = {
  'report-json': { type: 'string' },
} as const;

/** Prints the report and, when asked (run-all does), writes it as JSON. */
export function emitReport(r: BenchReport, reportJson: string | undefined): void {
  console.log(renderReport(r));
  if (reportJson) {
    mkdirSync(path.dirname(reportJson), { recursive: true });
    writeFileSync(reportJson, JSON.stringify(r, null, 2));
  }
}

// ---- cleanup -------------------------------------------------------------------------------

type Cleanup = () => Promise<unknown> | unknown;
const cleanups: { what: string; fn: Cleanup }[] = [];

/** Registers a cleanup; they run in reverse order when the benchmark ends, however it ends. */
export function onCleanup(what: string, fn: Cleanup): void {
  cleanups.push({ what, fn });
}

export async function runCleanups(): Promise<void> {
  while (cleanups.length) {
    const { what, fn } = cleanups.pop()!;
    try {
      await withTimeout(Promise.resolve(fn()), 60_000, `cleanup '${what}'`);
    } catch (err) {
      console.error(`cleanup '${what}' failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
}

let interrupted = false;
/**
 * Runs a benchmark's main: cleanups afterwards (also on an error or SIGINT/SIGTERM), exit code 1
 * on failure. `main` returns the report; the caller prints it.
 */
export async function runMain(main: () => Promise<void>): Promise<void> {
  const onSignal = (sig: NodeJS.Signals) => {
    if (interrupted) return;
    interrupted = true;
    console.error(`${sig}: cleaning up`);
    void runCleanups().finally(() => process.exit(130));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  let failed = false;
  try {
    await main();
  } catch (err) {
    failed = true;
    console.error(err);
  } finally {
    await runCleanups();
  }
  // Lingering handles (grpc channels, timers) must not keep a finished benchmark alive.
  process.exit(failed ? 1 : 0);
}

export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
    }),
  ]);
}

// ---- small formatting helpers ----------------------------------------------------------------

export const now = () => Number(process.hrtime.bigint()) / 1e6;
export const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
export const kib = (bytes: number) => `${(bytes / 1024).toFixed(1)} KiB`;
export const fixed = (v: number, digits = 2) => (Number.isFinite(v) ? v.toFixed(digits) : 'n/a');
export const pct = (v: number) => (Number.isFinite(v) ? `${v >= 0 ? '+' : ''}${(v * 100).toFixed(1)}%` : 'n/a');
