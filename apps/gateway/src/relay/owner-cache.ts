// Which replica (peer address) held a sandbox's supervisor session when we last asked Redis.
//
// The cache is a hint, never the truth: the owner replica checks that it really holds the session
// on every relayed call and answers "not here" before starting anything, so a stale entry costs
// one extra hop and a fresh look-up, never a misrouted exec. Entries are dropped when the answer
// is "not here", when the channel to that replica drops (a killed replica), and after `ttlMs`.
// Without it every relayed call paid two sequential Redis round trips (owner key, then the
// owner's liveness key) before the first byte moved.

export interface CachedOwner {
  replica: string;
  address: string;
}

interface Entry extends CachedOwner {
  expiresAtMs: number;
}

export class OwnerCache {
  private readonly entries = new Map<string, Entry>();
  private readonly ttlMs: number;
  private readonly maxEntries: number;
  private readonly now: () => number;
  /** Debug fault `owner-hints` (negative chaos runs only): entries never expire and are never forgotten. */
  private readonly pinned: boolean;

  constructor(opts: { ttlMs: number; maxEntries: number; now?: () => number; pinned?: boolean }) {
    this.ttlMs = opts.ttlMs;
    this.maxEntries = opts.maxEntries;
    this.now = opts.now ?? Date.now;
    this.pinned = opts.pinned ?? false;
  }

  get(sandboxId: string): CachedOwner | null {
    const entry = this.entries.get(sandboxId);
    if (!entry) return null;
    if (entry.expiresAtMs <= this.now() && !this.pinned) {
      this.entries.delete(sandboxId);
      return null;
    }
    return { replica: entry.replica, address: entry.address };
  }

  set(sandboxId: string, owner: CachedOwner): void {
    if (this.pinned && this.entries.has(sandboxId)) return; // debug fault owner-hints: the first hint stays
    this.entries.delete(sandboxId); // re-insert: Map order is then oldest-first for eviction
    this.entries.set(sandboxId, { ...owner, expiresAtMs: this.now() + this.ttlMs });
    while (this.entries.size > this.maxEntries) {
      const oldest = this.entries.keys().next().value as string;
      this.entries.delete(oldest);
    }
  }

  /** Forget one sandbox's owner (the owner said "not here"). */
  forget(sandboxId: string): void {
    if (this.pinned) return; // debug fault owner-hints
    this.entries.delete(sandboxId);
  }

  /** Forget every sandbox routed to a peer address (its channel dropped: the replica may be gone). */
  forgetAddress(address: string): number {
    if (this.pinned) return 0; // debug fault owner-hints
    let n = 0;
    for (const [id, entry] of this.entries) {
      if (entry.address === address) {
        this.entries.delete(id);
        n++;
      }
    }
    return n;
  }

  get size(): number {
    return this.entries.size;
  }
}
