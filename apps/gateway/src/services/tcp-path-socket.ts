// A TCP channel to a sandbox (ExecRouter.openTcp's TcpFrame stream, local or relayed through the
// owner) seen as a byte socket, for node:http to speak HTTP/1.1 over: bytes written become `data`
// frames, end() sends `eof` (half-close), received `data` is readable and a received `eof` (or
// the path ending) ends the readable side. Back-pressure both ways: a full path stops our writer
// (write() waits for 'drain'), a full reader pauses the path. The gateway-side twin of the
// supervisor's ChannelSocket (apps/supervisor/src/ssh/channel-socket.ts).
import { Duplex } from 'node:stream';
import type { TcpFrame } from '@sandgate/protocols';
import type { TcpPath } from '../relay/exec-router.ts';

export class TcpPathSocket extends Duplex {
  private readonly path: TcpPath;
  private pathOver = false;
  // What node:http reads off a socket; a relayed channel has no address of its own.
  readonly remoteAddress = '127.0.0.1';

  constructor(path: TcpPath) {
    // Room for a few frames (up to 64 KiB each) before the path is paused: pausing on every frame
    // would stall a relayed path on each one.
    super({ allowHalfOpen: true, readableHighWaterMark: 512 * 1024, writableHighWaterMark: 256 * 1024 });
    this.path = path;
    const up = path.stream;
    up.on('data', (frame: TcpFrame) => {
      if (frame.data && frame.data.length > 0) {
        if (!this.push(frame.data)) up.pause();
      } else if (frame.eof) {
        this.push(null);
      } else if (frame.error) {
        this.pathOver = true;
        this.destroy(new Error(frame.error.message || 'relay channel failed'));
      }
    });
    // The path ending is the connection closing: what is buffered is still read, then the end.
    up.on('end', () => {
      this.pathOver = true;
      this.push(null);
    });
    const broken = (err?: unknown) => {
      this.pathOver = true;
      this.destroy(err instanceof Error ? err : new Error('relay channel dropped'));
    };
    up.on('error', broken);
    up.on('cancelled', () => broken());
    const early = path.failure();
    if (early) queueMicrotask(() => broken(early));
  }

  override _read(): void {
    this.path.stream.resume();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    const up = this.path.stream;
    if (this.pathOver || up.writableEnded) return callback(new Error('tcp channel closed'));
    if (up.write({ data: chunk })) callback();
    else up.once('drain', () => callback());
  }

  override _final(callback: (err?: Error | null) => void): void {
    const up = this.path.stream;
    if (!this.pathOver && !up.writableEnded) up.write({ eof: {} });
    callback();
  }

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    const up = this.path.stream;
    if (!this.pathOver) {
      this.pathOver = true;
      // A clean close ends the channel; a failure on our side breaks it.
      if (err) this.path.abort(err.message);
      else if (!up.writableEnded) up.end();
    }
    callback(err);
  }

  // What node:http may call on a socket.
  setNoDelay(): this {
    return this;
  }
  setKeepAlive(): this {
    return this;
  }
  setTimeout(): this {
    return this;
  }
  ref(): this {
    return this;
  }
  unref(): this {
    return this;
  }
}
