// The checks after the storm: every replica alive and never restarted, its resident memory back
// near where it started, and every well-formed request still served through every replica.
import type { Cluster } from '../../test/harness/cluster.ts';
import { runCli } from '../../test/harness/cluster.ts';
import { openShellClient, unaryCall } from '../../test/harness/grpc-client.ts';
import { rssBytes } from '../../test/harness/sandbox.ts';
import { sleep, waitFor } from '../../test/harness/wait.ts';

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

export function rssAll(pids: number[]): Promise<number[]> {
  return Promise.all(pids.map((p) => rssBytes(p).catch(() => 0)));
}

export const mib = (b: number) => `${(b / 1024 / 1024).toFixed(1)} MiB`;

/** Resident size of the process's brk heap (glibc malloc's main arena: native allocations, not V8's). */
export async function mallocHeapBytes(pid: number): Promise<number> {
  const { readFile } = await import('node:fs/promises');
  let inHeap = false;
  let kb = 0;
  for (const line of (await readFile(`/proc/${pid}/smaps`, 'utf8').catch(() => '')).split('\n')) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) inHeap = line.endsWith('[heap]');
    else if (inHeap && line.startsWith('Rss:')) kb += Number(line.split(/\s+/)[1]);
  }
  return kb * 1024;
}

/** Every replica still runs as the process it started as. */
export function aliveCheck(cluster: Cluster, pids: number[]): Check[] {
  return cluster.replicas.map((r, i) => {
    const p = r.proc;
    const ok = !!p && p.pid === pids[i] && p.exitCode === null && p.signalCode === null;
    return { name: `replica ${r.id} alive, not restarted`, ok, detail: ok ? `pid ${pids[i]}` : `pid ${p?.pid ?? 'none'} exit ${p?.exitCode ?? ''} ${p?.signalCode ?? ''} (started as ${pids[i]})` };
  });
}

/**
 * Waits at least `minMs`, then polls VmRSS every second up to `maxMs` until every replica is
 * within `tolerance` of its baseline. If it is not by then and `gc` is given, runs one full GC in
 * each replica (see heap.ts for why) and judges VmRSS after it; both readings are reported.
 */
export async function settleRss(
  pids: number[],
  baseline: number[],
  tolerance: number,
  opts: { minMs: number; maxMs: number; trace: (line: string) => void; gc?: () => Promise<string[]>; releaseName?: string },
): Promise<{ checks: Check[]; withoutGc: number[]; after: number[]; gcLines: string[]; waitedMs: number }> {
  const started = Date.now();
  await sleep(opts.minMs);
  let after = await rssAll(pids);
  const within = () => after.every((v, i) => v <= baseline[i]! * (1 + tolerance));
  let lastTrace = Date.now();
  while (!within() && Date.now() - started < opts.maxMs) {
    await sleep(1000);
    after = await rssAll(pids);
    if (Date.now() - lastTrace >= 5000) {
      lastTrace = Date.now();
      opts.trace(`settling ${Math.round((Date.now() - started) / 1000)} s: RSS ${after.map(mib).join(', ')}`);
    }
  }
  const withoutGc = after;
  const waitedMs = Date.now() - started;
  let gcLines: string[] = [];
  if (!within() && opts.gc) {
    gcLines = await opts.gc();
    await sleep(2000);
    after = await rssAll(pids);
  }
  const checks = pids.map((_, i) => {
    const ratio = after[i]! / baseline[i]!;
    const how = after === withoutGc ? 'without a GC' : `after ${opts.releaseName ?? 'one full GC'} (without: ${mib(withoutGc[i]!)}, ${((withoutGc[i]! / baseline[i]! - 1) * 100).toFixed(1)} %)`;
    return {
      name: `replica r${i} RSS within ${Math.round(tolerance * 100)} % of baseline`,
      ok: ratio <= 1 + tolerance,
      detail: `baseline ${mib(baseline[i]!)}, after ${Math.round(waitedMs / 1000)} s settle ${mib(after[i]!)} (${((ratio - 1) * 100).toFixed(1)} %) ${how}`,
    };
  });
  return { checks, withoutGc, after, gcLines, waitedMs };
}

/** Health on every port, then a sandbox created, exec'd into and deleted through each replica. */
export async function wellFormedChecks(cluster: Cluster, target: { name: string }, tag: string): Promise<Check[]> {
  const checks: Check[] = [];
  const record = async (name: string, fn: () => Promise<string>) => {
    try {
      checks.push({ name, ok: true, detail: await fn() });
    } catch (err) {
      checks.push({ name, ok: false, detail: String(err instanceof Error ? err.message : err).slice(0, 400) });
    }
  };
  for (const r of cluster.replicas) {
    await record(`${r.id} /healthz and /readyz`, async () => {
      for (const path of ['/healthz', '/readyz', '/metrics']) {
        const res = await fetch(`${r.httpUrl}${path}`);
        if (res.status !== 200) throw new Error(`${path} answered ${res.status}`);
        await res.arrayBuffer();
      }
      return '200';
    });
    await record(`${r.id} gRPC Health with the token`, async () => {
      const client = openShellClient(r.grpcAddress);
      try {
        const res = await unaryCall<{ status: number }>(client, 'Health', {});
        return `status ${res.status}`;
      } finally {
        client.close();
      }
    });
    await record(`${r.id} exec in the sandbox the fuzzer attacked (${target.name})`, () => execEcho(r.grpcAddress, target.name));
    const name = `fuzz-check-${tag}-${r.id}`;
    await record(`${r.id} create, exec, delete a sandbox`, async () => {
      const created = await runCli(['sandbox', 'create', '--name', name, '--detach', '-o', 'json', '--', 'sleep', 'infinity'], { gateway: r.grpcAddress });
      if (created.code !== 0) throw new Error(`create: ${created.stderr}`);
      await execEcho(r.grpcAddress, name);
      const deleted = await runCli(['sandbox', 'delete', name], { gateway: r.grpcAddress });
      if (deleted.code !== 0) throw new Error(`delete: ${deleted.stderr}`);
      return 'ok';
    });
  }
  return checks;
}

/** `sandbox exec NAME -- echo fuzz-ok` through `gateway`, retried until the sandbox is ready. */
export async function execEcho(gateway: string, name: string): Promise<string> {
  const started = Date.now();
  await waitFor(`exec in ${name} via ${gateway}`, async () => {
    const res = await runCli(['sandbox', 'exec', name, '--', 'echo', 'fuzz-ok'], { gateway, timeoutMs: 30_000 });
    if (res.code === 0 && res.stdout.toString().trim() === 'fuzz-ok') return true;
    throw new Error(`exit ${res.code}: ${res.stderr.slice(0, 300)}`);
  }, 60_000, 500);
  return `ok in ${Date.now() - started} ms`;
}

/**
 * Well-formed traffic only, before the RSS baseline: what a replica in service has done before
 * any hostile input arrives, so that the baseline holds its steady-state buffers, pools and
 * compiled code ("where it started" = in service, not freshly booted). Through every replica,
 * with the admin token: `rounds` of the read-only unary methods, then `concurrency` concurrent
 * execs into the target sandbox (64 KiB of stdin each, echoed back; through the replica that
 * does not own it they ride a peer link), then a sandbox created, exec'd into and deleted.
 * Returns a line for the log; throws if any of it fails (a warm-up that fails is no baseline).
 */
export async function wellFormedWarmup(cluster: Cluster, target: { id: string; name: string }, opts: { rounds: number; concurrency: number; tag: string }): Promise<string> {
  const started = Date.now();
  let unary = 0;
  let execs = 0;
  const stdin = Buffer.alloc(64 * 1024, 'w');
  for (const r of cluster.replicas) {
    const client = openShellClient(r.grpcAddress);
    try {
      for (let round = 0; round < opts.rounds; round++) {
        for (const [method, req] of [
          ['Health', {}],
          ['GetGatewayInfo', {}],
          ['GetCurrentUser', {}],
          ['ListSandboxes', {}],
          ['ListWorkspaces', {}],
          ['GetSandbox', { name: target.name }],
        ] as const) {
          await unaryCall(client, method, req);
          unary++;
        }
        await Promise.all(
          Array.from({ length: opts.concurrency }, () => new Promise<void>((resolve, reject) => {
            let out = 0;
            const call = client.ExecSandbox({ sandbox_id: target.id, command: ['cat'], environment: {}, stdin, timeout_seconds: 30 });
            call.on('data', (ev: { stdout?: { data?: Buffer } }) => (out += ev.stdout?.data?.length ?? 0));
            call.on('error', reject);
            call.on('end', () => (out === stdin.length ? resolve() : reject(new Error(`warm-up exec via ${r.id}: ${out} of ${stdin.length} bytes back`))));
          })),
        );
        execs += opts.concurrency;
      }
    } finally {
      client.close();
    }
    const name = `fuzz-warmup-${opts.tag}-${r.id}`;
    const created = await runCli(['sandbox', 'create', '--name', name, '--detach', '-o', 'json', '--', 'sleep', 'infinity'], { gateway: r.grpcAddress });
    if (created.code !== 0) throw new Error(`warm-up create via ${r.id}: ${created.stderr}`);
    await execEcho(r.grpcAddress, name);
    const deleted = await runCli(['sandbox', 'delete', name], { gateway: r.grpcAddress });
    if (deleted.code !== 0) throw new Error(`warm-up delete via ${r.id}: ${deleted.stderr}`);
  }
  return `well-formed warm-up: ${unary} unary calls, ${execs} execs (${opts.concurrency} at a time, 64 KiB stdin each), ${cluster.replicas.length} sandboxes created, exec'd into and deleted, in ${((Date.now() - started) / 1000).toFixed(1)} s`;
}
