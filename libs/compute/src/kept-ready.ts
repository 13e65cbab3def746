// Things a driver makes before the create that needs one, so the create only claims it: the
// docker driver's network namespaces (docker/netns-holders.ts), the local driver's sandbox disks
// (disk-spares.ts). This is their shared life cycle; what a spare is, how it is made, claimed,
// removed and found by other drivers is each one's own.
//
// - warm() makes spares up to `size` in the background and starts the sweep; sweepOnly() only
//   sweeps, and the first claim then makes the spares.
// - A claim takes the newest spare younger than half of `maxAgeMs` (older ones are removed) and
//   schedules a refill `refillAfterClaimMs` later, not at once: making a spare would otherwise
//   compete with the start of the sandbox that claimed one.
// - The sweep (at warm()'s first call and every `sweepEveryMs`) removes this driver's spares past
//   half of `maxAgeMs`, then whatever other drivers left past `maxAgeMs` (sweepShared). A refill
//   that failed is tried again only after a sweep: a spare that cannot be made (a broken host)
//   must not be tried in a loop.
// - close() (a replica shutting down) stops all of it and removes this driver's spares.

export interface KeptReadyOptions {
  /** Spares kept ready (0: none). */
  size: number;
  /** Any driver removes a spare older than this; its own driver stops claiming it at half. */
  maxAgeMs: number;
  sweepEveryMs: number;
  refillAfterClaimMs: number;
  /** Told when making a spare failed: creates go without until the next sweep. */
  onRefillFailed?: (err: unknown, retryInMs: number) => void;
}

/** What a claim's attempt at one spare came to. */
export type TakeResult<T> = { taken: T } | 'keep' | 'gone';

export abstract class KeptReady<S extends { bornMs: number }> {
  protected readonly spares: S[] = [];
  private closed = false;
  private refilling: Promise<void> | null = null;
  private sweeper: NodeJS.Timeout | null = null;
  private refillTimer: NodeJS.Timeout | null = null;
  private failed = false;
  /** warm() was called: the sweep's timer refills too. */
  private used = false;
  private readonly keep: KeptReadyOptions;

  constructor(keep: KeptReadyOptions) {
    this.keep = keep;
  }

  /** Makes one spare (throws if it cannot). */
  protected abstract make(): Promise<S>;
  /** Removes one spare of this driver's, whatever state it is in; never throws. */
  protected abstract remove(spare: S): Promise<void>;
  /** Removes what any driver left past `oldestMs` (and anything else of this driver's gone bad). */
  protected abstract sweepShared(oldestMs: number): Promise<void>;

  /**
   * Starts sweeping stale spares (any driver's) in the background, without making any: for a
   * driver that makes its first spares only once it is used (its first claim).
   */
  sweepOnly(): void {
    if (this.keep.size <= 0 || this.closed || this.sweeper) return;
    this.sweeper = setInterval(() => void this.sweep().then(() => this.used && this.warm()), this.keep.sweepEveryMs).unref();
    void this.sweep();
  }

  /** Starts making spares (and sweeping stale ones) in the background, if there are to be any. */
  warm(): void {
    if (this.keep.size <= 0 || this.closed) return;
    this.used = true;
    this.sweepOnly();
    if (!this.refilling && !this.failed && this.spares.length < this.keep.size) {
      this.refilling = this.refill().finally(() => {
        this.refilling = null;
      });
    }
  }

  /** Removes this driver's spares (a replica shutting down); later claims find none. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.sweeper) clearInterval(this.sweeper);
    if (this.refillTimer) clearTimeout(this.refillTimer);
    await this.refilling?.catch(() => undefined);
    await Promise.all(this.spares.splice(0).map((s) => this.remove(s)));
  }

  /**
   * Tries `take` on the newest fresh spare: 'gone' (someone removed it) tries the next, 'keep'
   * (it cannot serve this create, but may the next) puts it back and ends the claim. null: none
   * taken.
   */
  protected async claimWith<T>(take: (spare: S) => Promise<TakeResult<T>>): Promise<T | null> {
    const fresh = Date.now() - this.keep.maxAgeMs / 2;
    try {
      for (let spare = this.spares.pop(); spare; spare = this.spares.pop()) {
        if (spare.bornMs < fresh) {
          void this.remove(spare);
          continue;
        }
        const result = await take(spare);
        if (result === 'gone') {
          void this.remove(spare);
          continue;
        }
        if (result === 'keep') {
          this.spares.push(spare);
          return null;
        }
        return result.taken;
      }
      return null;
    } finally {
      this.warmLater();
    }
  }

  private warmLater(): void {
    if (this.refillTimer || this.closed || this.keep.size <= 0) return;
    this.refillTimer = setTimeout(() => {
      this.refillTimer = null;
      this.warm();
    }, this.keep.refillAfterClaimMs).unref();
  }

  private async refill(): Promise<void> {
    try {
      while (!this.closed && this.spares.length < this.keep.size) {
        const spare = await this.make();
        if (this.closed) await this.remove(spare);
        else this.spares.push(spare);
      }
    } catch (err) {
      this.failed = true;
      if (!this.closed) this.keep.onRefillFailed?.(err, this.keep.sweepEveryMs);
    }
  }

  private async sweep(): Promise<void> {
    this.failed = false;
    const fresh = Date.now() - this.keep.maxAgeMs / 2;
    for (let i = this.spares.length - 1; i >= 0; i--) {
      if (this.spares[i]!.bornMs < fresh) void this.remove(this.spares.splice(i, 1)[0]!);
    }
    await this.sweepShared(Date.now() - this.keep.maxAgeMs).catch(() => undefined);
  }
}
