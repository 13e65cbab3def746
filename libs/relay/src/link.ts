// The peer link: how an entry replica relays one exec (or one TCP channel, or one unary peer
// call) to the owner replica.
//
// One plain TCP connection per relayed channel at a time, on the owner's peer port. A gRPC stream
// per exec cost ≈0.7 ms of grpc-js work on the critical path even when opened ahead of time; a
// framed socket costs a few tens of µs, and TCP gives each channel its own flow control, so
// back-pressure needs no protocol of its own. A connection whose two sides agreed to it in the
// handshake (`reuse`) carries the next channel once one has ended cleanly (both ENDs, no STATUS,
// no cancel), as HTTP/1.1 keep-alive does: a connect and a handshake per relayed exec cost both
// replicas about as much CPU as the rest of the relay (BENCHMARKS.md, "Peer links kept").
//
// Wire: each side first sends the magic `SGL2`, then frames
//   u32 length (big-endian, counts type + payload) | u8 type | payload
// Handshake (handshake.ts): the server speaks first, unasked, so nothing the client sends is read
// before a challenge is out; nothing but these frames is accepted until it completes, and they
// are at most MAX_HANDSHAKE_FRAME_BYTES.
// CHALLENGE server → client, on accept: JSON {nonce, replica}
// HELLO     client → server: JSON {kind, from, to, nonce, mac, reuse?}; the secret itself is never sent
// PROOF     server → client: JSON {mac, reuse?}; the client sends no MSG before it checked it.
//           `reuse: true` in both (an older replica sends neither): the connection is kept for
//           the next channel after a clean end, whose first MSG starts it. After its END the
//           server sends nothing of that channel (a failure after it closes the connection).
// Then:
// MSG     either way: one protobuf message (ExecFrame or TcpFrame), or one JSON peer call
// OPENED  server → client: the owner has opened the channel to the supervisor (gRPC's headers)
// END     either way: no more MSG from the sender (half-close)
// STATUS  server → client: JSON {code, details, notHere}: the channel failed; the server closes
// PING    either way, every 1 s once authenticated: a side that hears nothing for 3.5 s drops the
//         connection, so a frozen replica is noticed as fast as with the gRPC keepalive it replaces.
//         Not while that side holds its own reading back (a slow consumer): the pings then wait
//         behind the data it has not read, so the clock restarts when it reads again.
// Closing the connection without END is a cancel (the owner kills what the channel runs).
// On a kept connection a new LinkChannel object carries each channel: the finished one emits
// 'successor' (the next, already authenticated) and lets go of the socket.
import { connect, type Socket } from 'node:net';
import { Duplex } from 'node:stream';
import { handshakeMac, macValid, newNonce, NONCE_BYTES, type Transcript } from './handshake.ts';

export const LINK_MAGIC = Buffer.from('SGL2');

export const LinkFrame = { HELLO: 1, MSG: 2, OPENED: 3, END: 4, STATUS: 5, PING: 6, CHALLENGE: 7, PROOF: 8 } as const;

const HEADER_BYTES = 5;
/** Larger frames are a protocol error (an exec's whole stdin rides in its start frame). */
const MAX_FRAME_BYTES = 64 * 1024 * 1024;
/** Before authentication nothing larger is buffered: a stranger cannot make us hold 64 MiB. */
export const MAX_HANDSHAKE_FRAME_BYTES = 4096;
export const LINK_PING_INTERVAL_MS = 1_000;
export const LINK_SILENCE_LIMIT_MS = 3_500;

export interface LinkCodec<T> {
  encode(frame: T): Uint8Array;
  decode(bytes: Uint8Array): T;
}

/** What the client side needs to open a link; `secret` is used for the MACs and never sent. */
export interface LinkHello {
  secret: string;
  /** Which relay the channel carries: 'exec', 'tcp' or 'call'. */
  kind: string;
  from: string;
  /** The replica the client means to reach; when set, a server naming itself otherwise is refused. */
  to?: string;
  /** Ask to keep the connection for the next channel after a clean end ('successor'). */
  reuse?: boolean;
}

/** An authenticated HELLO, as the server side sees it. */
export interface LinkPeer {
  kind: string;
  from: string;
  to: string;
}

/** The server side's half of the handshake. */
export interface LinkServerAuth {
  secret: string;
  /** This replica's id: named in the CHALLENGE and bound into both MACs. */
  self: string;
  /** Keep connections for a next channel when the client asks to. */
  reuse?: boolean;
}

/** An authenticated connection handed from a channel that ended cleanly to the next one. */
interface KeptConnection {
  socket: Socket;
  /** Bytes already read that belong to the next channel. */
  pending: Buffer[];
  hello: LinkPeer | null;
  lastHeardMs: number;
}

/** How a channel failed, as the client side sees it (shaped like a grpc-js ServiceError). */
export interface LinkError extends Error {
  code: number;
  details: string;
  /** The owner does not hold the session: nothing was started, routing again is safe. */
  notHere: boolean;
  /** The far end answered (STATUS) rather than the connection breaking. */
  answered: boolean;
  /**
   * The link closed before its handshake completed (refused connection, a peer that never
   * proved itself): frames are held until then, so none of this channel's left this process and
   * nothing ran at the far end. Sending the channel elsewhere is safe.
   */
  unsent: boolean;
}

const UNAVAILABLE = 14;

export function linkError(code: number, details: string, opts: { notHere?: boolean; answered?: boolean; unsent?: boolean } = {}): LinkError {
  const err = new Error(details) as LinkError;
  err.code = code;
  err.details = details;
  err.notHere = opts.notHere ?? false;
  err.answered = opts.answered ?? false;
  err.unsent = opts.unsent ?? false;
  return err;
}

export interface LinkTiming {
  pingIntervalMs?: number;
  silenceLimitMs?: number;
}

/**
 * One relayed channel as an object-mode Duplex of protobuf messages. The client side emits
 * 'metadata' when the owner reports the channel open and 'error' (a LinkError) when it fails;
 * the server side emits 'hello' (a LinkPeer, once the client proved it holds the secret), and
 * 'cancelled' when the client goes away without END. Either side emits 'refused' (a reason)
 * when the other end failed the handshake or spoke something else, just before closing. An
 * 'error' emitted on the server side (e.g. by endWithError) is sent to the client as STATUS.
 */
export class LinkChannel<T> extends Duplex {
  readonly role: 'client' | 'server';
  /** Server: the client went away without END. Client: cancel() was called. */
  cancelled = false;
  /** Server: the authenticated HELLO. */
  hello: LinkPeer | null = null;
  private readonly socket: Socket;
  /** Server side: known once the HELLO said which relay the channel carries. */
  private codec: LinkCodec<T> | null;
  private readonly codecFor: ((hello: LinkPeer) => LinkCodec<T> | null) | null;
  private readonly timer: NodeJS.Timeout;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private lastHeardMs = Date.now();
  /**
   * Our reader is full, so the socket is paused: the peer's pings wait unread behind its data.
   * Its silence proves nothing then; the clock starts again once we read.
   */
  private readHeld = false;
  private remoteEnded = false;
  private failed = false;
  private socketError = '';
  // ---- handshake state ----
  /** The other side's magic has not been seen yet. */
  private awaitingMagic = true;
  /** Both sides proved themselves: MSG and the rest may flow. */
  private authenticated = false;
  private readonly clientHello: LinkHello | null;
  private readonly serverAuth: LinkServerAuth | null;
  private transcript: Transcript | null = null;
  private readonly serverNonce: Buffer | null = null;
  /** Client: writes (and the end) wait here until the server's proof checked out. */
  private held: Array<() => void> = [];
  /** Both sides agreed in the handshake to keep the connection for a next channel. */
  private reusable = false;
  /** This channel sent END. */
  private localEnded = false;
  /** The connection went to the next channel: this one no longer reads or writes it. */
  private handedOver = false;
  private readonly timing: LinkTiming;
  private readonly onSocketData = (chunk: Buffer) => this.onBytes(chunk);
  private readonly onSocketError = (err: Error) => (this.socketError ||= err.message);
  private readonly onSocketClose = () => this.onSocketClosed();

  /**
   * Client: `auth` is the hello (and the secret for the MACs). Server: `auth` is this replica's
   * secret and id, and `codec` may be chosen from the HELLO (null for a kind this side does not serve).
   */
  constructor(
    socket: Socket,
    codec: LinkCodec<T> | ((hello: LinkPeer) => LinkCodec<T> | null),
    role: 'client' | 'server',
    auth: LinkHello | LinkServerAuth,
    timing: LinkTiming = {},
    kept?: KeptConnection,
  ) {
    super({ objectMode: true, allowHalfOpen: true, highWaterMark: 16 });
    this.socket = socket;
    this.codec = typeof codec === 'function' ? null : codec;
    this.codecFor = typeof codec === 'function' ? codec : null;
    this.role = role;
    this.clientHello = role === 'client' ? (auth as LinkHello) : null;
    this.serverAuth = role === 'server' ? (auth as LinkServerAuth) : null;
    this.timing = timing;
    socket.setNoDelay(true);
    socket.on('data', this.onSocketData);
    socket.on('error', this.onSocketError);
    socket.on('close', this.onSocketClose);
    const silenceLimit = timing.silenceLimitMs ?? LINK_SILENCE_LIMIT_MS;
    const interval = timing.pingIntervalMs ?? LINK_PING_INTERVAL_MS;
    let lastTickMs = Date.now();
    this.timer = setInterval(() => {
      const now = Date.now();
      // A late tick means this process was the one stalled (SIGSTOP, a long GC): what the peer
      // sent meanwhile is still unread in the socket, so its silence proves nothing yet.
      if (now - lastTickMs > 2 * interval || this.readHeld) this.lastHeardMs = now;
      lastTickMs = now;
      if (now - this.lastHeardMs > silenceLimit) {
        this.socketError ||= `peer silent for more than ${silenceLimit} ms`;
        socket.destroy();
        return;
      }
      // Nothing but handshake frames before it completed (the other side would refuse a PING).
      if (this.authenticated) this.sendFrame(LinkFrame.PING);
    }, interval);
    this.timer.unref();
    if (kept) {
      // The handshake happened on this connection already, for the channel before.
      this.awaitingMagic = false;
      this.authenticated = true;
      this.reusable = true;
      this.hello = kept.hello;
      this.lastHeardMs = kept.lastHeardMs;
      if (this.codecFor && this.hello) this.codec = this.codecFor(this.hello);
      socket.resume();
    }
    // Both sides said END: the channel is over even if nobody reads what is left (an entry
    // replica stops reading once the exit went to its client).
    this.on('finish', () => {
      if (this.remoteEnded) this.destroy();
    });
    if (role === 'server') {
      // endWithError(call, err) emits 'error' on the call: for a link channel that is the status.
      this.on('error', (err: unknown) => this.sendStatus(err));
      if (!kept) {
        // The challenge goes out before a byte from the client is read.
        this.serverNonce = newNonce();
        socket.write(LINK_MAGIC);
        this.sendFrame(LinkFrame.CHALLENGE, Buffer.from(JSON.stringify({ nonce: this.serverNonce.toString('base64'), replica: this.serverAuth!.self })));
      }
    }
    // What the channel before read past its END is this one's first bytes.
    if (kept && kept.pending.length > 0) this.onBytes(Buffer.concat(kept.pending));
  }

  /** Server: tell the client the channel is open (the equivalent of gRPC response headers). */
  sendMetadata(): void {
    this.sendFrame(LinkFrame.OPENED);
  }

  /** Client: abandon the channel; the owner sees a cancel and kills what it runs. */
  cancel(): void {
    if (this.cancelled || this.handedOver) return;
    this.cancelled = true;
    this.socket.destroy();
  }

  private sendStatus(err: unknown): void {
    if (this.failed || this.handedOver || this.socket.destroyed || !this.authenticated) return;
    this.failed = true;
    // After our END the client may already be starting its next channel on this connection: a
    // STATUS now would be read as that channel's. The channel's data is all out; close instead.
    if (this.localEnded) return void this.socket.end();
    const e = err as { code?: number; details?: string; message?: string; notHere?: boolean };
    const status = { code: e.code ?? UNAVAILABLE, details: e.details ?? e.message ?? 'peer channel failed', notHere: e.notHere === true };
    this.sendFrame(LinkFrame.STATUS, Buffer.from(JSON.stringify(status)));
    this.socket.end();
  }

  private sendFrame(type: number, payload?: Uint8Array): boolean {
    if (this.handedOver || this.socket.destroyed || this.socket.writableEnded) return true;
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
    if (!this.authenticated && !this.socket.destroyed) {
      this.held.push(() => this._write(frame, _encoding, callback));
      return;
    }
    // After the connection is gone writes are dropped: its closing already reported the failure.
    if (!this.codec || this.sendFrame(LinkFrame.MSG, this.codec.encode(frame)) || this.socket.destroyed) callback();
    else this.socket.once('drain', () => callback());
  }

  override _final(callback: (err?: Error | null) => void): void {
    if (!this.authenticated && !this.socket.destroyed) {
      this.held.push(() => this._final(callback));
      return;
    }
    this.localEnded = true;
    this.sendFrame(LinkFrame.END);
    callback();
  }

  override _read(): void {
    if (this.handedOver) return;
    if (this.readHeld) {
      this.readHeld = false;
      this.lastHeardMs = Date.now();
    }
    this.socket.resume();
  }

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    clearInterval(this.timer);
    const clean = !err && this.remoteEnded && this.writableFinished && !this.failed && !this.cancelled;
    // A clean end hands a kept connection to the next channel; without reuse it flushes what is
    // queued and closes; anything else tears the connection down.
    if (clean && this.reusable && this.listenerCount('successor') > 0 && this.socket.readable && this.socket.writable && !this.socket.destroyed) this.handOver();
    else if (clean) this.socket.end();
    else this.socket.destroy();
    this.releaseHeld();
    callback(err);
  }

  /** Gives the connection, and what was read of it past our END, to a new channel ('successor'). */
  private handOver(): void {
    this.handedOver = true;
    this.socket.off('data', this.onSocketData);
    this.socket.off('error', this.onSocketError);
    this.socket.off('close', this.onSocketClose);
    const kept: KeptConnection = { socket: this.socket, pending: this.pending, hello: this.hello, lastHeardMs: this.lastHeardMs };
    this.pending = [];
    this.pendingBytes = 0;
    const codec = this.codecFor ?? this.codec!;
    const auth = (this.role === 'client' ? this.clientHello : this.serverAuth)!;
    this.emit('successor', new LinkChannel<T>(this.socket, codec, this.role, auth, this.timing, kept));
  }

  /** Runs what waited for the handshake (or, once the socket is gone, lets it drop). */
  private releaseHeld(): void {
    const held = this.held;
    this.held = [];
    for (const run of held) run();
  }

  private onBytes(chunk: Buffer): void {
    this.lastHeardMs = Date.now();
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    if (this.awaitingMagic) {
      const head = this.flatten();
      const seen = head.subarray(0, Math.min(head.length, LINK_MAGIC.length));
      // Checked byte by byte as they come: an HTTP/2 preface or a stray client is dropped at once.
      if (!seen.equals(LINK_MAGIC.subarray(0, seen.length))) return this.refuse('not the peer link protocol');
      if (head.length < LINK_MAGIC.length) return;
      this.awaitingMagic = false;
      this.pending = head.length > LINK_MAGIC.length ? [head.subarray(LINK_MAGIC.length)] : [];
      this.pendingBytes -= LINK_MAGIC.length;
    }
    while (this.pendingBytes >= HEADER_BYTES) {
      let head = this.pending[0]!;
      if (head.length < HEADER_BYTES) head = this.flatten();
      const length = head.readUInt32BE(0);
      const type = head[4]!;
      if (!this.authenticated) {
        // Judged on the header alone: before the handshake no other frame is decoded, or buffered.
        const expected = this.role === 'server' ? LinkFrame.HELLO : this.transcript ? LinkFrame.PROOF : LinkFrame.CHALLENGE;
        if (type !== expected) return this.refuse(`frame type ${type} before the handshake completed`);
        if (length < 1 || length > MAX_HANDSHAKE_FRAME_BYTES) return this.refuse(`handshake frame of ${length} bytes`);
      }
      if (length < 1 || length > MAX_FRAME_BYTES) return this.protocolError(`bad frame length ${length}`);
      if (this.pendingBytes < 4 + length) return;
      if (head.length < 4 + length) head = this.flatten();
      const payload = head.subarray(HEADER_BYTES, 4 + length);
      const rest = head.subarray(4 + length);
      this.pending[0] = rest;
      this.pendingBytes -= 4 + length;
      if (rest.length === 0) this.pending.shift();
      if (this.authenticated) this.onFrame(type, payload);
      else this.onHandshakeFrame(type, payload);
      if (this.handedOver || this.destroyed || this.socket.destroyed) return;
    }
  }

  private flatten(): Buffer {
    const all = Buffer.concat(this.pending);
    this.pending = [all];
    return all;
  }

  private onHandshakeFrame(type: number, payload: Buffer): void {
    const body = parseJson(payload);
    if (!body) return this.refuse('undecodable handshake frame');
    if (type === LinkFrame.CHALLENGE) {
      const hello = this.clientHello!;
      const serverNonce = nonceOf(body.nonce);
      const to = body.replica;
      if (!serverNonce || typeof to !== 'string') return this.refuse('malformed challenge');
      if (hello.to !== undefined && hello.to !== to) return this.refuse(`the peer port is replica '${to}', not '${hello.to}'`);
      const clientNonce = newNonce();
      this.transcript = { serverNonce, clientNonce, kind: hello.kind, from: hello.from, to };
      const mac = handshakeMac(hello.secret, 'client', this.transcript);
      this.socket.write(LINK_MAGIC);
      this.sendFrame(
        LinkFrame.HELLO,
        Buffer.from(
          JSON.stringify({ kind: hello.kind, from: hello.from, to, nonce: clientNonce.toString('base64'), mac: mac.toString('base64'), ...(hello.reuse ? { reuse: true } : {}) }),
        ),
      );
      return;
    }
    if (type === LinkFrame.PROOF) {
      const mac = typeof body.mac === 'string' ? Buffer.from(body.mac, 'base64') : Buffer.alloc(0);
      if (!macValid(this.clientHello!.secret, 'server', this.transcript!, mac)) return this.refuse('the peer could not prove it holds the peer secret');
      this.authenticated = true;
      this.reusable = this.clientHello!.reuse === true && body.reuse === true;
      this.releaseHeld();
      return;
    }
    // HELLO, server side.
    const auth = this.serverAuth!;
    const clientNonce = nonceOf(body.nonce);
    const { kind, from, to } = body;
    if (!clientNonce || typeof kind !== 'string' || typeof from !== 'string' || typeof to !== 'string' || typeof body.mac !== 'string') {
      return this.refuse('malformed hello');
    }
    const transcript: Transcript = { serverNonce: this.serverNonce!, clientNonce, kind, from, to };
    // `to` is in the transcript, so a HELLO made for another replica's challenge fails here too.
    if (to !== auth.self || !macValid(auth.secret, 'client', transcript, Buffer.from(body.mac, 'base64'))) {
      return this.refuse(`bad hello MAC (from '${from}')`);
    }
    this.hello = { kind, from, to };
    if (this.codecFor) this.codec = this.codecFor(this.hello);
    if (!this.codec) return this.refuse(`no relay of kind '${kind}' here`);
    this.authenticated = true;
    this.reusable = auth.reuse === true && body.reuse === true;
    const proof = { mac: handshakeMac(auth.secret, 'server', transcript).toString('base64'), ...(this.reusable ? { reuse: true } : {}) };
    this.sendFrame(LinkFrame.PROOF, Buffer.from(JSON.stringify(proof)));
    this.emit('hello', this.hello);
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
        if (!this.push(frame)) {
          this.readHeld = true;
          this.socket.pause();
        }
        return;
      }
      case LinkFrame.END:
        this.remoteEnded = true;
        this.push(null);
        if (this.writableFinished) this.destroy();
        return;
      case LinkFrame.OPENED:
        if (this.role === 'client') this.emit('metadata');
        return;
      case LinkFrame.STATUS: {
        if (this.role !== 'client') return this.protocolError('unexpected status');
        const status = (parseJson(payload) ?? {}) as { code?: number; details?: string; notHere?: boolean };
        this.fail(linkError(status.code ?? UNAVAILABLE, status.details ?? 'peer channel failed', { notHere: status.notHere === true, answered: true }));
        return;
      }
      default:
        return this.protocolError(`unexpected frame type ${type}`);
    }
  }

  /** The other end failed the handshake or speaks something else: closed, and said so once. */
  private refuse(why: string): void {
    this.socketError ||= `peer link refused: ${why}`;
    this.pending = [];
    this.pendingBytes = 0;
    this.emit('refused', why);
    this.socket.destroy();
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
      if (this.authenticated && !this.remoteEnded && !this.cancelled) {
        this.cancelled = true;
        this.emit('cancelled');
      }
      this.destroy();
      return;
    }
    if (this.cancelled) return void this.destroy();
    // After END every frame is here: the channel ends (and is destroyed) once it has been read.
    if (this.remoteEnded) return;
    this.fail(linkError(UNAVAILABLE, `peer link closed: ${this.socketError || 'connection closed'}`, { unsent: !this.authenticated }));
  }
}

function parseJson(payload: Buffer): Record<string, unknown> | null {
  try {
    const value: unknown = JSON.parse(payload.toString());
    return value && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

function nonceOf(value: unknown): Buffer | null {
  if (typeof value !== 'string') return null;
  const nonce = Buffer.from(value, 'base64');
  return nonce.length === NONCE_BYTES ? nonce : null;
}

/**
 * Client side: connects to a peer port; usable at once (writes queue until the server proved
 * itself). The HELLO goes out when the server's challenge arrives.
 */
export function connectLink<T>(address: string, codec: LinkCodec<T>, hello: LinkHello, timing?: LinkTiming): LinkChannel<T> {
  const colon = address.lastIndexOf(':');
  const socket = connect({ host: address.slice(0, colon), port: Number(address.slice(colon + 1)) });
  return new LinkChannel(socket, codec, 'client', hello, timing);
}

/** Server side: a peer-port connection; the challenge goes out at once. */
export function acceptLink<T>(
  socket: Socket,
  codecFor: (hello: LinkPeer) => LinkCodec<T> | null,
  auth: LinkServerAuth,
  timing?: LinkTiming,
): LinkChannel<T> {
  return new LinkChannel(socket, codecFor, 'server', auth, timing);
}

/** A peer-link codec of JSON values (the unary peer calls). */
export function jsonCodec<T>(): LinkCodec<T> {
  return {
    encode: (value) => Buffer.from(JSON.stringify(value)),
    decode: (bytes) => JSON.parse(Buffer.from(bytes).toString()) as T,
  };
}
