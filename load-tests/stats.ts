// Percentiles and table printing for the benchmarks.
export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[idx]!;
}

export interface Summary {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  mean: number;
}

export function summarise(samples: number[]): Summary {
  const s = [...samples].sort((a, b) => a - b);
  return {
    n: s.length,
    p50: percentile(s, 50),
    p90: percentile(s, 90),
    p99: percentile(s, 99),
    mean: s.reduce((a, b) => a + b, 0) / Math.max(1, s.length),
  };
}

export const ms = (v: number) => `${v.toFixed(2)} ms`;

export function table(headers: string[], rows: (string | number)[][]): string {
  const cells = [headers, ...rows.map((r) => r.map(String))];
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => r[i]!.length)));
  const line = (r: string[]) => '| ' + r.map((c, i) => c.padEnd(widths[i]!)).join(' | ') + ' |';
  return [line(cells[0]!), '|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|', ...cells.slice(1).map(line)].join('\n');
}
