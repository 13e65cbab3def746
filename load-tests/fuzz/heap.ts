// One full GC in a replica, through its inspector (the replicas of a fuzz run listen on a loopback
// inspector port), with V8's heap use before and after.
//
// Why: an idle Node process does not collect its garbage. After the storm a replica's heap holds
// tens of MiB of dead objects that no GC will visit until something allocates again, so VmRSS
// after any settle period measures when the last GC happened, not what the storm left behind. One
// full GC (what DevTools' "collect garbage" does), on the baseline and on the end state alike,
// makes VmRSS measure retained memory: a leak stays, garbage goes. The report always shows VmRSS
// without the GC too.
import type { ReplicaProcess } from '../../test/harness/cluster.ts';

/** The inspector's WebSocket URL a replica printed on stderr ("Debugger listening on ws://…"). */
export function inspectorUrl(r: ReplicaProcess): string | null {
  const cached = urls.get(r);
  if (cached) return cached;
  const m = /Debugger listening on (ws:\/\/\S+)/.exec(r.logs.join(''));
  if (m) urls.set(r, m[1]!);
  return m ? m[1]! : null;
}
/** Read once at start: the log the line is in is trimmed during the run. */
const urls = new Map<ReplicaProcess, string>();

async function cdp(url: string, calls: { method: string; params?: object }[]): Promise<unknown[]> {
  const ws = new WebSocket(url);
  await new Promise<void>((resolve, reject) => {
    ws.onopen = () => resolve();
    ws.onerror = () => reject(new Error(`inspector ${url} unreachable`));
  });
  const results: unknown[] = [];
  try {
    for (let id = 0; id < calls.length; id++) {
      const answer = new Promise<unknown>((resolve) => {
        ws.onmessage = (ev) => {
          const msg = JSON.parse(String(ev.data)) as { id?: number; result?: unknown };
          if (msg.id === id) resolve(msg.result);
        };
      });
      ws.send(JSON.stringify({ id, ...calls[id] }));
      results.push(await answer);
    }
  } finally {
    ws.close();
  }
  return results;
}

/** Runs one full GC in the replica; returns a line with its V8 heap use before and after. */
export async function fullGc(r: ReplicaProcess): Promise<string> {
  const url = inspectorUrl(r);
  if (!url) throw new Error(`${r.id} has no inspector (was it started with --inspect?)`);
  const mib = (n: number) => `${(n / 1024 / 1024).toFixed(1)} MiB`;
  const [before, , after] = (await cdp(url, [{ method: 'Runtime.getHeapUsage' }, { method: 'HeapProfiler.collectGarbage' }, { method: 'Runtime.getHeapUsage' }])) as { usedSize: number; totalSize: number }[];
  return `${r.id}: V8 heap used ${mib(before!.usedSize)} of ${mib(before!.totalSize)} → after a full GC ${mib(after!.usedSize)} of ${mib(after!.totalSize)}`;
}
