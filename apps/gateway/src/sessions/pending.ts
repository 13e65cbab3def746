// Requests sent to a supervisor on its Control stream whose answer comes back later, on that
// stream (a kill result, an open failure) or as a call of its own (an ExecChannel or TcpChannel
// attach). Each waits under an id until it is answered, fails, times out, or the session closes.

interface Waiter<T> {
  resolve(value: T): void;
  reject(err: Error): void;
}

export class PendingRequests<T> {
  /**
   * Made at the first request: a session holds four of these for its whole life and most never
   * see one (a replica holds thousands of sessions; an empty Map is ~100 bytes).
   */
  private waiting: Map<string, Waiter<T>> | undefined;

  /** How many requests are waiting for an answer. */
  get size(): number {
    return this.waiting?.size ?? 0;
  }

  has(id: string): boolean {
    return this.waiting?.has(id) ?? false;
  }

  /**
   * Registers `id`, then sends the request (`send`): settles with the answer, a failure, or
   * `timeoutError()` after `timeoutMs`. Registered first, so an answer can never outrun it.
   */
  wait(id: string, timeoutMs: number, timeoutError: () => Error, send: () => void): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => this.reject(id, timeoutError()), timeoutMs);
      const settled = () => {
        clearTimeout(timer);
        this.waiting?.delete(id);
      };
      this.waiting ??= new Map();
      this.waiting.set(id, {
        resolve: (value) => {
          settled();
          resolve(value);
        },
        reject: (err) => {
          settled();
          reject(err);
        },
      });
      try {
        send();
      } catch (err) {
        this.reject(id, err instanceof Error ? err : new Error(String(err)));
      }
    });
  }

  /** Answers the request `id`; false when nothing waits under it (unknown, expired or answered). */
  resolve(id: string, value: T): boolean {
    const waiter = this.waiting?.get(id);
    waiter?.resolve(value);
    return waiter !== undefined;
  }

  /** Fails the request `id`, if it still waits. */
  reject(id: string, err: Error): void {
    this.waiting?.get(id)?.reject(err);
  }

  /** Answers every request whose id `match`es (several waiters satisfied by one answer). */
  resolveWhere(match: (id: string) => boolean, value: T): void {
    for (const [id, waiter] of [...(this.waiting ?? [])]) if (match(id)) waiter.resolve(value);
  }

  /** Fails every request whose id `match`es. */
  rejectWhere(match: (id: string) => boolean, err: Error): void {
    for (const [id, waiter] of [...(this.waiting ?? [])]) if (match(id)) waiter.reject(err);
  }

  /** Fails every waiting request (the session closed). */
  rejectAll(err: Error): void {
    for (const waiter of [...(this.waiting?.values() ?? [])]) waiter.reject(err);
  }
}
