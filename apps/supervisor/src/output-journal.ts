// The main process's recent output as a journal of sequenced chunks (stdout and stderr kept
// apart), bounded in bytes. Attached clients replay it from the start of what is kept and then
// follow it live, each at its own pace: a slow client never makes the journal grow.

export const JOURNAL_CAPACITY = 1024 * 1024;

export interface JournalEntry {
  seq: number;
  stream: 'stdout' | 'stderr';
  data: Buffer;
}

export class OutputJournal {
  readonly capacity: number;
  private readonly entries: JournalEntry[] = [];
  private bytes = 0;
  private nextSeq = 0;
  private readonly listeners = new Set<() => void>();

  constructor(capacity = JOURNAL_CAPACITY) {
    this.capacity = capacity;
  }

  append(stream: 'stdout' | 'stderr', data: Buffer): void {
    if (data.length === 0) return;
    const kept = data.length > this.capacity ? data.subarray(data.length - this.capacity) : data;
    this.entries.push({ seq: this.nextSeq++, stream, data: kept });
    this.bytes += kept.length;
    while (this.bytes > this.capacity && this.entries.length > 1) this.bytes -= this.entries.shift()!.data.length;
    for (const l of this.listeners) l();
  }

  /** Sequence number of the oldest entry still kept (where a new reader starts). */
  get firstSeq(): number {
    return this.entries[0]?.seq ?? this.nextSeq;
  }

  get endSeq(): number {
    return this.nextSeq;
  }

  /** The entry with sequence `seq`, or the oldest kept one if `seq` was already evicted. */
  readFrom(seq: number): JournalEntry | undefined {
    const first = this.firstSeq;
    const index = Math.max(0, seq - first);
    return this.entries[index];
  }

  onAppend(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}
