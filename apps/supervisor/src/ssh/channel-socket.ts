// A TcpChannel call to the gateway seen as a socket: bytes written become `data` frames, `end()`
// sends `eof` (half-close), received `data` is readable and a received `eof` ends the readable
// side. The call ending or failing is the connection closing: the socket is destroyed, which is
// what the SSH server (or the TCP target) then sees as the connection going away. Back-pressure
// both ways: a full call stops our writers, a full reader stops the call.
import { Duplex } from 'node:stream';
import type { GatewayCall } from '../gateway-client.ts';
import type { TcpFrame } from '@sandgate/protocols';
import { Code } from '@sandgate/core/status';

export type TcpChannelCall = GatewayCall<TcpFrame, TcpFrame>;

/** After we closed our side, how long the gateway has to finish the call before it is cancelled. */
const CLOSE_GRACE_MS = 5_000;

export class ChannelSocket extends Duplex {
  private readonly call: TcpChannelCall;
  private callOver = false;

  constructor(call: TcpChannelCall) {
    super({ allowHalfOpen: true });
    this.call = call;
    call.on('data', (frame: TcpFrame) => {
      if (frame.data && frame.data.length > 0) {
        if (!this.push(frame.data)) call.pause();
      } else if (frame.eof) {
        this.push(null);
      }
    });
    const over = () => {
      this.callOver = true;
      this.destroy();
    };
    call.on('end', over);
    call.on('error', over);
    call.on('status', over);
  }

  override _read(): void {
    this.call.resume();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    if (this.callOver) return callback(new Error('tcp channel closed'));
    try {
      if (this.call.write({ data: chunk })) callback();
      else this.call.once('drain', () => callback());
    } catch (err) {
      callback(err as Error);
    }
  }

  override _final(callback: (err?: Error | null) => void): void {
    try {
      if (!this.callOver) this.call.write({ eof: {} });
    } catch {
      // the call is over; destroy follows
    }
    callback();
  }

  /**
   * The path under the channel broke (the control session it belongs to is gone): the channel
   * ends with an `error` frame (UNAVAILABLE, `reason`), which the gateway gives the client as the
   * call's status, instead of ending as if the server had closed the connection. (An SSH client
   * that sees a clean close exits 255 and, at LogLevel ERROR, says nothing at all.)
   */
  abort(reason: string): void {
    if (!this.callOver && !this.destroyed) {
      try {
        this.call.write({ error: { code: Code.UNAVAILABLE, message: reason } });
      } catch {
        // the call is over; destroy follows
      }
    }
    this.destroy();
  }

  override _destroy(_err: Error | null, callback: (err?: Error | null) => void): void {
    if (!this.callOver) {
      try {
        // A clean end lets the gateway finish the client's call with OK; cancel if it does not.
        this.call.end();
        const timer = setTimeout(() => {
          try {
            this.call.cancel();
          } catch {
            // already over
          }
        }, CLOSE_GRACE_MS);
        timer.unref();
        this.call.once('status', () => clearTimeout(timer));
      } catch {
        // already over
      }
    }
    // A closed connection is not an error for whoever uses the socket (ssh2, the TCP target).
    callback(null);
  }

  // What ssh2 may call on a socket.
  setNoDelay(): this {
    return this;
  }
  setKeepAlive(): this {
    return this;
  }
  setTimeout(): this {
    return this;
  }
}
