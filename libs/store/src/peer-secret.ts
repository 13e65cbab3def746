// The secret replicas prove to each other on the peer port (libs/relay/src/handshake.ts). It is
// never stored in Redis: it is configured (SANDGATE_PEER_SECRET), or derived from the password in
// the Redis URL, which every replica of a cluster is given anyway. Whoever holds that password
// holds the cluster's data already; whoever does not (someone on the network, a workload) can
// neither read the secret nor compute it.
import { hkdfSync } from 'node:crypto';
import { parseRedisAddress } from '@sandgate/core';

export const NO_PEER_SECRET =
  'no peer secret: set SANDGATE_PEER_SECRET (the same value on every replica and worker), or give Redis a password ' +
  '(redis://USER:PASSWORD@host:port), from which the replicas derive it';

/** Domain separation: the derived key is good for peer links only. */
const HKDF_SALT = 'sandgate peer secret';
const HKDF_INFO = 'sandgate peer link v2';

/** The data nodes' password a Redis address carries, decoded ('' when it carries none). */
export function redisPassword(url: string): string {
  try {
    return parseRedisAddress(url).password;
  } catch {
    return '';
  }
}

/** HKDF-SHA256 of the Redis password, base64url. */
export function derivePeerSecret(redisPassword: string): string {
  return Buffer.from(hkdfSync('sha256', redisPassword, HKDF_SALT, HKDF_INFO, 32)).toString('base64url');
}

/** The configured secret, else one derived from the Redis URL's password; throws NO_PEER_SECRET when neither is there. */
export function resolvePeerSecret(configured: string, redisUrl: string): string {
  if (configured) return configured;
  const password = redisPassword(redisUrl);
  if (!password) throw new Error(NO_PEER_SECRET);
  return derivePeerSecret(password);
}
