// Raw gRPC over node:http2: whatever headers and bytes a fuzz input wants, with no gRPC library
// in the way, and the answer classified (grpc-status, HTTP status, RST_STREAM code, the
// connection closing, or no answer by the deadline).
import http2, { type ClientHttp2Session, type ClientHttp2Stream } from 'node:http2';

const GRPC_CODES = [
  'OK', 'CANCELLED', 'UNKNOWN', 'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED', 'NOT_FOUND', 'ALREADY_EXISTS',
  'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED', 'FAILED_PRECONDITION', 'ABORTED', 'OUT_OF_RANGE',
  'UNIMPLEMENTED', 'INTERNAL', 'UNAVAILABLE', 'DATA_LOSS', 'UNAUTHENTICATED',
];

export function grpcCodeName(code: string | number): string {
  return GRPC_CODES[Number(code)] ?? `code-${String(code)}`;
}

/** One gRPC length-prefixed message: flag byte, u32 length (or a lie), payload. */
export function grpcFrame(payload: Buffer, opts: { compressed?: boolean; length?: number } = {}): Buffer {
  const head = Buffer.alloc(5);
  head[0] = opts.compressed ? 1 : 0;
  head.writeUInt32BE((opts.length ?? payload.length) >>> 0, 1);
  return Buffer.concat([head, payload]);
}

/** Connects a client session with limits raised far enough to send what the fuzzer asks. */
export function connectH2(authority: string): ClientHttp2Session {
  const session = http2.connect(`http://${authority}`, {
    maxSendHeaderBlockLength: 8 * 1024 * 1024,
    maxHeaderListPairs: 100_000,
    maxSessionMemory: 256,
    peerMaxConcurrentStreams: 10_000,
    settings: { enablePush: false },
  });
  session.on('error', () => undefined);
  session.on('goaway', () => undefined);
  session.on('frameError', () => undefined);
  return session;
}

/** A session per key that is reconnected once the previous one is gone. */
export class SessionCache {
  private readonly sessions = new Map<string, ClientHttp2Session>();

  get(key: string, authority: string): ClientHttp2Session {
    const s = this.sessions.get(key);
    if (s && !s.closed && !s.destroyed) return s;
    const fresh = connectH2(authority);
    this.sessions.set(key, fresh);
    return fresh;
  }

  close(): void {
    for (const s of this.sessions.values()) s.destroy();
    this.sessions.clear();
  }
}

export interface RawCall {
  path: string;
  /** Headers beyond :method/:path/te/content-type (which `headers` may override or unset with null). */
  headers?: Record<string, string | string[] | null>;
  body: Buffer[];
  /** After the body: 'end' (END_STREAM, default), 'reset' (RST_STREAM CANCEL at once), 'hold' (neither). */
  after?: 'end' | 'reset' | 'hold';
  timeoutMs: number;
}

export function baseHeaders(path: string): Record<string, string> {
  return { ':method': 'POST', ':path': path, ':scheme': 'http', 'content-type': 'application/grpc', te: 'trailers' };
}

/**
 * Sends one call and resolves with its outcome label: `grpc CODE`, `http NNN`, `rst N` (the
 * server reset the stream), `closed …` (the session went away without an answer), `timeout`
 * (nothing by the deadline; the fuzzer then resets the stream), `reset by fuzzer`.
 */
export function rawCall(session: ClientHttp2Session, call: RawCall): Promise<string> {
  return new Promise((resolve) => {
    const headers: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries({ ...baseHeaders(call.path), ...call.headers })) if (v !== null && v !== undefined) headers[k] = v;
    let stream: ClientHttp2Stream;
    try {
      stream = session.request(headers, { endStream: false });
    } catch (err) {
      resolve(`client refused: ${(err as NodeJS.ErrnoException).code ?? 'error'}`);
      return;
    }
    let done = false;
    let httpStatus: string | undefined;
    let grpcStatus: string | undefined;
    const finish = (outcome: string) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (!stream.closed && !stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
      resolve(outcome);
    };
    const timer = setTimeout(() => finish(call.after === 'hold' ? 'held open (no answer while the fuzzer held the stream)' : 'timeout'), call.timeoutMs);
    stream.on('response', (h) => {
      httpStatus = String(h[':status']);
      if (h['grpc-status'] !== undefined) grpcStatus = String(h['grpc-status']);
      if (call.after === 'hold' && (grpcStatus !== undefined || httpStatus !== '200')) finish(label());
    });
    stream.on('trailers', (h) => {
      if (h['grpc-status'] !== undefined) grpcStatus = String(h['grpc-status']);
    });
    stream.on('data', () => undefined);
    stream.on('error', () => undefined);
    const label = () => {
      if (grpcStatus !== undefined) return `grpc ${grpcCodeName(grpcStatus)}`;
      if (httpStatus !== undefined && httpStatus !== '200') return `http ${httpStatus}`;
      if (stream.rstCode) return `rst ${stream.rstCode}`;
      if (session.destroyed || session.closed) return 'closed (session gone)';
      return 'closed (stream ended without status)';
    };
    stream.on('close', () => finish(label()));
    try {
      for (const chunk of call.body) stream.write(chunk);
      if (call.after === 'reset') setImmediate(() => finish('reset by fuzzer'));
      else if (call.after !== 'hold') stream.end();
    } catch {
      finish('closed (write failed)');
    }
  });
}
