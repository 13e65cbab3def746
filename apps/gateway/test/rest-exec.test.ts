// The REST exec's pure pieces: the output cap's accounting, the answer's encoding, stdin.
import { describe, expect, it } from 'vitest';
import { GatewayError } from '@sandgate/core';
import { MAX_STDIN_BYTES, OutputCollector, encodeStream, stdinOf } from '../src/api/rest/exec.ts';

describe('OutputCollector', () => {
  it('keeps stdout and stderr apart, counting their sum against the cap', () => {
    const out = new OutputCollector(10);
    expect(out.add('stdout', Buffer.from('abcd'))).toBe(true);
    expect(out.add('stderr', Buffer.from('efgh'))).toBe(true);
    expect(out.add('stdout', Buffer.from('ij'))).toBe(true); // exactly at the cap
    expect(out.bytes).toBe(10);
    expect(out.overflowed).toBe(false);
    expect(out.take('stdout').toString()).toBe('abcdij');
    expect(out.take('stderr').toString()).toBe('efgh');
  });

  it('refuses the chunk that passes the cap, and every one after, even an empty one', () => {
    const out = new OutputCollector(4);
    expect(out.add('stdout', Buffer.from('abc'))).toBe(true);
    expect(out.add('stderr', Buffer.from('de'))).toBe(false);
    expect(out.overflowed).toBe(true);
    expect(out.add('stdout', Buffer.alloc(0))).toBe(false);
    expect(out.bytes).toBe(3);
  });

  it('keeps views of shared buffers exactly (offset and length)', () => {
    const backing = Buffer.from('xxhelloxx');
    const out = new OutputCollector(100);
    out.add('stdout', new Uint8Array(backing.buffer, backing.byteOffset + 2, 5));
    expect(out.take('stdout').toString()).toBe('hello');
  });
});

describe('encodeStream', () => {
  it('gives text when asked and lossless, base64 otherwise', () => {
    expect(encodeStream('stdout', Buffer.from('hé\n'), 'utf8')).toEqual({ stdout: 'hé\n' });
    expect(encodeStream('stderr', Buffer.from([0xff, 0x00]), 'utf8')).toEqual({ stderr_base64: '/wA=' });
    expect(encodeStream('stdout', Buffer.from('text'), 'base64')).toEqual({ stdout_base64: 'dGV4dA==' });
    expect(encodeStream('stdout', Buffer.alloc(0), 'utf8')).toEqual({ stdout: '' });
  });
});

describe('stdinOf', () => {
  it('takes text or base64', () => {
    expect(stdinOf({ stdin: 'hé' }).toString()).toBe('hé');
    expect(stdinOf({ stdin_base64: '/wA=' })).toEqual(Buffer.from([0xff, 0x00]));
    expect(stdinOf({})).toEqual(Buffer.alloc(0));
  });

  it('refuses both at once, bad base64 and too much', () => {
    expect(() => stdinOf({ stdin: 'a', stdin_base64: 'YQ==' })).toThrow(/mutually exclusive/);
    expect(() => stdinOf({ stdin_base64: 'not base64!' })).toThrow(/stdin_base64 is not valid base64/);
    expect(() => stdinOf({ stdin_base64: 'YQ' })).toThrow(GatewayError);
    expect(() => stdinOf({ stdin: 'x'.repeat(MAX_STDIN_BYTES + 1) })).toThrow(/WebSocket exec/);
  });
});
