// A few peer channels opened ahead of need.
//
// Opening a peer link to the owner (a TCP connect and a HELLO) costs both replicas CPU and a
// round trip. A relayed exec takes a channel that is
// already open, so that cost is paid between execs, not on its critical path. The owner treats a
// warm channel like any other: it waits for the first frame. A channel whose exec ended cleanly
// on a kept connection hands it on ('successor', libs/relay/src/link.ts): that one comes back
// here, so a relayed exec usually opens no connection at all.

export interface WarmableCall {
  /** 'successor': the channel ended cleanly and its connection now carries this new one (same type). */
  on(event: 'error' | 'close' | 'successor', listener: (...args: unknown[]) => void): unknown;
  cancel(): void;
}

export class WarmCalls<C extends WarmableCall> {
  private readonly idle = new Set<C>();
  private readonly open: () => C;
  private readonly size: number;
  private refillScheduled = false;
  private closed = false;

  private readonly onIdleLost: () => void;

  constructor(open: () => C, size: number, opts: { onIdleLost?: () => void } = {}) {
    this.open = open;
    this.size = size;
    this.onIdleLost = opts.onIdleLost ?? (() => undefined);
  }

  /**
   * A ready channel (or a new one when none is idle). The pool is refilled when the taken one
   * ends, not now: opening channels costs both replicas CPU that the exec in flight needs
   * (≈0.45 ms of its latency, measured with gRPC streams refilled at once). Refills happen only
   * on demand, so a peer that refuses channels costs at most `size` failed opens per take.
   */
  take(): C {
    const iterator = this.idle.values().next();
    let call: C;
    if (iterator.done) call = this.open();
    else {
      call = iterator.value;
      this.idle.delete(call);
    }
    let refilled = false;
    const refill = () => {
      if (refilled) return;
      refilled = true;
      this.scheduleRefill();
    };
    call.on('close', refill);
    // Comes before the 'close' above: the refill then finds the pool full again.
    call.on('successor', (next) => this.keep(next as C));
    return call;
  }

  get idleCount(): number {
    return this.idle.size;
  }

  /** A channel on the connection of one that ended cleanly: idle again, or closed if not needed. */
  private keep(call: C): void {
    if (this.closed || this.idle.size >= this.size) return void call.cancel();
    this.addIdle(call);
  }

  private addIdle(call: C): void {
    const drop = () => {
      if (this.idle.delete(call) && !this.closed) this.onIdleLost();
    };
    // An idle channel that fails (the peer died or shut down) simply leaves the pool.
    call.on('error', drop);
    call.on('close', drop);
    this.idle.add(call);
  }

  private scheduleRefill(): void {
    if (this.refillScheduled || this.closed || this.size === 0) return;
    this.refillScheduled = true;
    setImmediate(() => {
      this.refillScheduled = false;
      while (!this.closed && this.idle.size < this.size) this.addIdle(this.open());
    });
  }

  /** Cancels the idle channels; the owner sees them go before any exec started on them. */
  close(): void {
    this.closed = true;
    for (const call of this.idle) call.cancel();
    this.idle.clear();
  }
}
