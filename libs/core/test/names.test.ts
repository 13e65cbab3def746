// Generated sandbox names: upstream's `adjective-noun` shape (its clients check it), ≤ 19 bytes,
// always a valid sandbox name, over every word of both lists.
import { describe, expect, it } from 'vitest';
import { randomInt } from 'node:crypto';
import { generateName, GENERATED_NAME_COUNT, validateSandboxName } from '../src/index.ts';
import { ADJECTIVES, NOUNS } from '../src/name-words.ts';

describe('generated sandbox names', () => {
  it('every adjective and every noun gives a two-word name of at most 19 bytes', () => {
    for (let a = 0; a < ADJECTIVES.length; a++) {
      for (let n = 0; n < NOUNS.length; n++) {
        let call = 0;
        const name = generateName(() => (call++ === 0 ? a : n));
        expect(name).toMatch(/^[a-z]+-[a-z]+$/);
        expect(Buffer.byteLength(name)).toBeLessThanOrEqual(19);
        expect(name).toBe(`${ADJECTIVES[a]}-${NOUNS[n]}`);
      }
    }
  });
  it('random names are valid sandbox names', () => {
    for (let i = 0; i < 200; i++) {
      const name = generateName((n) => randomInt(n));
      expect(() => validateSandboxName(name)).not.toThrow();
      expect(name).toMatch(/^[a-z]+-[a-z]+$/);
    }
  });
  it('lists are a few hundred distinct lowercase words each', () => {
    expect(new Set(ADJECTIVES).size).toBe(ADJECTIVES.length);
    expect(new Set(NOUNS).size).toBe(NOUNS.length);
    expect(ADJECTIVES.length).toBeGreaterThanOrEqual(200);
    expect(NOUNS.length).toBeGreaterThanOrEqual(200);
    expect(GENERATED_NAME_COUNT).toBe(ADJECTIVES.length * NOUNS.length);
  });
});
