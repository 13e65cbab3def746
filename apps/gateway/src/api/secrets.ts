// Every comparison of a presented secret with the expected one (the peer secret on peer links and
// on Peer gRPC calls). Both sides are hashed first, so the comparison is constant-time over equal
// lengths and neither the time taken nor an early length check tells a caller how long the
// secret is.
import { createHash, timingSafeEqual } from 'node:crypto';
import { MetadataKey } from '@sandgate/protocols';

function digest(secret: string): Buffer {
  return createHash('sha256').update(secret).digest();
}

export function secretsEqual(presented: string, expected: string): boolean {
  return timingSafeEqual(digest(presented), digest(expected));
}

/** The peer secret a Peer gRPC call carries in its metadata ('' when it carries none). */
export function presentedPeerSecret(metadata: { get(key: string): unknown[] }): string {
  const value = metadata.get(MetadataKey.peerSecret)[0];
  return typeof value === 'string' ? value : '';
}
