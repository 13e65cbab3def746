// Everything the fuzzer knows about the peer link's wire format (libs/relay/src/link.ts and
// handshake.ts), in one place: the magic, the frame header (u32 big-endian length counting
// type + payload, u8 type), the frame types, the size limits, the handshake's JSON shapes, and
// one live handshake exchange (connect, read the server's CHALLENGE, answer it).
//
// The handshake (SGL2): the server sends its magic and CHALLENGE {nonce, replica} on accept;
// the client answers with its magic and HELLO {kind, from, to, nonce, mac}, mac =
// HMAC(secret, transcript("client")); the server answers PROOF {mac} only if the MAC is right.
// The fuzzer knows the peer secret (derived from the Redis password, as the replicas derive it)
// so that it can build HELLOs that are right in every respect but one (a replayed one, one for
// another replica, one of an unknown kind) and a control handshake that must succeed: a refused
// forgery proves nothing if a correct HELLO would have been refused too.
import net from 'node:net';
import { handshakeMac, NONCE_BYTES, type Transcript } from '@sandgate/relay';

export const LINK_MAGIC = Buffer.from('SGL2');
/** The first link protocol (secret sent in the HELLO); the peer port must refuse it now. */
export const OLD_LINK_MAGIC = Buffer.from('SGL1');
export const LinkFrame = { HELLO: 1, MSG: 2, OPENED: 3, END: 4, STATUS: 5, PING: 6, CHALLENGE: 7, PROOF: 8 } as const;
/** The largest frame the link accepts once authenticated (link.ts MAX_FRAME_BYTES). */
export const MAX_FRAME_BYTES = 64 * 1024 * 1024;
/** The largest handshake frame (link.ts MAX_HANDSHAKE_FRAME_BYTES). */
export const MAX_HANDSHAKE_FRAME_BYTES = 4096;

/** One frame; `length` may lie about the size of type + payload. */
export function linkFrame(type: number, payload: Buffer = Buffer.alloc(0), length?: number): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE((length ?? 1 + payload.length) >>> 0, 0);
  head[4] = type;
  return Buffer.concat([head, payload]);
}

export const helloFrame = (obj: unknown) => linkFrame(LinkFrame.HELLO, Buffer.from(JSON.stringify(obj) ?? 'undefined'));

/** The server's CHALLENGE as the fuzzer read it. */
export interface Challenge {
  nonce: Buffer;
  replica: string;
}

/** A correct HELLO for `challenge` (what a replica holding `secret` would send). */
export function validHello(secret: string, challenge: Challenge, opts: { kind?: string; from?: string; to?: string; clientNonce?: Buffer } = {}): { frame: Buffer; body: Record<string, string> } {
  const t: Transcript = {
    serverNonce: challenge.nonce,
    clientNonce: opts.clientNonce ?? Buffer.alloc(NONCE_BYTES, 7),
    kind: opts.kind ?? 'call',
    from: opts.from ?? 'fuzz',
    to: opts.to ?? challenge.replica,
  };
  const body = { kind: t.kind, from: t.from, to: t.to, nonce: t.clientNonce.toString('base64'), mac: handshakeMac(secret, 'client', t).toString('base64') };
  return { frame: helloFrame(body), body };
}

/** Frame types in `bytes` (after the magic, if it is there); stops at the first bad length. */
export function framesIn(bytes: Buffer): { magic: boolean; frames: { type: number; payload: Buffer }[] } {
  const magic = bytes.subarray(0, 4).equals(LINK_MAGIC);
  const frames: { type: number; payload: Buffer }[] = [];
  let at = magic ? 4 : 0;
  while (at + 5 <= bytes.length) {
    const len = bytes.readUInt32BE(at);
    if (len < 1 || at + 4 + len > bytes.length) break;
    frames.push({ type: bytes[at + 4]!, payload: bytes.subarray(at + 5, at + 4 + len) });
    at += 4 + len;
  }
  return { magic, frames };
}

export interface HandshakeExchange {
  challenge: Challenge | null;
  /** Frame types the server sent after its CHALLENGE (a PROOF means the HELLO was accepted). */
  after: number[];
  closed: boolean;
  ms: number;
  error: string;
}

/**
 * Connects to a peer port, waits for the server's magic and CHALLENGE, writes what `answer`
 * returns for it, and collects the server's frames until it closes, sends a PROOF (then the
 * fuzzer closes: it is the control, or a hole), or the deadline passes.
 */
export function handshakeExchange(host: string, port: number, answer: (c: Challenge) => Buffer[], timeoutMs: number): Promise<HandshakeExchange> {
  return new Promise((resolve) => {
    const started = Date.now();
    const socket = net.connect({ host, port });
    let received = Buffer.alloc(0);
    let challenge: Challenge | null = null;
    let challengeEnd = 0;
    let error = '';
    let done = false;
    const finish = (closed: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      const after = challenge ? framesIn(received.subarray(challengeEnd)).frames.map((f) => f.type) : [];
      resolve({ challenge, after, closed, ms: Date.now() - started, error });
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      if (!challenge) {
        const { magic, frames } = framesIn(received);
        const first = frames[0];
        if (!magic || !first) return;
        if (first.type !== LinkFrame.CHALLENGE) return finish(false);
        try {
          const body = JSON.parse(first.payload.toString()) as { nonce: string; replica: string };
          challenge = { nonce: Buffer.from(body.nonce, 'base64'), replica: body.replica };
        } catch {
          return finish(false);
        }
        challengeEnd = 4 + 4 + first.payload.length + 1;
        for (const c of answer(challenge)) if (!socket.destroyed) socket.write(c);
        return;
      }
      if (framesIn(received.subarray(challengeEnd)).frames.some((f) => f.type === LinkFrame.PROOF)) finish(false);
    });
    socket.on('error', (err: NodeJS.ErrnoException) => {
      error ||= err.code ?? err.message;
      finish(true);
    });
    socket.on('close', () => finish(true));
  });
}
