// mTLS principals: the gateway verifies a presented client certificate itself (the TLS layer
// only requests one), against --client-ca. Attacks: a certificate from another CA, an expired
// one, one not yet valid, a server certificate of the right CA, the CA certificate itself, a
// self-signed impostor with the CA's name, and a bad bearer next to a good certificate.
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Metadata } from '@grpc/grpc-js';
import { Code, GatewayError } from '@sandgate/core';
import { createCertificateAuthority, type CertificateAuthority } from '@sandgate/pki';
import { certificatePrincipal, loadClientCa, subjectAttributes } from '../src/auth/mtls.ts';
import { ChainAuthenticator, MISSING_CREDENTIALS } from '../src/auth/chain.ts';
import { ApiTokenAuthenticator } from '../src/auth/api-tokens.ts';
import type { AuthContext } from '../src/auth/authenticator.ts';

let ca: CertificateAuthority;
let other: CertificateAuthority;
let cas: X509Certificate[];
let dir: string;

beforeAll(async () => {
  [ca, other] = await Promise.all([createCertificateAuthority('client CA'), createCertificateAuthority('client CA')]);
  dir = mkdtempSync(path.join(os.tmpdir(), 'sg-mtls-'));
  writeFileSync(path.join(dir, 'ca.pem'), ca.cert);
  cas = loadClientCa(path.join(dir, 'ca.pem'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const x509 = (pem: string) => new X509Certificate(pem);

async function refusal(fn: () => unknown): Promise<GatewayError> {
  try {
    await fn();
  } catch (err) {
    expect(err).toBeInstanceOf(GatewayError);
    expect((err as GatewayError).code).toBe(Code.UNAUTHENTICATED);
    return err as GatewayError;
  }
  throw new Error('expected a refusal, got a principal');
}

describe('client certificate verification', () => {
  it('a certificate from the client CA is a principal: CN, OU roles, admin, workspace', async () => {
    const leaf = await ca.issue({ commonName: 'alice', organizationalUnits: ['admin', 'workspace:team-a', 'dev'], usage: 'client' });
    expect(certificatePrincipal(x509(leaf.cert), cas)).toEqual({
      subject: 'alice',
      displayName: 'alice',
      provider: 'mtls',
      admin: true,
      workspace: 'team-a',
      roles: ['admin', 'workspace:team-a', 'dev'],
      scopes: [],
    });
    const plain = await ca.issue({ commonName: 'bob, the builder', usage: 'client' });
    expect(certificatePrincipal(x509(plain.cert), cas)).toMatchObject({ subject: 'bob, the builder', admin: false, workspace: 'default', roles: [] });
  });

  it('refuses a certificate signed by another CA, even one with the same name', async () => {
    const leaf = await other.issue({ commonName: 'mallory', organizationalUnits: ['admin'], usage: 'client' });
    expect((await refusal(() => certificatePrincipal(x509(leaf.cert), cas))).message).toMatch(/not signed by the configured client CA/);
  });

  it('refuses an expired certificate and one not yet valid', async () => {
    const expired = await ca.issue({ commonName: 'old', usage: 'client', notBefore: new Date(Date.now() - 10 * 86_400_000), validDays: 1 });
    expect((await refusal(() => certificatePrincipal(x509(expired.cert), cas))).message).toMatch(/expired at/);
    const future = await ca.issue({ commonName: 'early', usage: 'client', notBefore: new Date(Date.now() + 86_400_000), validDays: 1 });
    expect((await refusal(() => certificatePrincipal(x509(future.cert), cas))).message).toMatch(/not valid before/);
  });

  it('refuses a server certificate of the client CA and the CA certificate itself', async () => {
    const server = await ca.issue({ commonName: 'replica', organizationalUnits: ['admin'], dnsNames: ['localhost'], usage: 'server' });
    expect((await refusal(() => certificatePrincipal(x509(server.cert), cas))).message).toMatch(/clientAuth/);
    // Self-issued: checkIssued(ca) and verify(ca.publicKey) both hold for the CA itself.
    expect((await refusal(() => certificatePrincipal(x509(ca.cert), cas))).message).toMatch(/CA certificate/);
  });

  it('refuses a --client-ca file that is not a CA', async () => {
    const leaf = await ca.issue({ commonName: 'x', usage: 'client' });
    writeFileSync(path.join(dir, 'leaf.pem'), leaf.cert);
    expect(() => loadClientCa(path.join(dir, 'leaf.pem'))).toThrow(/is not a CA certificate/);
    expect(() => loadClientCa(path.join(dir, 'missing.pem'))).toThrow(/cannot read it/);
  });

  it('reads subjects as Node prints them (escaped specials, repeated OUs)', () => {
    expect(subjectAttributes('CN=a\\,b\nOU=x\nOU=y=z')).toEqual([['CN', 'a,b'], ['OU', 'x'], ['OU', 'y=z']]);
  });
});

describe('the chain with a client certificate', () => {
  // No API token ever verifies here: the token store is never reached for these calls.
  const chain = () => new ChainAuthenticator(new ApiTokenAuthenticator(null as never), undefined, cas);
  const call = (cert: string | undefined, authorization?: string) => {
    const metadata = new Metadata();
    if (authorization !== undefined) metadata.set('authorization', authorization);
    const authContext = (cert ? { sslPeerCertificate: { raw: x509(cert).raw } } : {}) as AuthContext;
    return { metadata, authContext };
  };

  it('authenticates a verified certificate when no bearer is sent', async () => {
    const leaf = await ca.issue({ commonName: 'carol', organizationalUnits: ['workspace:w1'], usage: 'client' });
    expect(await chain().authenticate(call(leaf.cert))).toMatchObject({ subject: 'carol', provider: 'mtls', workspace: 'w1' });
  });

  it('a bad bearer never falls through to a good certificate', async () => {
    const leaf = await ca.issue({ commonName: 'carol', organizationalUnits: ['admin'], usage: 'client' });
    expect((await refusal(() => chain().authenticate(call(leaf.cert, 'Bearer garbage')))).message).toMatch(/^invalid token: /);
    expect((await refusal(() => chain().authenticate(call(leaf.cert, 'Basic dXNlcjpwdw==')))).message).toMatch(/^invalid token: /);
  });

  it('without a certificate or a bearer: says what to send', async () => {
    expect((await refusal(() => chain().authenticate(call(undefined)))).message).toBe(MISSING_CREDENTIALS);
  });

  it('a certificate from another CA is refused, not ignored', async () => {
    const leaf = await other.issue({ commonName: 'mallory', organizationalUnits: ['admin'], usage: 'client' });
    expect((await refusal(() => chain().authenticate(call(leaf.cert)))).message).toMatch(/client certificate refused/);
  });
});
