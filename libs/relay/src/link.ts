// The peer link: how an entry replica relays one exec (or one TCP channel) to the owner replica.
//
// One plain TCP connection per relayed channel, on the owner's peer port (which tells it apart
// from gRPC by the first four bytes). A gRPC stream per exec cost ≈0.7 ms of grpc-js work on the
// critical path even when opened ahead of time; a framed socket costs a few tens of µs, and TCP
// gives each channel its own flow control, so back-pressure needs no protocol of its own.
//
// Wire: the connecting side sends the magic `SGL1`, then both sides send frames
//   u32 length (big-endian, counts type + payload) | u8 type | payload
// HELLO   client → server, first frame: JSON {secret, kind, from}
// MSG     either way: one protobuf message (ExecFrame or TcpFrame)
// OPENED  server → client: the owner has opened the channel to the supervisor (gRPC's headers)
// END     either way: no more MSG from the sender (half-close)
// STATUS  server → client: JSON {code, details, notHere}: the channel failed; the server closes
// PING    either way, every 1 s: a side that hears nothing for 3.5 s drops the connection, so a
//         frozen replica is noticed as fast as with the gRPC keepalive it replaces.
// Closing the connection without END is a cancel (the owner kills what the channel runs).
import { connect, type Socket } from 'node:net';
import { Duplex } from 'node:stream';

export const LINK_MAGIC = Buffer.from('SGL1');

export const LinkFrame = { HELLO: 1, MSG: 2, OPENED: 3, END: 4, STATUS: 5, PING: 6 } as const;

const HEADER_BYTES = 5;
/** Larger frames are a protocol error (an exec's whole stdin rides in its start frame). */
const MAX_FRAME_BYTES = 64 * 1024 * 1024;
export const LINK_PING_INTERVAL_MS = 1_000;
/** How long a connection to the peer port may take to send the four bytes that say what it is. */
export const SNIFF_TIMEOUT_MS = 10_000;
export const LINK_SILENCE_LIMIT_MS = 3_500;

export interface LinkCodec<T> {
  encode(frame: T): Uint8Array;
  decode(bytes: Uint8Array): T;
}

export interface LinkHello {
  secret: string;
  /** Which relay the channel carries: 'exec' or 'tcp'. */
  kind: string;
  from: string;
}

/** How a channel failed, as the client side sees it (shaped like a grpc-js ServiceError). */
export interface LinkError extends Error {
  code: number;
  details: string;
  /** The owner does not hold the session: nothing was started, routing again is safe. */
  notHere: boolean;
  /** The far end answered (STATUS) rather than the connection breaking. */
  answered: boolean;
}

const UNAVAILABLE = 14;

export function linkError(code: number, details: string, opts: { notHere?: boolean; answered?: boolean } = {}): LinkError {
  const err = new Error(details) as LinkError;
  err.code = code;
  err.details = details;
  err.notHere = opts.notHere ?? false;
  err.answered = opts.answered ?? false;
  return err;
}

export interface LinkTiming {
  pingIntervalMs?: number;
  silenceLimitMs?: number;
}

/**
 * One relayed channel as an object-mode Duplex of protobuf messages. The client side emits
 * 'metadata' when the owner reports the channel open and 'error' (a LinkError) when it fails;
 * the server side emits 'hello', and 'cancelled' when the client goes away without END. An
 * 'error' emitted on the server side (e.g. by endWithError) is sent to the client as STATUS.
 */
export class LinkChannel<T> extends Duplex {
  readonly role: 'client' | 'server';
  /** Server: the client went away without END. Client: cancel() was called. */
  cancelled = false;
  hello: LinkHello | null = null;
  private readonly socket: Socket;
  /** Server side: known once the HELLO said which relay the channel carries. */
  private codec: LinkCodec<T> | null;
  private readonly codecFor: ((hello: LinkHello) => LinkCodec<T> | null) | null;
  private readonly timer: NodeJS.Timeout;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private lastHeardMs = Date.now();
  private remoteEnded = false;
  private failed = false;
  private socketError = '';

  /** `codec` may be chosen from the HELLO (server side): null for a kind this side does not serve. */
  constructor(
    socket: Socket,
    codec: LinkCodec<T> | ((hello: LinkHello) => LinkCodec<T> | null),
    role: 'client' | 'server',
    timing: LinkTiming = {},
  ) {
    super({ objectMode: true, allowHalfOpen: true, highWaterMark: 16 });
    this.socket = socket;
    this.codec = typeof codec === 'function' ? null : codec;
    this.codecFor = typeof codec === 'function' ? codec : null;
    this.role = role;
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.onBytes(chunk));
    socket.on('error', (err) => (this.socketError ||= err.message));
    socket.on('close', () => this.onSocketClosed());
    const silenceLimit = timing.silenceLimitMs ?? LINK_SILENCE_LIMIT_MS;
    const interval = timing.pingIntervalMs ?? LINK_PING_INTERVAL_MS;
    let lastTickMs = Date.now();
    this.timer = setInterval(() => {
      const now = Date.now();
      // A late tick means this process was the one stalled (SIGSTOP, a long GC): what the peer
      // sent meanwhile is still unread in the socket, so its silence proves nothing yet.
      if (now - lastTickMs > 2 * interval) this.lastHeardMs = now;
      lastTickMs = now;
      if (now - this.lastHeardMs > silenceLimit) {
        this.socketError ||= `peer silent for more than ${silenceLimit} ms`;
        socket.destroy();
        return;
      }
      this.sendFrame(LinkFrame.PING);
    }, interval);
    this.timer.unref();
    // Both sides said END: the channel is over even if nobody reads what is left (an entry
    // replica stops reading once the exit went to its client).
    this.on('finish', () => {
      if (this.remoteEnded) this.destroy();
    });
    if (role === 'server') {
      // endWithError(call, err) emits 'error' on the call: for a link channel that is the status.
      this.on('error', (err: unknown) => this.sendStatus(err));
    }
  }

  /** Server: tell the client the channel is open (the equivalent of gRPC response headers). */
  sendMetadata(): void {
    this.sendFrame(LinkFrame.OPENED);
  }

  /** Client: abandon the channel; the owner sees a cancel and kills what it runs. */
  cancel(): void {
    if (this.cancelled) return;
    this.cancelled = true;
    this.socket.destroy();
  }

  sendHello(hello: LinkHello): void {
    this.socket.write(LINK_MAGIC);
    this.sendFrame(LinkFrame.HELLO, Buffer.from(JSON.stringify(hello)));
  }

  private sendStatus(err: unknown): void {
    if (this.failed || this.socket.destroyed) return;
    this.failed = true;
    const e = err as { code?: number; details?: string; message?: string; notHere?: boolean };
    const status = { code: e.code ?? UNAVAILABLE, details: e.details ?? e.message ?? 'peer channel failed', notHere: e.notHere === true };
    this.sendFrame(LinkFrame.STATUS, Buffer.from(JSON.stringify(status)));
    this.socket.end();
  }

  private sendFrame(type: number, payload?: Uint8Array): boolean {
    if (this.socket.destroyed || this.socket.writableEnded) return true;
    const header = Buffer.allocUnsafe(HEADER_BYTES);
    header.writeUInt32BE(1 + (payload?.length ?? 0), 0);
    header[4] = type;
    if (!payload?.length) return this.socket.write(header);
    this.socket.cork();
    this.socket.write(header);
    const ok = this.socket.write(payload);
    this.socket.uncork();
    return ok;
  }

  override _write(frame: T, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    // After the connection is gone writes are dropped: its closing already reported the failure.
    if (!this.codec || this.sendFrame(LinkFrame.MSG, this.codec.encode(frame)) || this.socket.destroyed) callback();
    else this.socket.once('drain', () => callback());
  }

  override _final(callback: (err?: Error | null) => void): void {
    this.sendFrame(LinkFrame.END);
    callback();
  }

  override _read(): void {
    this.socket.resume();
  }

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    clearInterval(this.timer);
    // A clean end flushes what is queued; anything else tears the connection down.
    if (!err && this.remoteEnded && this.writableFinished) this.socket.end();
    else this.socket.destroy();
    callback(err);
  }

  private onBytes(chunk: Buffer): void {
    this.lastHeardMs = Date.now();
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    while (this.pendingBytes >= HEADER_BYTES) {
      let head = this.pending[0]!;
      if (head.length < HEADER_BYTES) head = this.flatten();
      const length = head.readUInt32BE(0);
      if (length < 1 || length > MAX_FRAME_BYTES) return this.protocolError(`bad frame length ${length}`);
      if (this.pendingBytes < 4 + length) return;
      if (head.length < 4 + length) head = this.flatten();
      const type = head[4]!;
      const payload = head.subarray(HEADER_BYTES, 4 + length);
      const rest = head.subarray(4 + length);
      this.pending[0] = rest;
      this.pendingBytes -= 4 + length;
      if (rest.length === 0) this.pending.shift();
      this.onFrame(type, payload);
      if (this.destroyed || this.socket.destroyed) return;
    }
  }

  private flatten(): Buffer {
    const all = Buffer.concat(this.pending);
    this.pending = [all];
    return all;
  }

  private onFrame(type: number, payload: Buffer): void {
    switch (type) {
      case LinkFrame.PING:
        return;
      case LinkFrame.MSG: {
        if (this.remoteEnded || !this.codec) return this.protocolError('message out of order');
        let frame: T;
        try {
          frame = this.codec.decode(payload);
        } catch {
          return this.protocolError('undecodable message');
        }
        if (!this.push(frame)) this.socket.pause();
        return;
      }
      case LinkFrame.END:
        this.remoteEnded = true;
        this.push(null);
        if (this.writableFinished) this.destroy();
        return;
      case LinkFrame.HELLO:
        if (this.role !== 'server' || this.hello) return this.protocolError('unexpected hello');
        try {
          const parsed: unknown = JSON.parse(payload.toString());
          // Anything but {secret, kind, from} as strings (`null`, an array, a secret that is an
          // object) is refused here: the handlers that read it would throw, outside any catch.
          if (!isHello(parsed)) return this.protocolError('malformed hello');
          this.hello = parsed;
        } catch {
          return this.protocolError('undecodable hello');
        }
        if (this.codecFor) this.codec = this.codecFor(this.hello);
        if (!this.codec) return this.protocolError(`no relay of kind '${String(this.hello.kind)}' here`);
        this.emit('hello', this.hello);
        return;
      case LinkFrame.OPENED:
        if (this.role === 'client') this.emit('metadata');
        return;
      case LinkFrame.STATUS: {
        if (this.role !== 'client') return this.protocolError('unexpected status');
        let status: { code?: number; details?: string; notHere?: boolean };
        try {
          status = JSON.parse(payload.toString()) as typeof status;
        } catch {
          status = {};
        }
        this.fail(linkError(status.code ?? UNAVAILABLE, status.details ?? 'peer channel failed', { notHere: status.notHere === true, answered: true }));
        return;
      }
      default:
        return this.protocolError(`unknown frame type ${type}`);
    }
  }

  private protocolError(why: string): void {
    this.socketError ||= `peer link protocol error: ${why}`;
    this.socket.destroy();
  }

  /** Client: the channel failed; the reader sees the end, listeners see the error. */
  private fail(err: LinkError): void {
    if (this.failed) return;
    this.failed = true;
    this.push(null);
    this.emit('error', err);
    this.destroy();
  }

  private onSocketClosed(): void {
    clearInterval(this.timer);
    if (this.role === 'server') {
      if (!this.remoteEnded && !this.cancelled) {
        this.cancelled = true;
        this.emit('cancelled');
      }
      this.destroy();
      return;
    }
    if (this.cancelled) return void this.destroy();
    // After END every frame is here: the channel ends (and is destroyed) once it has been read.
    if (this.remoteEnded) return;
    this.fail(linkError(UNAVAILABLE, `peer link closed: ${this.socketError || 'connection closed'}`));
  }
}

function isHello(v: unknown): v is LinkHello {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const h = v as Record<string, unknown>;
  return typeof h.secret === 'string' && typeof h.kind === 'string' && typeof h.from === 'string';
}

/** Client side: connects to a peer port and says hello; usable at once (writes queue until connected). */
export function connectLink<T>(address: string, codec: LinkCodec<T>, hello: LinkHello, timing?: LinkTiming): LinkChannel<T> {
  const colon = address.lastIndexOf(':');
  const socket = connect({ host: address.slice(0, colon), port: Number(address.slice(colon + 1)) });
  const channel = new LinkChannel(socket, codec, 'client', timing);
  channel.sendHello(hello);
  return channel;
}

/**
 * Server side: tells a link connection from anything else (gRPC) by its first four bytes. Calls
 * `onLink` with the socket (the magic consumed), or `onOther` with the socket and the bytes
 * already read (to be handed to another protocol's server).
 */
export function sniffLink(
  socket: Socket,
  onLink: (socket: Socket) => void,
  onOther: (socket: Socket, head: Buffer) => void,
  timeoutMs = SNIFF_TIMEOUT_MS,
): void {
  const chunks: Buffer[] = [];
  let length = 0;
  // A connection that never sends its first four bytes would otherwise be held forever (found by
  // the fuzzer's slow-loris connections): neither protocol's own deadline has started yet.
  const timer = setTimeout(() => socket.destroy(), timeoutMs);
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
  const onData = (chunk: Buffer) => {
    chunks.push(chunk);
    length += chunk.length;
    if (length < LINK_MAGIC.length) return;
    clearTimeout(timer);
    socket.off('data', onData);
    socket.pause();
    const head = Buffer.concat(chunks);
    if (head.subarray(0, LINK_MAGIC.length).equals(LINK_MAGIC)) {
      const rest = head.subarray(LINK_MAGIC.length);
      if (rest.length) socket.unshift(rest);
      onLink(socket);
      socket.resume();
    } else onOther(socket, head);
  };
  socket.on('data', onData);
  socket.on('error', () => undefined);
}
