// A few peer streams opened ahead of need.
//
// Opening a gRPC stream costs ≈0.8 ms of grpc-js work across the two replicas on the reference
// machine, while a message on an open stream costs ≈0.1 ms (load-tests, BENCHMARKS.md). A relayed
// exec takes a stream that is already open, so the set-up is paid between execs, not on the
// critical path. The owner side treats a warm stream like any other Peer call: it waits for the
// first frame.

export interface WarmableCall {
  on(event: 'error' | 'status' | 'close', listener: (...args: unknown[]) => void): unknown;
  cancel(): void;
}

export class WarmCalls<C extends WarmableCall> {
  private readonly idle = new Set<C>();
  private readonly open: () => C;
  private readonly size: number;
  private refillScheduled = false;
  private closed = false;

  constructor(open: () => C, size: number) {
    this.open = open;
    this.size = size;
  }

  /**
   * A ready stream (or a new one when none is idle). The pool is refilled when the taken stream
   * ends, not now: opening streams costs both replicas CPU that the exec in flight needs (≈0.45 ms
   * of its latency when done at once). Refills happen only on demand, so a peer that refuses
   * streams costs at most `size` failed opens per take.
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
    call.on('status', refill);
    call.on('close', refill);
    return call;
  }

  get idleCount(): number {
    return this.idle.size;
  }

  private scheduleRefill(): void {
    if (this.refillScheduled || this.closed || this.size === 0) return;
    this.refillScheduled = true;
    setImmediate(() => {
      this.refillScheduled = false;
      while (!this.closed && this.idle.size < this.size) {
        const call = this.open();
        const drop = () => this.idle.delete(call);
        // An idle stream that fails (the peer died or shut down) simply leaves the pool.
        call.on('error', drop);
        call.on('status', drop);
        call.on('close', drop);
        this.idle.add(call);
      }
    });
  }

  /** Cancels the idle streams; the owner sees them go before any exec started on them. */
  close(): void {
    this.closed = true;
    for (const call of this.idle) call.cancel();
    this.idle.clear();
  }
}
