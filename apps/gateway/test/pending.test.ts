// Requests waiting for a supervisor's answer: answered, failed, timed out, or failed all at once.
import { describe, expect, it } from 'vitest';
import { PendingRequests } from '../src/sessions/pending.ts';

describe('PendingRequests', () => {
  it('settles with the answer, once, and forgets the request', async () => {
    const pending = new PendingRequests<number>();
    const sent: string[] = [];
    const answer = pending.wait('a', 5_000, () => new Error('timeout'), () => sent.push('a'));
    expect(sent).toEqual(['a']);
    expect(pending.has('a')).toBe(true);
    expect(pending.resolve('a', 3)).toBe(true);
    await expect(answer).resolves.toBe(3);
    expect(pending.size).toBe(0);
    expect(pending.resolve('a', 4)).toBe(false);
    expect(pending.resolve('unknown', 4)).toBe(false);
  });

  it('fails with the timeout error after the timeout', async () => {
    const pending = new PendingRequests<number>();
    await expect(pending.wait('a', 20, () => new Error('too slow'), () => undefined)).rejects.toThrow('too slow');
    expect(pending.has('a')).toBe(false);
  });

  it('fails one request, or every request when the session closes', async () => {
    const pending = new PendingRequests<number>();
    const a = pending.wait('a', 5_000, () => new Error('timeout'), () => undefined);
    const b = pending.wait('b', 5_000, () => new Error('timeout'), () => undefined);
    const c = pending.wait('c', 5_000, () => new Error('timeout'), () => undefined);
    pending.reject('a', new Error('open failed'));
    await expect(a).rejects.toThrow('open failed');
    pending.rejectAll(new Error('closed'));
    await expect(b).rejects.toThrow('closed');
    await expect(c).rejects.toThrow('closed');
    expect(pending.size).toBe(0);
  });

  it('fails the request when sending it throws', async () => {
    const pending = new PendingRequests<number>();
    const failed = pending.wait('a', 5_000, () => new Error('timeout'), () => {
      throw new Error('stream closed');
    });
    await expect(failed).rejects.toThrow('stream closed');
    expect(pending.size).toBe(0);
  });
});
