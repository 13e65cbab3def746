// ExecSandbox from the client's side, for the benchmarks: run an argv to its exit and time it,
// counting output bytes without keeping them.
import type { ClientReadableStream, ServiceError } from '@grpc/grpc-js';
import type { ExecSandboxEvent } from '@sandgate/protocols';
import type { AnyClient } from '../test/harness/grpc-client.ts';
import { now } from './bench.ts';

export interface ExecResult {
  exitCode: number;
  /** Wall time from the call to the end of the stream. */
  ms: number;
  /** From the call to the first output byte (NaN when there was none). */
  firstByteMs: number;
  stdoutBytes: number;
  stderrBytes: number;
  /** Output events received (one per supervisor frame: frames are relayed unchanged). */
  stdoutFrames: number;
}

/** Runs `argv` to its exit; rejects with the ServiceError, or if the stream ends without an exit. */
export function execRun(client: AnyClient, sandboxId: string, argv: string[], opts: { deadlineMs?: number; tty?: boolean } = {}): Promise<ExecResult> {
  const t0 = now();
  return new Promise((resolve, reject) => {
    const callOpts = opts.deadlineMs ? { deadline: Date.now() + opts.deadlineMs } : {};
    const request = { sandbox_id: sandboxId, command: argv, environment: {}, ...(opts.tty ? { tty: true } : {}) };
    const call: ClientReadableStream<ExecSandboxEvent> = client.ExecSandbox(request, callOpts);
    let exitCode: number | undefined;
    let stdoutBytes = 0;
    let stderrBytes = 0;
    let stdoutFrames = 0;
    let firstByteMs = NaN;
    call.on('data', (ev: ExecSandboxEvent) => {
      if (ev.stdout?.data) {
        if (stdoutBytes === 0) firstByteMs = now() - t0;
        stdoutBytes += ev.stdout.data.length;
        stdoutFrames++;
      }
      if (ev.stderr?.data) stderrBytes += ev.stderr.data.length;
      if (ev.exit) exitCode = ev.exit.exit_code ?? 0;
    });
    call.on('end', () => {
      if (exitCode === undefined) reject(new Error('exec stream ended without an exit'));
      else resolve({ exitCode, ms: now() - t0, firstByteMs, stdoutBytes, stderrBytes, stdoutFrames });
    });
    call.on('error', (err: ServiceError) => reject(err));
  });
}

/** Latency of one `true` (or any argv that must exit 0), in ms. */
export async function execOnce(client: AnyClient, sandboxId: string, argv: string[] = ['true'], opts: { tty?: boolean } = {}): Promise<number> {
  const r = await execRun(client, sandboxId, argv, opts);
  if (r.exitCode !== 0) throw new Error(`${argv.join(' ')} exited ${r.exitCode}`);
  return r.ms;
}

/**
 * `true` in two sandboxes, `warmup` pairs first, then `iterations` pairs interleaved ABBA (pairs
 * alternate which goes first), so the machine's noise and whatever the first of a pair leaves
 * the second (a warm cache, a GC) hit both alike. The times, in the pairs' order.
 */
export async function execPairsAbba(client: AnyClient, a: string, b: string, iterations: number, warmup: number, opts: { tty?: boolean } = {}): Promise<{ a: number[]; b: number[] }> {
  const once = (id: string) => execOnce(client, id, ['true'], opts);
  for (let i = 0; i < warmup; i++) {
    await once(a);
    await once(b);
  }
  const out = { a: [] as number[], b: [] as number[] };
  for (let i = 0; i < iterations; i++) {
    if (i % 2 === 0) {
      out.a.push(await once(a));
      out.b.push(await once(b));
    } else {
      out.b.push(await once(b));
      out.a.push(await once(a));
    }
  }
  return out;
}
