// Polling helpers: tests wait for conditions with a deadline instead of sleeping fixed times.
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
