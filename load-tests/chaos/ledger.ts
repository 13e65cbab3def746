// Every client call of the chaos workload is classified here: an expected result, a retriable
// failure (UNAVAILABLE, with a message), or a violation (a wrong result, another status, a hang).
export type Outcome = 'ok' | 'retriable' | 'wrong' | 'hang';

export interface Violation {
  kind: string;
  detail: string;
  atMs: number;
}

export class Ledger {
  readonly counts = new Map<string, Record<Outcome, number>>();
  readonly violations: Violation[] = [];
  readonly retriableMessages = new Map<string, number>();
  private readonly t0: number;

  constructor(t0: number) {
    this.t0 = t0;
  }

  record(kind: string, outcome: Outcome, detail = ''): void {
    const c = this.counts.get(kind) ?? { ok: 0, retriable: 0, wrong: 0, hang: 0 };
    c[outcome]++;
    this.counts.set(kind, c);
    if (outcome === 'retriable') this.retriableMessages.set(detail, (this.retriableMessages.get(detail) ?? 0) + 1);
    if (outcome === 'wrong' || outcome === 'hang') this.violate(`${kind}: ${outcome}`, detail);
  }

  violate(kind: string, detail: string): void {
    this.violations.push({ kind, detail, atMs: Date.now() - this.t0 });
  }
}

/** What a failed gRPC call means for the ledger. Only UNAVAILABLE (with a message) is retriable. */
export function classifyError(err: unknown, clientDeadlineHit: boolean): { outcome: Outcome; detail: string } {
  const e = err as { code?: number; details?: string; message?: string };
  if (clientDeadlineHit) return { outcome: 'hang', detail: `no answer before the client deadline (${e.details ?? e.message})` };
  if (e.code === 14 && e.details) return { outcome: 'retriable', detail: normalise(e.details) };
  return { outcome: 'wrong', detail: `status ${e.code}: ${e.details ?? e.message}` };
}

/** Group retriable messages by shape (ids and numbers removed) for the summary. */
function normalise(details: string): string {
  return details.replace(/[0-9a-f]{8}-[0-9a-f-]{27}/g, '<id>').replace(/\b\d+\b/g, 'N').slice(0, 120);
}
