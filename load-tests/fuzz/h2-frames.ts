// Raw HTTP/2 frames (what node:http2 will not send): DATA after END_STREAM, frames on stream 0
// or on idle streams, even stream ids, CONTINUATION floods, rapid resets, PING and SETTINGS
// floods, zero window updates, oversized frames. Used by target `h2-frames` on the public gRPC
// port and by the peer target on the peer port (which hands non-link bytes to gRPC).
import { grpcFrame } from './h2.ts';
import { exchange } from './raw.ts';
import { bytes, int, pick, type Rng } from './rng.ts';
import type { FuzzTarget } from './target.ts';
import type { Tally } from './tally.ts';

export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
export const T = { DATA: 0, HEADERS: 1, PRIORITY: 2, RST_STREAM: 3, SETTINGS: 4, PUSH_PROMISE: 5, PING: 6, GOAWAY: 7, WINDOW_UPDATE: 8, CONTINUATION: 9 } as const;
export const F = { END_STREAM: 1, ACK: 1, END_HEADERS: 4, PADDED: 8, PRIORITY: 0x20 } as const;

export function frame(type: number, flags: number, streamId: number, payload: Buffer = Buffer.alloc(0), length?: number): Buffer {
  const head = Buffer.alloc(9);
  const len = length ?? payload.length;
  head[0] = (len >>> 16) & 0xff;
  head[1] = (len >>> 8) & 0xff;
  head[2] = len & 0xff;
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(streamId >>> 0, 5);
  return Buffer.concat([head, payload]);
}

function hpackInt(value: number, prefixBits: number, firstByteFlags: number): number[] {
  const max = (1 << prefixBits) - 1;
  if (value < max) return [firstByteFlags | value];
  const out = [firstByteFlags | max];
  let v = value - max;
  while (v >= 128) {
    out.push((v % 128) + 128);
    v = Math.floor(v / 128);
  }
  out.push(v);
  return out;
}

/** HPACK: every header as "literal without indexing, new name", no Huffman. */
export function hpack(headers: [string, string][]): Buffer {
  const out: Buffer[] = [];
  for (const [name, value] of headers) {
    const n = Buffer.from(name, 'latin1');
    const v = Buffer.from(value, 'latin1');
    out.push(Buffer.from([0x00, ...hpackInt(n.length, 7, 0)]), n, Buffer.from(hpackInt(v.length, 7, 0)), v);
  }
  return Buffer.concat(out);
}

export function requestHeaders(path: string, extra: [string, string][] = []): Buffer {
  return hpack([[':method', 'POST'], [':scheme', 'http'], [':path', path], [':authority', 'fuzz'], ['content-type', 'application/grpc'], ['te', 'trailers'], ...extra]);
}

const SETTINGS = frame(T.SETTINGS, 0, 0);

/** One hostile frame sequence (after the preface and an empty SETTINGS), named. */
export function hostileSequence(rng: Rng, path: string): { kind: string; frames: Buffer[] } {
  const hdr = requestHeaders(path);
  const msg = grpcFrame(bytes(rng, int(rng, 0, 64)));
  switch (int(rng, 0, 15)) {
    case 0:
      return { kind: 'data-after-end-stream', frames: [frame(T.HEADERS, F.END_HEADERS, 1, hdr), frame(T.DATA, F.END_STREAM, 1, msg), frame(T.DATA, 0, 1, msg), frame(T.DATA, F.END_STREAM, 1, msg)] };
    case 1:
      return { kind: 'headers-after-end-stream', frames: [frame(T.HEADERS, F.END_HEADERS | F.END_STREAM, 1, hdr), frame(T.HEADERS, F.END_HEADERS, 1, hdr)] };
    case 2:
      return { kind: 'data-on-stream-0', frames: [frame(T.DATA, 0, 0, msg)] };
    case 3:
      return { kind: 'data-on-idle-stream', frames: [frame(T.DATA, F.END_STREAM, 7, msg)] };
    case 4:
      return { kind: 'even-stream-id', frames: [frame(T.HEADERS, F.END_HEADERS | F.END_STREAM, 2, hdr)] };
    case 5: {
      // CONTINUATION flood: a header block that never ends (CVE-2024-27316 family).
      const frames = [frame(T.HEADERS, 0, 1, hdr)];
      for (let i = pick(rng, [100, 1000, 5000]); i > 0; i--) frames.push(frame(T.CONTINUATION, 0, 1, hpack([[`x-c${i}`, 'v'.repeat(int(rng, 0, 100))]])));
      return { kind: 'continuation-flood', frames };
    }
    case 6: {
      // Rapid reset (CVE-2023-44487): open and cancel streams as fast as possible.
      const frames: Buffer[] = [];
      const n = pick(rng, [100, 500, 2000]);
      for (let i = 0; i < n; i++) {
        const id = 1 + 2 * i;
        frames.push(frame(T.HEADERS, F.END_HEADERS, id, hdr), frame(T.RST_STREAM, 0, id, Buffer.from([0, 0, 0, 8])));
      }
      return { kind: 'rapid-reset', frames };
    }
    case 7: {
      const frames: Buffer[] = [];
      for (let i = pick(rng, [100, 1000, 10_000]); i > 0; i--) frames.push(frame(T.PING, 0, 0, bytes(rng, 8)));
      return { kind: 'ping-flood', frames };
    }
    case 8: {
      const frames: Buffer[] = [];
      for (let i = pick(rng, [100, 1000, 10_000]); i > 0; i--) frames.push(frame(T.SETTINGS, 0, 0, Buffer.from([0, 3, 0, 0, 0, 100])));
      return { kind: 'settings-flood', frames };
    }
    case 9:
      return { kind: 'window-update-zero', frames: [frame(T.HEADERS, F.END_HEADERS, 1, hdr), frame(T.WINDOW_UPDATE, 0, 1, Buffer.from([0, 0, 0, 0])), frame(T.WINDOW_UPDATE, 0, 0, Buffer.from([0x7f, 0xff, 0xff, 0xff]))] };
    case 10:
      return { kind: 'oversized-frame', frames: [frame(T.HEADERS, F.END_HEADERS, 1, hdr), frame(T.DATA, 0, 1, bytes(rng, 100), pick(rng, [16_385, 0xffffff]))] };
    case 11:
      return { kind: 'unknown-frame-type', frames: [frame(0xfa, 0xff, 1, bytes(rng, 32)), frame(T.HEADERS, F.END_HEADERS, 1, hdr), frame(T.DATA, F.END_STREAM, 1, msg)] };
    case 12:
      return { kind: 'priority-self-dependency', frames: [frame(T.PRIORITY, 0, 1, Buffer.from([0, 0, 0, 1, 16])), frame(T.HEADERS, F.END_HEADERS | F.END_STREAM, 1, hdr)] };
    case 13:
      return { kind: 'push-promise-from-client', frames: [frame(T.PUSH_PROMISE, F.END_HEADERS, 1, Buffer.concat([Buffer.from([0, 0, 0, 2]), hdr]))] };
    case 14:
      return { kind: 'garbage-hpack', frames: [frame(T.HEADERS, F.END_HEADERS | F.END_STREAM, 1, bytes(rng, int(rng, 1, 512)))] };
    default:
      return { kind: 'truncated-frame', frames: [frame(T.HEADERS, F.END_HEADERS, 1, hdr).subarray(0, int(rng, 1, 12))] };
  }
}

/** What the server sent back, by frame type: "GOAWAY(code)", "RST(code)", "HEADERS", or closed/timeout. */
export function readServerFrames(received: Buffer): string[] {
  const seen: string[] = [];
  let at = 0;
  while (at + 9 <= received.length) {
    const len = (received[at]! << 16) | (received[at + 1]! << 8) | received[at + 2]!;
    const type = received[at + 3]!;
    const payload = received.subarray(at + 9, at + 9 + len);
    if (type === T.GOAWAY && payload.length >= 8) seen.push(`GOAWAY(${payload.readUInt32BE(4)})`);
    else if (type === T.RST_STREAM && payload.length >= 4) seen.push(`RST(${payload.readUInt32BE(0)})`);
    else if (type === T.HEADERS) seen.push(received[at + 4]! & F.END_STREAM ? 'HEADERS(end)' : 'HEADERS');
    at += 9 + len;
  }
  return [...new Set(seen)].sort();
}

/** The server has said what it will say: the connection's end, a reset, or a call's last headers. */
function decisive(received: Buffer): boolean {
  return readServerFrames(received).some((s) => s.startsWith('GOAWAY') || s.startsWith('RST') || s === 'HEADERS(end)');
}

/** Sends preface + SETTINGS + the sequence to host:port; labels what came back. */
export async function sendSequence(host: string, port: number, frames: Buffer[], timeoutMs: number, preface = true): Promise<string> {
  const ex = await exchange({
    host,
    port,
    chunks: preface ? [PREFACE, SETTINGS, ...frames] : frames,
    halfClose: false,
    timeoutMs,
    stopWhen: decisive,
  });
  const seen = readServerFrames(ex.received);
  const what = seen.length ? seen.join('+') : 'nothing';
  if (ex.stopped) return `answered: ${what}`;
  if (ex.closed) return `closed (after ${what}${ex.error ? `, ${ex.error}` : ''})`;
  return seen.length ? `answered: ${what} (connection left open)` : 'timeout (no frame back)';
}

export function h2FramesTarget(methods: readonly { path: string; name: string }[], tally: Tally): FuzzTarget {
  return {
    name: 'h2-frames',
    async send(rng, _i, replica, ctx) {
      // Never CreateSandbox: a stray decodable body there would start compute (see guardCreate).
      const safe = methods.filter((m) => m.name !== 'CreateSandbox' && m.name !== 'StartSandbox');
      const seq = hostileSequence(rng, pick(rng, safe).path);
      tally.note(seq.kind);
      const outcome = await sendSequence(replica.host, replica.grpcPort, seq.frames, Math.min(ctx.timeoutMs, 2000));
      tally.noteTimeout(outcome, seq.kind);
      return outcome;
    },
  };
}
