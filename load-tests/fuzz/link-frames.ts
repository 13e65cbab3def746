// Everything the fuzzer knows about the peer link's wire format (libs/relay/src/link.ts), in one
// place, so a change of the handshake only touches this file: the magic, the frame header
// (u32 big-endian length counting type + payload, u8 type), the frame types, the size limit,
// and what a first frame of the handshake looks like.
//
// The fuzz inputs built on this mostly do not depend on the handshake: random bytes after the
// magic, bad lengths, truncated frames, frames of every type before (or without) a handshake.
// `handshakeFrames` is the one place that shapes a would-be handshake; with a challenge–response
// it should return what a client's first frame looks like (with a wrong proof).
import { randomBytes } from 'node:crypto';

export const LINK_MAGIC = Buffer.from('SGL1');
export const LinkFrame = { HELLO: 1, MSG: 2, OPENED: 3, END: 4, STATUS: 5, PING: 6 } as const;
/** The largest frame the link accepts (link.ts MAX_FRAME_BYTES). */
export const MAX_FRAME_BYTES = 64 * 1024 * 1024;

/** One frame; `length` may lie about the size of type + payload. */
export function linkFrame(type: number, payload: Buffer = Buffer.alloc(0), length?: number): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE((length ?? 1 + payload.length) >>> 0, 0);
  head[4] = type;
  return Buffer.concat([head, payload]);
}

/** Frames that try to open a link without knowing the secret (a wrong or malformed handshake). */
export function handshakeFrames(variant: number): Buffer[] {
  const hello = (obj: unknown) => linkFrame(LinkFrame.HELLO, Buffer.from(JSON.stringify(obj)));
  switch (variant % 8) {
    case 0:
      return [hello({ secret: 'wrong', kind: 'exec', from: 'r9' })];
    case 1:
      return [hello({ secret: '', kind: 'tcp', from: '' })];
    case 2:
      return [hello({ kind: 'exec' })];
    case 3:
      return [linkFrame(LinkFrame.HELLO, Buffer.from('{not json'))];
    case 4:
      return [hello({ secret: randomBytes(32).toString('hex'), kind: 'nonsense', from: 'x' })];
    case 5:
      return [hello(null)];
    case 6:
      return [hello({ secret: { $ne: null }, kind: 'exec', from: ['a'] })];
    default:
      return [hello({ secret: 'wrong', kind: 'exec', from: 'r9' }), hello({ secret: 'wrong', kind: 'tcp', from: 'r9' })];
  }
}
