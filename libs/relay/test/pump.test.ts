// pump(): frames across with back-pressure, a frame mapped to several pieces written one at a
// time (the rest wait, the source paused, until the destination drains), and limitReadAhead().
import { PassThrough, Readable, Writable } from 'node:stream';
import { setImmediate as tick } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { limitReadAhead, pump } from '../src/pump.ts';

/** An object-mode sink that takes nothing until release() is called, then everything. */
function heldSink(highWaterMark: number) {
  const got: unknown[] = [];
  let release: (() => void) | null = null;
  let open = false;
  const sink = new Writable({
    objectMode: true,
    highWaterMark,
    write(chunk, _enc, done) {
      got.push(chunk);
      if (open) done();
      else release = done;
    },
  });
  return {
    sink,
    got,
    open() {
      open = true;
      const r = release;
      release = null;
      r?.();
    },
  };
}

describe('pump', () => {
  it('writes the pieces of one frame no further than the destination takes, pausing the source', async () => {
    const src = new PassThrough({ objectMode: true });
    const { sink, got, open } = heldSink(2);
    pump(src, sink, (n: number) => Array.from({ length: 10 }, (_, i) => n * 100 + i));
    src.write(1);
    src.write(2);
    await tick();
    // One piece in the sink's write(), two buffered (its high-water mark): the rest wait.
    expect(sink.writableLength).toBeLessThanOrEqual(3);
    expect(src.isPaused()).toBe(true);
    expect(got).toEqual([100]);
    open();
    await tick();
    await tick();
    expect(got).toEqual([...Array.from({ length: 10 }, (_, i) => 100 + i), ...Array.from({ length: 10 }, (_, i) => 200 + i)]);
    expect(src.isPaused()).toBe(false);
  });

  it('one frame in, one frame out; null drops it', async () => {
    const src = new PassThrough({ objectMode: true });
    const out = new PassThrough({ objectMode: true });
    pump(src, out, (s: string) => (s === 'drop' ? null : s.toUpperCase()));
    src.write('a');
    src.write('drop');
    src.write('b');
    await tick();
    expect([out.read(), out.read(), out.read()]).toEqual(['A', 'B', null]);
  });
});

describe('limitReadAhead', () => {
  it('a paused readable asks its source for one message, not sixteen', async () => {
    let reads = 0;
    const src = new Readable({
      objectMode: true,
      read() {
        reads++;
        this.push({ n: reads });
      },
    });
    limitReadAhead(src);
    src.pause();
    src.read(0);
    await tick();
    expect(reads).toBeLessThanOrEqual(2);
    expect(src.readableLength).toBeLessThanOrEqual(1);
  });
});

describe('pump, a source that emits while paused', () => {
  it('frames that come while pieces wait go behind them, in order, none lost', async () => {
    const src = new PassThrough({ objectMode: true });
    const { sink, got, open } = heldSink(1);
    pump(src, sink, (n: number) => [n * 10, n * 10 + 1, n * 10 + 2]);
    src.emit('data', 1); // pieces 11 and 12 wait
    src.emit('data', 2); // emitted despite the pause: must queue behind them
    open();
    await tick();
    await tick();
    expect(got).toEqual([10, 11, 12, 20, 21, 22]);
  });
});

describe('byteSlices', () => {
  it('cuts into views of at most PIECE_BYTES, in order, nothing for no bytes', async () => {
    const { byteSlices, PIECE_BYTES } = await import('../src/pump.ts');
    const data = Buffer.alloc(2 * PIECE_BYTES + 5, 1);
    const slices = byteSlices(data);
    expect(slices.map((s) => s.length)).toEqual([PIECE_BYTES, PIECE_BYTES, 5]);
    expect(Buffer.concat(slices).equals(data)).toBe(true);
    expect(slices[0]!.buffer).toBe(data.buffer); // views, not copies
    expect(byteSlices(Buffer.alloc(0))).toEqual([]);
  });
});
