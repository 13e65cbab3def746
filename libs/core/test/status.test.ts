// Status names as they appear in messages (grpc-js's own wording: `14 UNAVAILABLE: …`).
import { describe, expect, it } from 'vitest';
import { Code, codeName } from '../src/status.ts';

describe('codeName', () => {
  it('names every code of the spec, and says UNKNOWN for any other number', () => {
    expect(codeName(Code.OK)).toBe('OK');
    expect(codeName(Code.UNAVAILABLE)).toBe('UNAVAILABLE');
    expect(codeName(Code.UNAUTHENTICATED)).toBe('UNAUTHENTICATED');
    expect(Object.values(Code).map(codeName)).toEqual(Object.keys(Code));
    expect(codeName(17)).toBe('UNKNOWN');
    expect(codeName(-1)).toBe('UNKNOWN');
  });
});
