import { describe, expect, it } from 'vitest';
import { DebugBreakError, parseDebugBreaks, supervisorDebugBreaks } from '@sandgate/core';

describe('debug faults', () => {
  it('none asked: empty set, no UNSAFE needed', () => {
    expect(parseDebugBreaks({}).size).toBe(0);
  });
  it('a switch without SANDGATE_DEBUG_UNSAFE=1 is refused, saying why', () => {
    expect(() => parseDebugBreaks({ SANDGATE_DEBUG_BREAK: 'fencing' })).toThrow(DebugBreakError);
    expect(() => parseDebugBreaks({ SANDGATE_DEBUG_DISABLE_JOBS: '1' })).toThrow(/SANDGATE_DEBUG_UNSAFE=1/);
  });
  it('unknown names are refused even with UNSAFE', () => {
    expect(() => parseDebugBreaks({ SANDGATE_DEBUG_BREAK: 'fencing,nope', SANDGATE_DEBUG_UNSAFE: '1' })).toThrow(/'nope'/);
  });
  it('honoured with UNSAFE, legacy spellings included; supervisor subset', () => {
    const breaks = parseDebugBreaks({ SANDGATE_DEBUG_BREAK: 'exec-kill', SANDGATE_DEBUG_DISABLE_FENCING: '1', SANDGATE_DEBUG_UNSAFE: '1' });
    expect([...breaks].sort()).toEqual(['exec-kill', 'fencing']);
    expect(supervisorDebugBreaks(breaks)).toBe('exec-kill');
  });
});
