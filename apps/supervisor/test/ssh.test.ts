// Pure parts of the supervisor's SSH server: the detach sequence, loopback checks, and the
// TcpChannel-as-a-socket adapter (against a fake gRPC call).
import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import type { TcpFrame } from '@sandgate/protocols';
import { DetachFilter } from '../src/ssh/detach-filter.ts';
import { loopbackHost, validPort } from '../src/ssh/loopback.ts';
import { ChannelSocket, type TcpChannelCall } from '../src/ssh/channel-socket.ts';

describe('DetachFilter (Ctrl-P Ctrl-Q)', () => {
  it('passes ordinary input through untouched', () => {
    const f = new DetachFilter();
    const data = Buffer.from('hello\x03\n');
    expect(f.push(data)).toEqual({ forward: data, detach: false });
  });

  it('detaches on the sequence, dropping what follows it', () => {
    expect(new DetachFilter().push(Buffer.from('ab\x10\x11cd'))).toEqual({ forward: Buffer.from('ab'), detach: true });
  });

  it('recognises the sequence across chunks', () => {
    const f = new DetachFilter();
    expect(f.push(Buffer.from('x\x10'))).toEqual({ forward: Buffer.from('x'), detach: false });
    expect(f.push(Buffer.from('\x11'))).toEqual({ forward: Buffer.from(''), detach: true });
  });

  it('a Ctrl-P not followed by Ctrl-Q is passed on', () => {
    const f = new DetachFilter();
    expect(f.push(Buffer.from('\x10'))).toEqual({ forward: Buffer.from(''), detach: false });
    expect(f.push(Buffer.from('a'))).toEqual({ forward: Buffer.from('\x10a'), detach: false });
    expect(new DetachFilter().push(Buffer.from('\x10\x10\x11'))).toEqual({ forward: Buffer.from('\x10'), detach: true });
  });
});

describe('loopback targets', () => {
  it('allows only the sandbox loopback', () => {
    expect(loopbackHost('localhost')).toBe('127.0.0.1');
    expect(loopbackHost('127.0.0.1')).toBe('127.0.0.1');
    expect(loopbackHost('::1')).toBe('::1');
    expect(loopbackHost('10.0.0.1')).toBeNull();
    expect(loopbackHost('example.com')).toBeNull();
    expect(validPort(22)).toBe(true);
    expect(validPort(0)).toBe(false);
    expect(validPort(65536)).toBe(false);
  });
});

/** Enough of a gateway call (GatewayCall) for ChannelSocket. */
class FakeCall extends EventEmitter {
  written: TcpFrame[] = [];
  ended = false;
  cancelled = false;
  paused = false;
  full = false;
  write(frame: TcpFrame): boolean {
    this.written.push(frame);
    return !this.full;
  }
  end(): void {
    this.ended = true;
  }
  cancel(): void {
    this.cancelled = true;
  }
  pause(): this {
    this.paused = true;
    return this;
  }
  resume(): this {
    this.paused = false;
    return this;
  }
}

const tick = () => new Promise((r) => setImmediate(r));

describe('ChannelSocket', () => {
  it('carries data both ways, eof as a half-close, and the call ending as the close', async () => {
    const call = new FakeCall();
    const socket = new ChannelSocket(call as unknown as TcpChannelCall);
    const read: Buffer[] = [];
    socket.on('data', (b: Buffer) => read.push(b));
    let ended = false;
    let closed = false;
    socket.on('end', () => (ended = true));
    socket.on('close', () => (closed = true));
    call.emit('data', { data: Buffer.from('in') });
    call.emit('data', { eof: {} });
    await tick();
    expect(Buffer.concat(read).toString()).toBe('in');
    expect(ended).toBe(true);
    expect(socket.writable).toBe(true); // half-open: our side may still write

    socket.write(Buffer.from('out'));
    socket.end();
    await tick();
    expect(call.written).toEqual([{ data: Buffer.from('out') }, { eof: {} }]);
    // Both directions done: the connection is closed, and so is the call.
    expect(closed).toBe(true);
    expect(call.ended).toBe(true);
  });

  it('the call ending closes the socket', async () => {
    const call = new FakeCall();
    const socket = new ChannelSocket(call as unknown as TcpChannelCall);
    let closed = false;
    socket.on('close', () => (closed = true));
    call.emit('status', { code: 1 });
    await tick();
    expect(closed).toBe(true);
    expect(call.ended).toBe(false); // nothing to end: the call is over already
  });

  it('destroying the socket ends the call cleanly', async () => {
    const call = new FakeCall();
    const socket = new ChannelSocket(call as unknown as TcpChannelCall);
    socket.destroy();
    await tick();
    expect(call.ended).toBe(true);
    expect(call.cancelled).toBe(false);
  });

  it('aborted (its control session is gone): an error frame, then the end, not a bare end like a normal close', async () => {
    const call = new FakeCall();
    const socket = new ChannelSocket(call as unknown as TcpChannelCall);
    let closed = false;
    socket.on('close', () => (closed = true));
    socket.abort('control session lost');
    await tick();
    expect(closed).toBe(true);
    expect(call.written).toEqual([{ error: { code: 14, message: 'control session lost' } }]);
    expect(call.ended).toBe(true);
  });

  it('waits for the call to drain (back-pressure)', async () => {
    const call = new FakeCall();
    call.full = true;
    const socket = new ChannelSocket(call as unknown as TcpChannelCall);
    let done = false;
    socket.write(Buffer.from('a'), () => (done = true));
    await tick();
    expect(done).toBe(false);
    call.emit('drain');
    await tick();
    expect(done).toBe(true);
  });
});

describe('host key', () => {
  it('always yields a key the ssh2 server can parse', async () => {
    const ssh2 = (await import('ssh2')).default;
    const { generateHostKey } = await import('../src/ssh/host-key.ts');
    for (let i = 0; i < 300; i++) expect(ssh2.utils.parseKey(generateHostKey())).not.toBeInstanceOf(Error);
  });
});
