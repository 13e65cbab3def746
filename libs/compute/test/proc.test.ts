// /proc parsing, including the awkward comm field.
import { describe, expect, it } from 'vitest';
import { isAlive, parseStat, readStat } from '../src/proc.ts';
import { parseHandle } from '../src/validate.ts';

describe('parseStat', () => {
  it('takes fields after the last parenthesis, so comm may contain spaces and parentheses', () => {
    const fields = ['S', '1', '42', '42', '0', '-1', '4194560', '0', '0', '0', '0', '0', '0', '0', '0', '20', '0', '1', '0', '987654', '0'];
    const s = parseStat(`1234 (we ird) (x)) ${fields.join(' ')}\n`)!;
    expect(s).toEqual({ pid: 1234, comm: 'we ird) (x)', state: 'S', ppid: 1, pgrp: 42, session: 42, startTime: 987654 });
  });

  it('reads the current process and matches start times', () => {
    const me = readStat(process.pid)!;
    expect(me.pid).toBe(process.pid);
    expect(isAlive(process.pid, me.startTime)).toBe(true);
    expect(isAlive(process.pid, me.startTime + 1)).toBe(false);
    expect(readStat(2 ** 30)).toBeNull();
  });
});

describe('parseHandle', () => {
  it('accepts only well-formed handles', () => {
    expect(parseHandle({ pid: 10, startTime: 5, dir: '/x' })).toEqual({ pid: 10, startTime: 5, dir: '/x' });
    expect(parseHandle(null)).toBeNull();
    expect(parseHandle({ pid: '10', startTime: 5 })).toBeNull();
    expect(parseHandle({ pid: 1, startTime: 5 })).toBeNull(); // never signal init
    expect(parseHandle({ pid: -5, startTime: 5 })).toBeNull();
    expect(parseHandle({ pid: 10 })).toBeNull();
  });
});
