// The main process's output ring: what a reattaching client gets replayed.
import { describe, expect, it } from 'vitest';
import { RingBuffer } from '../src/ring-buffer.ts';

describe('RingBuffer', () => {
  it('keeps everything until full, then only the most recent bytes', () => {
    const rb = new RingBuffer(8);
    rb.write(Buffer.from('abc'));
    expect(rb.snapshot().toString()).toBe('abc');
    rb.write(Buffer.from('defgh'));
    expect(rb.snapshot().toString()).toBe('abcdefgh');
    rb.write(Buffer.from('ij'));
    expect(rb.snapshot().toString()).toBe('cdefghij');
    rb.write(Buffer.from('0123456789xyz'));
    expect(rb.snapshot().toString()).toBe('56789xyz');
    expect(rb.size).toBe(8);
    expect(rb.totalWritten).toBe(23);
    rb.clear();
    expect(rb.snapshot().length).toBe(0);
  });

  it('defaults to 1 MiB and never grows', () => {
    const rb = new RingBuffer();
    for (let i = 0; i < 40; i++) rb.write(Buffer.alloc(64 * 1024, i));
    expect(rb.capacity).toBe(1024 * 1024);
    const snap = rb.snapshot();
    expect(snap.length).toBe(1024 * 1024);
    expect(snap[0]).toBe(24);
    expect(snap[snap.length - 1]).toBe(39);
  });
});
