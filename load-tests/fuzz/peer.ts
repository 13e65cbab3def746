// Target `peer`: the replica-to-replica port, which tells peer links (magic `SGL1`) from gRPC
// (sandgate.v1.Peer) by the first four bytes. Random bytes, fewer than four bytes, the magic
// followed by garbage, bad and lying frame lengths, truncated frames, frames of every type before
// or without a handshake, wrong handshakes (link-frames.ts), HTTP/2 prefaces with hostile frame
// sequences, Peer gRPC calls without or with a wrong secret, and other protocols' first bytes.
import { grpcFrame, rawCall } from './h2.ts';
import { hostileSequence, sendSequence } from './h2-frames.ts';
import { handshakeFrames, LINK_MAGIC, LinkFrame, linkFrame, MAX_FRAME_BYTES } from './link-frames.ts';
import { body } from './messages.ts';
import { methodsOf } from './grpc-methods.ts';
import { exchange, type Exchange } from './raw.ts';
import { bytes, chance, int, junkString, pick, skewedLength, type Rng } from './rng.ts';
import type { FuzzTarget } from './target.ts';
import type { Tally } from './tally.ts';

const PEER_METHODS = methodsOf('sandgate.v1.Peer');
const FRAME_TYPES = Object.values(LinkFrame) as number[];

function linkInput(rng: Rng): { kind: string; chunks: Buffer[] } {
  const anyType = () => (chance(rng, 0.8) ? pick(rng, FRAME_TYPES) : int(rng, 0, 255));
  switch (int(rng, 0, 9)) {
    case 0:
      return { kind: 'magic+random-bytes', chunks: [LINK_MAGIC, bytes(rng, int(rng, 1, skewedLength(rng, 4096) + 1))] };
    case 1:
      return { kind: 'zero-length-frame', chunks: [LINK_MAGIC, linkFrame(anyType(), Buffer.alloc(0), 0)] };
    case 2:
      return { kind: 'oversized-length', chunks: [LINK_MAGIC, linkFrame(anyType(), bytes(rng, 16), pick(rng, [MAX_FRAME_BYTES + 1, 0x7fffffff, 0xffffffff]))] };
    case 3:
      // Claims a big frame, sends part of it, closes: what was buffered must be let go.
      return { kind: 'truncated-frame', chunks: [LINK_MAGIC, linkFrame(anyType(), bytes(rng, int(rng, 0, 2048)), pick(rng, [4096, 1 << 20, MAX_FRAME_BYTES]))] };
    case 4: {
      // Well-formed frames of random types, before any handshake.
      const frames = Array.from({ length: int(rng, 1, 6) }, () => linkFrame(anyType(), chance(rng, 0.5) ? bytes(rng, int(rng, 0, 256)) : Buffer.from(JSON.stringify({ code: 0, details: junkString(rng, 20) }))));
      return { kind: 'frames-before-handshake', chunks: [LINK_MAGIC, ...frames] };
    }
    case 5:
      return { kind: 'wrong-handshake', chunks: [LINK_MAGIC, ...handshakeFrames(int(rng, 0, 1000))] };
    case 6:
      // A wrong handshake followed by traffic that would only be valid after a good one.
      return { kind: 'traffic-after-wrong-handshake', chunks: [LINK_MAGIC, ...handshakeFrames(int(rng, 0, 1000)), linkFrame(LinkFrame.MSG, bytes(rng, 32)), linkFrame(LinkFrame.END)] };
    case 7:
      return { kind: 'header-split', chunks: [LINK_MAGIC, ...[...linkFrame(anyType(), bytes(rng, 8))].map((b) => Buffer.from([b]))] };
    case 8:
      return { kind: 'magic-twice', chunks: [LINK_MAGIC, LINK_MAGIC, linkFrame(LinkFrame.PING)] };
    default:
      // Rarely: a pre-handshake frame of a few MiB that is never completed (buffered memory).
      return { kind: 'big-partial-frame', chunks: chance(rng, 0.1) ? [LINK_MAGIC, linkFrame(LinkFrame.HELLO, Buffer.alloc(int(rng, 1, 4) << 20, 0x7b), MAX_FRAME_BYTES)] : [LINK_MAGIC, linkFrame(LinkFrame.PING), linkFrame(LinkFrame.PING)] };
  }
}

function otherInput(rng: Rng): { kind: string; chunks: Buffer[] } {
  switch (int(rng, 0, 4)) {
    case 0:
      return { kind: 'random-bytes', chunks: [bytes(rng, int(rng, 1, skewedLength(rng, 4096) + 1))] };
    case 1:
      return { kind: 'under-four-bytes', chunks: [pick(rng, [Buffer.from('S'), Buffer.from('SG'), Buffer.from('SGL'), bytes(rng, int(rng, 1, 3))])] };
    case 2:
      return { kind: 'near-magic', chunks: [pick(rng, [Buffer.from('SGL2'), Buffer.from('sgl1'), Buffer.from('SGL'), Buffer.from('PRI ')]), bytes(rng, 64)] };
    case 3:
      return { kind: 'http1', chunks: [Buffer.from('GET / HTTP/1.1\r\nHost: peer\r\n\r\n')] };
    default:
      return { kind: 'tls-hello', chunks: [Buffer.from([0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03]), bytes(rng, 160)] };
  }
}

/** Link frames the server sent back (it pings even before a handshake, and may send STATUS). */
function linkReply(ex: Exchange): string {
  const types = new Set<string>();
  let at = 0;
  const r = ex.received;
  while (at + 5 <= r.length) {
    const len = r.readUInt32BE(at);
    const type = r[at + 4]!;
    types.add(Object.entries(LinkFrame).find(([, v]) => v === type)?.[0] ?? `type${type}`);
    if (len < 1) break;
    at += 4 + len;
  }
  if (r.length && !types.size) types.add(`${r.length} bytes`);
  const heard = types.size ? [...types].sort().join('+') : 'nothing';
  if (ex.closed) return `closed (${ex.ms < 100 ? '<100 ms' : ex.ms < 1000 ? '<1 s' : '≥1 s'}, heard ${heard}${ex.error ? `, ${ex.error}` : ''})`;
  return `timeout (open at the deadline, heard ${heard})`;
}

export function peerTarget(tally: Tally): FuzzTarget {
  return {
    name: 'peer',
    async send(rng, index, replica, ctx) {
      const timeoutMs = Math.min(ctx.timeoutMs, 1500);
      const r = rng();
      if (r < 0.55) {
        const input = linkInput(rng);
        tally.note(`link:${input.kind}`);
        const outcome = linkReply(await exchange({ host: replica.host, port: replica.peerPort, chunks: input.chunks, halfClose: chance(rng, 0.3), timeoutMs }));
        tally.noteTimeout(outcome, `link:${input.kind}`);
        return outcome;
      }
      if (r < 0.7) {
        const input = otherInput(rng);
        tally.note(`raw:${input.kind}`);
        const outcome = linkReply(await exchange({ host: replica.host, port: replica.peerPort, chunks: input.chunks, halfClose: chance(rng, 0.3), timeoutMs }));
        tally.noteTimeout(outcome, `raw:${input.kind}`);
        return outcome;
      }
      if (r < 0.8) {
        const seq = hostileSequence(rng, pick(rng, PEER_METHODS).path);
        tally.note(`h2:${seq.kind}`);
        const outcome = await sendSequence(replica.host, replica.peerPort, seq.frames, timeoutMs);
        tally.noteTimeout(outcome, `h2:${seq.kind}`);
        return outcome;
      }
      // Peer gRPC without the secret, with a wrong one, with garbage bodies.
      const method = pick(rng, PEER_METHODS);
      const secret = pick(rng, [null, '', 'wrong', 'x'.repeat(10_000), junkString(rng, 64).replace(/[^\x21-\x7e]/g, 'x')]);
      tally.note(`grpc:${method.name}:${secret === null ? 'no-secret' : 'wrong-secret'}`);
      const outcome = await rawCall(ctx.sessions.get(`peer:${replica.id}:${index % 4}`, `${replica.host}:${replica.peerPort}`), {
        path: method.path,
        headers: secret === null ? {} : { 'x-sandgate-peer-secret': secret, 'x-sandgate-from-replica': 'fuzz' },
        body: [grpcFrame(body(rng, pick(rng, ['random-bytes', 'random-wire', 'wrong-type', 'right-type-hostile'] as const), method.requestType))],
        timeoutMs: ctx.timeoutMs,
      });
      tally.noteTimeout(outcome, `grpc:${method.name}`);
      return outcome;
    },
  };
}
