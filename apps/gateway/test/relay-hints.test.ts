// Owner hints and warm peer channels: the two pieces that take Redis and stream set-up off a
// relayed exec's critical path.
import { describe, expect, it } from 'vitest';
import { EventEmitter } from 'node:events';
import { OwnerCache } from '../src/relay/owner-cache.ts';
import { WarmCalls } from '../src/relay/warm-calls.ts';

describe('OwnerCache', () => {
  it('expires hints, forgets one sandbox or every sandbox of a replica, and stays bounded', () => {
    let now = 1_000;
    const cache = new OwnerCache({ ttlMs: 100, maxEntries: 3, now: () => now });
    cache.set('a', { replica: 'r1', address: 'h:1' });
    cache.set('b', { replica: 'r1', address: 'h:1' });
    cache.set('c', { replica: 'r2', address: 'h:2' });
    expect(cache.get('a')).toEqual({ replica: 'r1', address: 'h:1' });
    expect(cache.forgetAddress('h:1')).toBe(2);
    expect(cache.get('a')).toBeNull();
    expect(cache.get('c')).not.toBeNull();
    cache.forget('c');
    expect(cache.get('c')).toBeNull();
    for (const id of ['d', 'e', 'f', 'g']) cache.set(id, { replica: 'r3', address: 'h:3' });
    expect(cache.size).toBe(3);
    expect(cache.get('d')).toBeNull(); // the oldest went first
    now += 101;
    expect(cache.get('g')).toBeNull();
  });

  it('with the owner-hints debug fault (pinned), the first hint stays: no TTL, no forget, no replacement', () => {
    let now = 1_000;
    const cache = new OwnerCache({ ttlMs: 100, maxEntries: 3, now: () => now, pinned: true });
    cache.set('a', { replica: 'r1', address: 'h:1' });
    cache.set('a', { replica: 'r2', address: 'h:2' });
    cache.forget('a');
    expect(cache.forgetAddress('h:1')).toBe(0);
    now += 1_000;
    expect(cache.get('a')).toEqual({ replica: 'r1', address: 'h:1' });
  });
});

class FakeCall extends EventEmitter {
  cancelled = false;
  cancel(): void {
    this.cancelled = true;
  }
}

const tick = () => new Promise((r) => setImmediate(r));

describe('WarmCalls', () => {
  it('hands out idle calls, refills only after a taken call ends, and drops idle calls that fail', async () => {
    const opened: FakeCall[] = [];
    let lost = 0;
    const pool = new WarmCalls(() => {
      const c = new FakeCall();
      opened.push(c);
      return c;
    }, 2, { onIdleLost: () => lost++ });
    const first = pool.take(); // nothing idle yet: opened on demand
    expect(opened).toHaveLength(1);
    await tick();
    expect(pool.idleCount).toBe(0); // no refill while the call is in use
    first.emit('close');
    await tick();
    expect(pool.idleCount).toBe(2);
    const warm = pool.take();
    expect(opened.indexOf(warm as FakeCall)).toBe(1); // an idle one, not a new one
    opened[2]!.emit('error', new Error('peer gone'));
    expect(pool.idleCount).toBe(0);
    expect(lost).toBe(1);
    // A failing peer costs at most `size` opens per take: nothing reopens by itself.
    await tick();
    expect(opened).toHaveLength(3);
    pool.close();
    expect(warm.cancelled).toBe(false);
  });

  it('close() cancels the idle calls', async () => {
    const opened: FakeCall[] = [];
    const pool = new WarmCalls(() => {
      const c = new FakeCall();
      opened.push(c);
      return c;
    }, 2);
    pool.take().emit('close');
    await tick();
    pool.close();
    expect(opened.slice(1).every((c) => c.cancelled)).toBe(true);
  });
});
