// The end rules of a relayed TCP channel (src/ssh/tcp-relay.ts), on real object-mode streams: a
// channel the target closed (`eof`) ends the client's call cleanly; one whose supervisor side just
// ended (its connection to the replica dropped) must end it with UNAVAILABLE, never as a clean
// close (an SSH client would exit 255 without a word).
import { Duplex } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { Code, GatewayError } from '@sandgate/core';
import type { TcpFrame } from '@sandgate/protocols';
import { relayForward, spliceTcp } from '../src/ssh/tcp-relay.ts';
import type { TcpPath } from '../src/relay/exec-router.ts';

/** A call whose writes the test reads; `error` is what endWithError emitted, `ended` a clean end. */
function recordingCall() {
  const written: unknown[] = [];
  const call = Object.assign(
    new Duplex({
      objectMode: true,
      read() {},
      write(frame, _enc, cb) {
        written.push(frame);
        cb();
      },
    }),
    { cancelled: false },
  );
  const seen = { error: undefined as undefined | { code?: number; details?: string }, ended: false };
  call.on('error', (e: { code?: number; details?: string }) => (seen.error = e));
  call.on('finish', () => (seen.ended = true));
  return { call, written, seen };
}

/** The supervisor's side of the channel: the test pushes its frames, then ends it. */
function upstream(frames: TcpFrame[]): TcpPath {
  const stream = new Duplex({ objectMode: true, read() {}, write: (_f, _e, cb) => cb() });
  setImmediate(() => {
    for (const f of frames) stream.push(f);
    stream.push(null);
  });
  return { stream, via: 'local', abort: () => stream.destroy(), failure: () => undefined };
}

const settle = () => new Promise((r) => setTimeout(r, 50));
const toClient = (err: unknown) => (err instanceof GatewayError ? { code: err.code, details: err.message } : { code: Code.UNKNOWN });

describe('relayForward (the entry replica, towards the ForwardTcp client)', () => {
  it('the target closed (eof): the client gets its bytes and a clean end', async () => {
    const { call, written, seen } = recordingCall();
    relayForward(call, upstream([{ data: Buffer.from('hi') }, { eof: {} }]), toClient, () => {});
    await settle();
    expect(written).toEqual([{ data: Buffer.from('hi') }]);
    expect(seen).toEqual({ error: undefined, ended: true });
  });

  it('the supervisor side ended without eof: the client gets its bytes, then UNAVAILABLE', async () => {
    const { call, written, seen } = recordingCall();
    relayForward(call, upstream([{ data: Buffer.from('hi') }]), toClient, () => {});
    await settle();
    expect(written).toEqual([{ data: Buffer.from('hi') }]);
    expect(seen.error?.code).toBe(Code.UNAVAILABLE);
    expect(seen.error?.details).toMatch(/ended before the connection was closed/);
    expect(seen.ended).toBe(false);
  });
});

describe('spliceTcp (the owner replica, towards the entry replica)', () => {
  it('eof, then the end: passed on and ended cleanly', async () => {
    const { call, written, seen } = recordingCall();
    spliceTcp(call, upstream([{ data: Buffer.from('x') }, { eof: {} }]));
    await settle();
    expect(written).toEqual([{ data: Buffer.from('x') }, { eof: {} }]);
    expect(seen).toEqual({ error: undefined, ended: true });
  });

  it('a file transfer error frame, then the end: passed on and ended cleanly (the frame says how it failed)', async () => {
    const { call, written, seen } = recordingCall();
    spliceTcp(call, upstream([{ error: { code: Code.NOT_FOUND, message: 'no such file' } }]));
    await settle();
    expect(written).toEqual([{ error: { code: Code.NOT_FOUND, message: 'no such file' } }]);
    expect(seen).toEqual({ error: undefined, ended: true });
  });

  it('an end without eof: UNAVAILABLE to the entry replica, not a closed connection', async () => {
    const { call, seen } = recordingCall();
    spliceTcp(call, upstream([{ data: Buffer.from('x') }]));
    await settle();
    expect(seen.error?.code).toBe(Code.UNAVAILABLE);
    expect(seen.ended).toBe(false);
  });
});
