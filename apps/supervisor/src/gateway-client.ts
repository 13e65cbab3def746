// The supervisor's client for sandgate.v1.SupervisorGateway: its three bidirectional streams
// (Control, ExecChannel, TcpChannel) spoken as gRPC over node:http2 directly. grpc-js stays the
// gateway's gRPC library; a supervisor runs once per sandbox, and grpc-js cost every sandbox's
// start its import and every idle sandbox the memory it holds, for a channel, a resolver, a load
// balancer and retries the supervisor does not use (BENCHMARKS.md, "The supervisor's gRPC client").
//
// One client is one HTTP/2 connection and is never re-dialled: a reconnect makes a new client,
// free to land on another replica behind the load balancer. A call behaves as grpc-js's duplex
// call did: object-mode messages, `cancel()`, and at its end `end`, then `error` (when the status
// is not OK) and `status`, each once. Every failure reaches the caller as such a status, never as
// a throw.
import * as http2 from 'node:http2';
import { connect as netConnect, type Socket } from 'node:net';
import { Duplex } from 'node:stream';
import { Code, codeName } from '@sandgate/core/status';
import { MetadataKey } from '@sandgate/protocols/contract';
import { supervisorGateway, type WireMethod } from '@sandgate/protocols/supervisor-wire';
import type { ExecFrame, GatewayMessage, SupervisorMessage, TcpFrame } from '@sandgate/protocols';
// Not `import … from 'node:tls'`: an ES module's view of a builtin reads every export, and
// tls.rootCertificates then copies Node's ~150 bundled root certificates into the heap (0.15 MiB
// per supervisor), which the supervisor never uses (the gateway's CA replaces them).
const { connect: tlsConnect } = process.getBuiltinModule('node:tls');

/** Request metadata: lower-case header names to ASCII values. */
export type CallMetadata = Readonly<Record<string, string>>;

export interface CallStatus {
  code: Code;
  details: string;
}

/** What `error` carries: grpc-js's ServiceError shape, which the logger's serialiser reads. */
export interface CallError extends Error {
  code: Code;
  details: string;
}

/** The gateway serves TLS: verify it against `ca`, for `serverName` whatever address is dialled. */
export interface GatewayTls {
  ca: Buffer;
  serverName: string;
}

export interface Keepalive {
  intervalMs: number;
  timeoutMs: number;
}

// As grpc-js was configured: a ping every 10 s, with or without calls, and the connection given
// up when one is not answered within 5 s (the gateway's server keeps the same pace).
const KEEPALIVE: Keepalive = { intervalMs: 10_000, timeoutMs: 5_000 };
/** grpc-js's default limit on a received message, kept. */
const MAX_RECEIVED_MESSAGE_BYTES = 4 * 1024 * 1024;
const FRAME_HEADER_BYTES = 5;

function callError(status: CallStatus): CallError {
  return Object.assign(new Error(`${status.code} ${codeName(status.code)}: ${status.details}`), status);
}

/** An HTTP status that is not 200 and came without a gRPC status, as gRPC's spec maps it. */
function fromHttpStatus(httpStatus: number): CallStatus {
  const code =
    httpStatus === 400 ? Code.INTERNAL
    : httpStatus === 401 ? Code.UNAUTHENTICATED
    : httpStatus === 403 ? Code.PERMISSION_DENIED
    : httpStatus === 404 ? Code.UNIMPLEMENTED
    : [429, 502, 503, 504].includes(httpStatus) ? Code.UNAVAILABLE
    : Code.UNKNOWN;
  return { code, details: `the gateway answered HTTP ${httpStatus} without a gRPC status` };
}

function readStatus(headers: http2.IncomingHttpHeaders): CallStatus | undefined {
  const raw = headers['grpc-status'];
  if (raw === undefined) return undefined;
  const code = Number(raw);
  const message = headers['grpc-message'];
  let details = typeof message === 'string' ? message : '';
  try {
    details = decodeURIComponent(details); // grpc-message is percent-encoded
  } catch {
    // not valid percent-encoding: shown as sent
  }
  return Number.isInteger(code) && code >= 0 && code <= 16 ? { code: code as Code, details } : { code: Code.UNKNOWN, details: `invalid grpc-status ${String(raw)}: ${details}` };
}

export class GatewayCall<Req, Res> extends Duplex {
  private readonly stream: http2.ClientHttp2Stream | undefined;
  private received: Buffer[] = [];
  private receivedBytes = 0;
  private httpStatus: number | undefined;
  /** The call's status once known: from the trailers, or decided here (cancel, a bad message). */
  private status: CallStatus | undefined;
  /** A transport failure (the connection refused, dropped, or its keepalive unanswered). */
  private failure: Error | undefined;
  private finished = false;

  private readonly encode: (message: Req) => Buffer;
  private readonly decode: (bytes: Buffer) => Res;

  constructor(open: () => http2.ClientHttp2Stream, encode: (message: Req) => Buffer, decode: (bytes: Buffer) => Res) {
    super({ objectMode: true });
    this.encode = encode;
    this.decode = decode;
    let stream: http2.ClientHttp2Stream;
    try {
      stream = open();
    } catch (err) {
      // A closed or closing connection, or metadata HTTP/2 refuses: a status, after the caller
      // has had the chance to listen for it.
      this.failure = err as Error;
      process.nextTick(() => this.finish());
      return;
    }
    this.stream = stream;
    stream.on('response', (headers, flags) => {
      this.httpStatus = Number(headers[':status']);
      // Trailers-only: the status came in the response headers.
      if (flags & http2.constants.NGHTTP2_FLAG_END_STREAM) this.onStatus(readStatus(headers));
    });
    stream.on('trailers', (headers) => this.onStatus(readStatus(headers)));
    stream.on('data', (chunk: Buffer) => this.onData(chunk));
    // The gateway's side is over and every message it sent was read. This side may still be open
    // (the gateway ended the call first), so the stream's 'close' may not come on its own.
    stream.on('end', () => this.finish());
    stream.on('error', (err: Error & { code?: string }) => {
      // A stream reset has its own code, read at 'close'; anything else is the connection's.
      if (err.code !== 'ERR_HTTP2_STREAM_ERROR') this.failure ??= err;
    });
    // After any 'error' of the same moment, so that its cause is known.
    stream.on('close', () => process.nextTick(() => this.finish()));
  }

  /** Ends the call from this side: the gateway sees it reset, the caller a CANCELLED status. */
  cancel(): void {
    if (this.finished) return;
    this.status ??= { code: Code.CANCELLED, details: 'Cancelled on client' };
    if (this.stream) this.stream.close(http2.constants.NGHTTP2_CANCEL);
    else process.nextTick(() => this.finish());
  }

  override _write(message: Req, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    const stream = this.stream;
    // After the call's end a write goes nowhere, as with grpc-js: the status says why.
    if (this.finished || !stream || stream.destroyed || stream.writableEnded) return callback();
    let body: Buffer;
    try {
      body = this.encode(message);
    } catch (err) {
      this.abort({ code: Code.INTERNAL, details: `a message could not be encoded: ${(err as Error).message}` });
      return callback();
    }
    const frame = Buffer.allocUnsafe(FRAME_HEADER_BYTES + body.length);
    frame[0] = 0; // not compressed
    frame.writeUInt32BE(body.length, 1);
    body.copy(frame, FRAME_HEADER_BYTES);
    // The callback waits for HTTP/2 to take the frame: its flow control is the call's backpressure.
    stream.write(frame, () => callback());
  }

  override _final(callback: (err?: Error | null) => void): void {
    if (this.stream && !this.stream.destroyed && !this.finished) this.stream.end();
    callback();
  }

  override _read(): void {
    this.stream?.resume();
  }

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    this.cancel();
    callback(err);
  }

  /**
   * The gateway's status. A failure ends the call now, whatever is unread (as grpc-js); an OK
   * ends it once the messages before it are read ('end').
   */
  private onStatus(status: CallStatus | undefined): void {
    this.status ??= status;
    if (this.status && this.status.code !== Code.OK) process.nextTick(() => this.finish());
  }

  private onData(chunk: Buffer): void {
    if (this.finished || this.status) return;
    this.received.push(chunk);
    this.receivedBytes += chunk.length;
    while (this.receivedBytes >= FRAME_HEADER_BYTES) {
      const head = this.peekHeader();
      const length = head.readUInt32BE(1);
      if (head[0] !== 0) return this.abort({ code: Code.INTERNAL, details: 'the gateway sent a compressed message, which this client never asks for' });
      if (length > MAX_RECEIVED_MESSAGE_BYTES) return this.abort({ code: Code.RESOURCE_EXHAUSTED, details: `received a message of ${length} bytes, more than the limit of ${MAX_RECEIVED_MESSAGE_BYTES}` });
      if (this.receivedBytes < FRAME_HEADER_BYTES + length) return;
      const frame = this.takeBytes(FRAME_HEADER_BYTES + length);
      let message: Res;
      try {
        message = this.decode(frame.subarray(FRAME_HEADER_BYTES));
      } catch (err) {
        return this.abort({ code: Code.INTERNAL, details: `a message from the gateway could not be decoded: ${(err as Error).message}` });
      }
      // The reader is behind: stop reading, and HTTP/2's window stops the gateway in turn.
      if (!this.push(message)) this.stream?.pause();
    }
  }

  private peekHeader(): Buffer {
    if (this.received[0]!.length < FRAME_HEADER_BYTES) this.received = [Buffer.concat(this.received)];
    return this.received[0]!;
  }

  private takeBytes(bytes: number): Buffer {
    const all = this.received.length === 1 ? this.received[0]! : Buffer.concat(this.received);
    const rest = all.subarray(bytes);
    this.received = rest.length > 0 ? [rest] : [];
    this.receivedBytes = rest.length;
    return all.subarray(0, bytes);
  }

  private abort(status: CallStatus): void {
    this.status ??= status;
    this.received = [];
    this.receivedBytes = 0;
    this.stream?.close(http2.constants.NGHTTP2_CANCEL);
  }

  private finalStatus(): CallStatus {
    if (this.status) return this.status;
    if (this.failure) return { code: Code.UNAVAILABLE, details: this.failure.message };
    const stream = this.stream;
    const rst = stream?.rstCode;
    if (rst === http2.constants.NGHTTP2_REFUSED_STREAM) return { code: Code.UNAVAILABLE, details: 'Stream refused by the gateway' };
    if (rst === http2.constants.NGHTTP2_CANCEL) {
      // Node reports a dropped connection as a cancel of its streams.
      return stream?.session?.destroyed || stream?.session?.closed ? { code: Code.UNAVAILABLE, details: 'Connection dropped' } : { code: Code.CANCELLED, details: 'Call cancelled by the gateway' };
    }
    if (rst === http2.constants.NGHTTP2_ENHANCE_YOUR_CALM) return { code: Code.RESOURCE_EXHAUSTED, details: 'Bandwidth exhausted or memory limit exceeded' };
    if (rst !== undefined && rst !== http2.constants.NGHTTP2_NO_ERROR) return { code: Code.INTERNAL, details: `Received RST_STREAM with code ${rst}` };
    if (this.httpStatus !== undefined && this.httpStatus !== 200) return fromHttpStatus(this.httpStatus);
    return { code: Code.INTERNAL, details: 'the call ended without a gRPC status' };
  }

  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    const status = this.finalStatus();
    // This side's half too, if it is still open: nothing written from now on would be read.
    const stream = this.stream;
    if (stream && !stream.closed && !stream.destroyed) stream.close(status.code === Code.OK ? http2.constants.NGHTTP2_NO_ERROR : http2.constants.NGHTTP2_CANCEL);
    this.push(null);
    if (status.code !== Code.OK) this.emit('error', callError(status));
    this.emit('status', status);
  }
}

export class GatewayClient {
  private readonly session: http2.ClientHttp2Session;
  private readonly socket: Socket;
  private readonly keepalive: NodeJS.Timeout;
  private activeCalls = 0;

  private readonly keepaliveTimeoutMs: number;

  /** `endpoint` is host:port. Throws only when it cannot be one; a refused dial is a call's status. */
  constructor(endpoint: string, tls?: GatewayTls, keepalive: Keepalive = KEEPALIVE) {
    this.keepaliveTimeoutMs = keepalive.timeoutMs;
    const url = new URL(`${tls ? 'https' : 'http'}://${endpoint}`);
    const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
    const port = Number(url.port || (tls ? 443 : 80));
    // The socket is ours: a session destroyed for an unanswered ping does not always close it.
    const socket = tls
      ? // The name is checked against the certificate's SANs, so a docker supervisor dialling the
        // bridge IP still verifies the certificate issued for `localhost` (or the load balancer's).
        tlsConnect({ host, port, ca: tls.ca, servername: tls.serverName, ALPNProtocols: ['h2'] })
      : netConnect({ host, port });
    this.socket = socket;
    this.session = http2.connect(url, {
      createConnection: () => socket,
      // As grpc-js: Node's per-session memory cap, when reached, fails every stream of the
      // connection; the gateway's flow control already bounds what is buffered.
      maxSessionMemory: Number.MAX_SAFE_INTEGER,
    });
    // Each call reports the connection's failure as its status; nothing more to do here.
    this.session.on('error', () => {});
    this.session.on('close', () => socket.destroy());
    this.session.unref(); // held open by its calls only, as a grpc-js channel
    this.keepalive = setInterval(() => this.ping(), keepalive.intervalMs).unref();
    this.session.on('close', () => clearInterval(this.keepalive));
  }

  Control(metadata: CallMetadata): GatewayCall<SupervisorMessage, GatewayMessage> {
    return this.call(supervisorGateway.Control, metadata);
  }

  ExecChannel(metadata: CallMetadata): GatewayCall<ExecFrame, ExecFrame> {
    return this.call(supervisorGateway.ExecChannel, metadata);
  }

  TcpChannel(metadata: CallMetadata): GatewayCall<TcpFrame, TcpFrame> {
    return this.call(supervisorGateway.TcpChannel, metadata);
  }

  /** Lets the calls in flight finish, then closes the connection; new calls fail UNAVAILABLE. */
  close(): void {
    clearInterval(this.keepalive);
    if (!this.session.closed && !this.session.destroyed) this.session.close();
  }

  private call<Req, Res>(method: WireMethod<Req, Res>, metadata: CallMetadata): GatewayCall<Req, Res> {
    return new GatewayCall<Req, Res>(
      () => {
        const stream = this.session.request({
          ...metadata,
          ':method': 'POST',
          ':path': method.path,
          'content-type': 'application/grpc',
          te: 'trailers',
          'user-agent': 'sandgate-supervisor',
        });
        if (this.activeCalls++ === 0) this.session.ref();
        stream.once('close', () => {
          if (--this.activeCalls === 0) this.session.unref();
        });
        return stream;
      },
      method.request.encode,
      method.response.decode,
    );
  }

  private ping(): void {
    const session = this.session;
    if (session.closed || session.destroyed) return;
    const timeoutMs = this.keepaliveTimeoutMs;
    const unanswered = setTimeout(() => {
      session.destroy(new Error(`the gateway did not answer a keepalive ping within ${timeoutMs} ms`));
      this.socket.destroy();
    }, timeoutMs).unref();
    try {
      if (!session.ping(() => clearTimeout(unanswered))) clearTimeout(unanswered);
    } catch {
      clearTimeout(unanswered);
    }
  }
}

export function createGatewayClient(endpoint: string, tls?: GatewayTls, keepalive?: Keepalive): GatewayClient {
  return new GatewayClient(endpoint, tls, keepalive);
}

export function callMetadata(sandboxId: string, credential: string): CallMetadata {
  return { [MetadataKey.credential]: credential, [MetadataKey.sandboxId]: sandboxId };
}
