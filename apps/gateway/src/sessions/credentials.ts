// Supervisor credentials: a random secret per sandbox, stored only as its SHA-256 in Redis.
import { createHash, randomBytes } from 'node:crypto';
import { secretsEqual } from '../api/secrets.ts';

export function newCredential(): { secret: string; hash: string } {
  const secret = randomBytes(32).toString('base64url');
  return { secret, hash: hashCredential(secret) };
}

export function hashCredential(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

export function verifyCredential(secret: string, expectedHash: string): boolean {
  if (!secret || !expectedHash) return false;
  return secretsEqual(hashCredential(secret), expectedHash);
}
