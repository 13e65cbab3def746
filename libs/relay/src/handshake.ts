// The peer link's mutual challenge–response: both ends prove they hold the peer secret without
// sending it, and a captured handshake is worthless on any other connection.
//
//   server → client  CHALLENGE {nonce: Ns, replica: server id}        (sent on accept, unasked)
//   client → server  HELLO     {kind, from, to, nonce: Nc, mac: HMAC(secret, T("client"))}
//   server → client  PROOF     {mac: HMAC(secret, T("server"))}
//
// T(role) is a length-prefixed transcript: a version label, the role, Ns, Nc, kind, from, to.
// Ns is fresh per connection, so a replayed HELLO's MAC is over a nonce the server no longer
// holds; Nc is the client's, so a replayed PROOF is over a nonce the client no longer holds; the
// role label keeps one side's MAC from being reflected as the other's.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

export const NONCE_BYTES = 32;
const TRANSCRIPT_LABEL = 'sandgate peer link v2';

export interface Transcript {
  serverNonce: Buffer;
  clientNonce: Buffer;
  kind: string;
  /** The connecting replica (or worker). */
  from: string;
  /** The replica serving the peer port, as its CHALLENGE named itself. */
  to: string;
}

export function newNonce(): Buffer {
  return randomBytes(NONCE_BYTES);
}

function field(bytes: Buffer): Buffer[] {
  const length = Buffer.allocUnsafe(4);
  length.writeUInt32BE(bytes.length, 0);
  return [length, bytes];
}

/** The MAC one side sends: `role` is who computes it. */
export function handshakeMac(secret: string, role: 'client' | 'server', t: Transcript): Buffer {
  const hmac = createHmac('sha256', secret);
  for (const part of [
    Buffer.from(TRANSCRIPT_LABEL),
    Buffer.from(role),
    t.serverNonce,
    t.clientNonce,
    Buffer.from(t.kind),
    Buffer.from(t.from),
    Buffer.from(t.to),
  ]) {
    for (const piece of field(part)) hmac.update(piece);
  }
  return hmac.digest();
}

/** Constant-time check of a presented MAC (any length; a wrong length is simply wrong). */
export function macValid(secret: string, role: 'client' | 'server', t: Transcript, presented: Buffer): boolean {
  const expected = handshakeMac(secret, role, t);
  return presented.length === expected.length && timingSafeEqual(presented, expected);
}
