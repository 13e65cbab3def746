// Counts per target: inputs sent and what came back (a gRPC status, an HTTP status, a reset, the
// connection closed, or nothing before the timeout), printed as one table.

export class Tally {
  readonly target: string;
  sent = 0;
  /** Sum of the inputs' wall-clock time (ms), for the mean. */
  totalMs = 0;
  readonly outcomes = new Map<string, number>();
  /** Free-form extra counts (e.g. per method) printed under the target. */
  readonly notes = new Map<string, number>();

  constructor(target: string) {
    this.target = target;
  }

  record(outcome: string): void {
    this.sent++;
    this.outcomes.set(outcome, (this.outcomes.get(outcome) ?? 0) + 1);
  }

  /** Remembers which kind of input got no answer, so a report can say what hangs. */
  noteTimeout(outcome: string | string[], kind: string): void {
    for (const o of Array.isArray(outcome) ? outcome : [outcome]) if (o.replace(/^((burst|gRPC bytes|replay control|replayed|control\+garbage|refused): )+/, '').startsWith('timeout')) this.note(`timeout-on:${kind}`);
  }

  note(key: string, n = 1): void {
    this.notes.set(key, (this.notes.get(key) ?? 0) + n);
  }

  /**
   * Answers (a gRPC or HTTP status, a reset or GOAWAY, a protocol frame), the connection closed
   * without one, timeouts (no answer by the deadline), and streams the fuzzer itself reset or
   * held open on purpose (bidi streams it never half-closed).
   */
  summary(): { answered: number; closed: number; timeouts: number; byFuzzer: number; other: number } {
    const s = { answered: 0, closed: 0, timeouts: 0, byFuzzer: 0, other: 0 };
    for (const [label, n] of this.outcomes) {
      // Labels may carry what the input was ("burst: ", the peer target's "gRPC bytes: ", "replayed: refused: "…).
      const k = label.replace(/^((burst|gRPC bytes|replay control|replayed|control\+garbage|refused): )+/, '');
      if (k.startsWith('timeout')) s.timeouts += n;
      else if (k.startsWith('closed')) s.closed += n;
      else if (k.startsWith('still open')) s.timeouts += n;
      else if (k.startsWith('grpc ') || k.startsWith('http ') || k.startsWith('rst ') || k.startsWith('answered') || k.startsWith('PROOF')) s.answered += n;
      else if (k.startsWith('reset by fuzzer') || k.startsWith('held open')) s.byFuzzer += n;
      else s.other += n;
    }
    return s;
  }
}

export function renderTallies(tallies: Tally[]): string {
  const lines: string[] = [];
  lines.push('| target | sent | answered | connection closed | timeouts | reset/held by fuzzer | other | mean ms |');
  lines.push('|---|---:|---:|---:|---:|---:|---:|---:|');
  let total = 0;
  for (const t of tallies) {
    const s = t.summary();
    total += t.sent;
    lines.push(`| ${t.target} | ${t.sent} | ${s.answered} | ${s.closed} | ${s.timeouts} | ${s.byFuzzer} | ${s.other} | ${t.sent ? Math.round(t.totalMs / t.sent) : 0} |`);
  }
  lines.push(`| **total** | **${total}** | | | | | | |`);
  lines.push('');
  for (const t of tallies) {
    lines.push(`${t.target}: ${[...t.outcomes].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k} ${n}`).join('; ')}`);
    const notes = [...t.notes].filter(([k]) => !k.startsWith('timeout-on:')).sort((a, b) => a[0].localeCompare(b[0]));
    const hangs = [...t.notes].filter(([k]) => k.startsWith('timeout-on:')).sort((a, b) => b[1] - a[1]);
    if (notes.length) lines.push(`  inputs: ${notes.map(([k, n]) => `${k}=${n}`).join(' ')}`);
    if (hangs.length) lines.push(`  no answer by the deadline on: ${hangs.map(([k, n]) => `${k.slice('timeout-on:'.length)}=${n}`).join(' ')}`);
  }
  return lines.join('\n');
}
