// The detach sequence of an attachment to the main process: Ctrl-P Ctrl-Q (0x10 0x11), as in
// docker attach. Recognised across chunk boundaries; a Ctrl-P not followed by Ctrl-Q is passed on
// unchanged (late by one chunk at most).

export const CTRL_P = 0x10;
export const CTRL_Q = 0x11;

export interface FilterResult {
  /** Bytes for the main process's input. */
  forward: Buffer;
  /** The sequence was typed: detach (whatever followed it in the chunk is dropped). */
  detach: boolean;
}

export class DetachFilter {
  private pendingCtrlP = false;

  push(data: Buffer): FilterResult {
    // The common case: no Ctrl-P anywhere, nothing held back.
    if (!this.pendingCtrlP && data.indexOf(CTRL_P) < 0) return { forward: data, detach: false };
    const out: number[] = [];
    for (const byte of data) {
      if (this.pendingCtrlP) {
        this.pendingCtrlP = false;
        if (byte === CTRL_Q) return { forward: Buffer.from(out), detach: true };
        out.push(CTRL_P);
      }
      if (byte === CTRL_P) this.pendingCtrlP = true;
      else out.push(byte);
    }
    return { forward: Buffer.from(out), detach: false };
  }
}
