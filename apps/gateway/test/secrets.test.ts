// The one comparison of shared secrets (supervisor credentials): wrong secrets are refused
// whatever their length. (Peers never present the peer secret: apps/gateway/test/peer-port.test.ts.)
import { describe, expect, it } from 'vitest';
import { secretsEqual } from '../src/api/secrets.ts';
import { hashCredential, newCredential, verifyCredential } from '../src/sessions/credentials.ts';

const SECRET = 'the-peer-secret';

describe('secretsEqual', () => {
  it('accepts the secret itself', () => {
    expect(secretsEqual(SECRET, SECRET)).toBe(true);
    expect(secretsEqual('', '')).toBe(true);
  });

  it('refuses a wrong secret of the same length and of another length', () => {
    expect(secretsEqual('the-peer-secreT', SECRET)).toBe(false);
    expect(secretsEqual('x'.repeat(SECRET.length), SECRET)).toBe(false);
    expect(secretsEqual('the-peer', SECRET)).toBe(false);
    expect(secretsEqual(`${SECRET}-and-more`, SECRET)).toBe(false);
    expect(secretsEqual('', SECRET)).toBe(false);
    expect(secretsEqual(SECRET, '')).toBe(false);
  });
});

describe('verifyCredential', () => {
  it('accepts the credential whose hash is stored, and nothing else', () => {
    const { secret, hash } = newCredential();
    expect(verifyCredential(secret, hash)).toBe(true);
    expect(verifyCredential(`${secret.slice(0, -1)}x`, hash)).toBe(secret.endsWith('x'));
    expect(verifyCredential('short', hash)).toBe(false);
    expect(verifyCredential('', hash)).toBe(false);
    expect(verifyCredential(secret, '')).toBe(false);
    expect(verifyCredential(secret, hashCredential('another'))).toBe(false);
    expect(verifyCredential(secret, 'not-a-hash')).toBe(false);
  });
});
