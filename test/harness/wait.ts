// Polling helpers: tests wait for conditions with a deadline instead of sleeping fixed times.
import { readFileSync } from 'node:fs';
export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export async function waitFor<T>(what: string, probe: () => Promise<T | undefined | null | false> | T | undefined | null | false, timeoutMs = 15_000, intervalMs = 100): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined && v !== null && v !== false) return v as T;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError ? `: ${String(lastError)}` : ''}`);
    }
    await sleep(intervalMs);
  }
}

/**
 * Waits until a client stream's write buffer stops draining (the same non-zero number of messages
 * queued for a second): the far end holds the rest back. Returns how many are still queued; fails
 * naming the trajectory (every 500 ms) when it keeps draining or empties.
 */
export async function waitForStalledWrites(stream: { writableLength: number }, timeoutMs = 30_000): Promise<number> {
  let last = -1;
  const seen: number[] = [];
  await waitFor('the client write buffer to stop draining', async () => {
    const now = stream.writableLength;
    await sleep(500);
    const stable = stream.writableLength === now && now === last && now > 0;
    last = stream.writableLength;
    seen.push(last);
    return stable;
  }, timeoutMs, 0).catch((err: unknown) => {
    throw new Error(`${String(err)}: messages still queued in the client, every 500 ms: ${seen.join(' ')}`);
  });
  return last;
}

/**
 * The largest buffer TCP autotuning gives one socket (`net.ipv4.<name>`'s third field), in MiB.
 * A back-pressure test counts what left its client before it stalled; on a plain TCP hop whose
 * reader paused (a peer link, a WebSocket), the kernel keeps up to tcp_wmem's maximum at the
 * sender and tcp_rmem's maximum at the receiver, which autotunes while it still reads: how much
 * of that fills depends on the run's timing (48 MiB left once under CI's load, 16 MiB on a quiet
 * machine). So those tests derive their bounds from these.
 */
export function tcpBufferMaxMiB(name: 'tcp_rmem' | 'tcp_wmem'): number {
  const max = Number(readFileSync(`/proc/sys/net/ipv4/${name}`, 'utf8').trim().split(/\s+/)[2]);
  if (!(max > 0)) throw new Error(`cannot read net.ipv4.${name}`);
  return max / 2 ** 20;
}

/** What the kernel may hold on one loopback TCP connection whose reader paused, in MiB. */
export function tcpConnectionHoldMiB(): number {
  return tcpBufferMaxMiB('tcp_wmem') + tcpBufferMaxMiB('tcp_rmem');
}

/**
 * What may leave a gRPC client sending `messageMiB` messages on a relayed call (exec stdin,
 * ForwardTcp data) to something that does not read, before it stalls, in MiB: three messages at
 * the entry replica (being decoded, read ahead, cut into pieces), the peer link's kernel buffers,
 * and a few MiB of 64 KiB pieces and HTTP/2 windows on the other hops.
 */
export function relayedCallHoldMiB(messageMiB = 4): number {
  return 3 * messageMiB + tcpConnectionHoldMiB() + 4;
}
