// One attached client's reading of the main process's output journal: the replay (from the
// oldest entry kept), then live entries, pausing while the client's stream pushes back; then,
// once the gateway has durably recorded the main process's exit and everything before it was
// written, the exit. Shared by exec attachments (MainAttach) and the SSH subsystem (MainChannel).
import type { MainExit, MainProcess } from './main-process.ts';
import type { JournalEntry } from './output-journal.ts';

export interface JournalSink {
  /** Writes one entry; false = the stream is full, call `resume` on its next 'drain'. */
  write(entry: JournalEntry, resume: () => void): boolean;
  /** Everything before the exit was written: deliver the exit. Called at most once. */
  exit(exit: MainExit): void;
}

export class JournalFollower {
  private readonly main: MainProcess;
  private readonly sink: JournalSink;
  private cursor: number;
  private waitingForDrain = false;
  private released: MainExit | undefined;
  private stopped = false;
  private readonly unsubscribe: () => void;

  constructor(main: MainProcess, exitReleased: Promise<MainExit>, sink: JournalSink) {
    this.main = main;
    this.sink = sink;
    this.cursor = main.journal.firstSeq;
    this.unsubscribe = main.journal.onAppend(() => this.pump());
    void exitReleased.then((exit) => {
      this.released = exit;
      this.pump();
    });
  }

  /** Writes what is there now; later entries follow as they are appended. */
  start(): void {
    this.pump();
  }

  /** No more writes (the client went away, or the exit was delivered). Idempotent. */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.unsubscribe();
  }

  private pump(): void {
    if (this.stopped || this.waitingForDrain) return;
    const journal = this.main.journal;
    while (this.cursor < journal.endSeq) {
      const entry = journal.readFrom(this.cursor)!;
      this.cursor = entry.seq + 1;
      const ok = this.sink.write(entry, () => {
        this.waitingForDrain = false;
        this.pump();
      });
      if (this.stopped) return;
      if (!ok) {
        this.waitingForDrain = true;
        return;
      }
    }
    if (this.released) {
      const exit = this.released;
      this.stop();
      this.sink.exit(exit);
    }
  }
}
