// Moves exec frames between two streams with back-pressure: when the destination's buffer is
// full the source is paused, so a slow client makes the supervisor's output pause, never a
// replica buffer grow. Used for every hop (client ↔ entry replica ↔ owner replica ↔ supervisor).
import type { Readable, Writable } from 'node:stream';

/** Pipes `src` frames into `dst` with back-pressure. Returns a function that stops the pump. */
export function pump<T>(src: Readable, dst: Writable, map: (frame: T) => unknown): () => void {
  let waiting = false;
  const onDrain = () => {
    waiting = false;
    src.resume();
  };
  const onData = (frame: T) => {
    const out = map(frame);
    if (out === null || out === undefined) return;
    if (dst.writableEnded || dst.destroyed) return;
    if (!dst.write(out) && !waiting) {
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
