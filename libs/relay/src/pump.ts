// Moves exec frames between two streams with back-pressure: when the destination's buffer is
// full the source is paused, so a slow client makes the supervisor's output pause, never a
// replica buffer grow. Used for every hop (client ↔ entry replica ↔ owner replica ↔ supervisor).
import type { Readable, Writable } from 'node:stream';

/**
 * Pipes `src` frames into `dst` with back-pressure. `map` turns a frame into one frame, several
 * (written one at a time: past a full `dst` the rest wait, with `src` paused, until it drains), or
 * none. Returns a function that stops the pump.
 */
export function pump<T>(src: Readable, dst: Writable, map: (frame: T) => unknown): () => void {
  let waiting = false;
  /** Pieces of one source frame not written yet because `dst` was full. */
  let pending: unknown[] = [];
  const writeAll = (frames: unknown[]): void => {
    for (let i = 0; i < frames.length; i++) {
      if (dst.writableEnded || dst.destroyed) return;
      if (!dst.write(frames[i]) && i + 1 < frames.length) {
        pending = frames.slice(i + 1);
        return;
      }
    }
    pending = [];
  };
  const onDrain = () => {
    writeAll(pending);
    if (dst.writableNeedDrain) return void dst.once('drain', onDrain);
    waiting = false;
    src.resume();
  };
  const onData = (frame: T) => {
    const out = map(frame);
    if (out === null || out === undefined) return;
    if (dst.writableEnded || dst.destroyed) return;
    const frames = Array.isArray(out) ? out : [out];
    // Pieces still wait for a drain: these go behind them, in order (a source that emits after
    // pause() must not overtake them, nor replace them).
    if (pending.length > 0) return void pending.push(...frames);
    writeAll(frames);
    if (dst.writableNeedDrain && !waiting) {
      waiting = true;
      src.pause();
      dst.once('drain', onDrain);
    }
  };
  src.on('data', onData);
  src.resume();
  return () => {
    src.off('data', onData);
    dst.off('drain', onDrain);
  };
}

/**
 * How many messages a client's stream may hold read ahead of its consumer. A gRPC call's
 * readable side counts messages, not bytes (16 by default), and a message can be 4 MiB: paused
 * by back-pressure, one interactive exec's call would still read 64 MiB into the replica. One
 * message bounds that to the size of one.
 */
export function limitReadAhead(stream: Readable, messages = 1): void {
  // No public setter: the readable state's high-water mark is what _read() is called against.
  const state = (stream as unknown as { _readableState?: { highWaterMark: number } })._readableState;
  if (state) state.highWaterMark = messages;
}

/**
 * Bytes a client sent in one message are handed on in pieces of at most this size: the queues
 * between the entry replica and the supervisor count frames (16 each), not bytes, so one 4 MiB
 * message must not become a 4 MiB frame in every one of them.
 */
export const PIECE_BYTES = 64 * 1024;

/** `data` as views of at most `size` bytes (the same memory, not copies); none for no bytes. */
export function byteSlices(data: Buffer, size = PIECE_BYTES): Buffer[] {
  if (data.length === 0) return [];
  if (data.length <= size) return [data];
  const slices: Buffer[] = [];
  for (let off = 0; off < data.length; off += size) slices.push(data.subarray(off, off + size));
  return slices;
}
