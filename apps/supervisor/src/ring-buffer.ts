// Fixed-capacity byte ring buffer: keeps the most recent `capacity` bytes of the main process's
// output so a later milestone can replay it to clients that attach late. Memory is allocated once
// and never grows, whatever the process prints.

export const MAIN_OUTPUT_CAPACITY = 1024 * 1024;

export class RingBuffer {
  readonly capacity: number;
  private readonly buf: Buffer;
  /** Next write position in `buf`. */
  private pos = 0;
  /** Bytes currently held (<= capacity). */
  private held = 0;
  /** Bytes ever written, including those since overwritten. */
  private written = 0;

  constructor(capacity: number = MAIN_OUTPUT_CAPACITY) {
    if (!Number.isInteger(capacity) || capacity <= 0) throw new RangeError('capacity must be a positive integer');
    this.capacity = capacity;
    this.buf = Buffer.alloc(capacity);
  }

  get size(): number {
    return this.held;
  }

  get totalWritten(): number {
    return this.written;
  }

  write(chunk: Uint8Array): void {
    this.written += chunk.length;
    // Only the tail of an oversized chunk can survive.
    const data = chunk.length > this.capacity ? chunk.subarray(chunk.length - this.capacity) : chunk;
    const first = Math.min(data.length, this.capacity - this.pos);
    this.buf.set(data.subarray(0, first), this.pos);
    if (first < data.length) this.buf.set(data.subarray(first), 0);
    this.pos = (this.pos + data.length) % this.capacity;
    this.held = Math.min(this.capacity, this.held + data.length);
  }

  /** A copy of the held bytes, oldest first. */
  snapshot(): Buffer {
    if (this.held < this.capacity) return Buffer.from(this.buf.subarray(this.pos - this.held, this.pos));
    return Buffer.concat([this.buf.subarray(this.pos), this.buf.subarray(0, this.pos)]);
  }

  clear(): void {
    this.pos = 0;
    this.held = 0;
  }
}
