// Every comparison of a presented secret with the expected one (supervisor credentials; the peer
// secret is never presented: peer links prove it with MACs, libs/relay/src/handshake.ts). Both sides are hashed first, so the comparison is constant-time over equal
// lengths and neither the time taken nor an early length check tells a caller how long the
// secret is.
import { createHash, timingSafeEqual } from 'node:crypto';

function digest(secret: string): Buffer {
  return createHash('sha256').update(secret).digest();
}

export function secretsEqual(presented: string, expected: string): boolean {
  return timingSafeEqual(digest(presented), digest(expected));
}
