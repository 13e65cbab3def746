// OIDC bearer tokens against a real issuer: this test serves /.well-known/openid-configuration and
// a JWKS over node:http, signs tokens with jose, and calls a real in-process replica (real Redis,
// real gRPC) configured with only --oidc-issuer and --oidc-audience (the JWKS is discovered).
// Attacks: expired, wrong audience, wrong issuer, `alg: none`, signed by another key under the
// issuer's key id, HS256 "signed" with the issuer's public key. Rotation: the issuer switches to a
// new key and a token signed with it is accepted by the running replica.
import { createServer, type Server } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { status as grpcStatus, type ServiceError } from '@grpc/grpc-js';
import { exportJWK, exportSPKI, generateKeyPair, SignJWT, type CryptoKey, type JWK, type JWTPayload } from 'jose';
import { startReplica, type RunningReplica } from '@sandgate/gateway';
import { openShellClient, unaryCall } from '@sandgate/test-harness/grpc-client';
import { redisForFile } from '@sandgate/test-harness/redis-per-file';
import { waitFor } from '@sandgate/test-harness/wait';
import { inProcessReplicaConfig } from './in-process-replica.ts';
import { OidcVerifier } from '../src/auth/oidc.ts';

const AUDIENCE = 'sandgate-test';

interface SigningKey {
  kid: string;
  privateKey: CryptoKey;
  publicJwk: JWK;
  publicPem: string;
}

async function signingKey(kid: string): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair('RS256', { extractable: true });
  return { kid, privateKey, publicJwk: { ...(await exportJWK(publicKey)), kid, alg: 'RS256', use: 'sig' }, publicPem: await exportSPKI(publicKey) };
}

let redisUrl = '';
redisForFile((server) => (redisUrl = server.url));

let http: Server;
let issuer = '';
let served: SigningKey[] = [];
let jwksFetches = 0;
let current: SigningKey;
let stranger: SigningKey;
let replica: RunningReplica;
let stateDir: string;

beforeAll(async () => {
  [current, stranger] = await Promise.all([signingKey('key-1'), signingKey('key-1')]);
  served = [current];
  http = createServer((req, res) => {
    res.setHeader('content-type', 'application/json');
    if (req.url === '/.well-known/openid-configuration') return res.end(JSON.stringify({ issuer, jwks_uri: `${issuer}/jwks` }));
    if (req.url === '/jwks') {
      jwksFetches++;
      return res.end(JSON.stringify({ keys: served.map((k) => k.publicJwk) }));
    }
    res.statusCode = 404;
    res.end('{}');
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  issuer = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
  stateDir = mkdtempSync(path.join(os.tmpdir(), 'sg-oidc-'));
  replica = await startReplica(
    inProcessReplicaConfig(
      { replicaId: 'oidc-r1', redisUrl, stateDir },
      { workers: false, auth: true, oidcIssuer: issuer, oidcAudience: AUDIENCE, oidcRoleClaim: 'realm_access.roles', oidcWorkspaceClaim: 'org.workspace' },
    ),
  );
});
afterAll(async () => {
  await replica?.close();
  await new Promise((resolve) => http?.close(resolve));
  rmSync(stateDir, { recursive: true, force: true });
});

const claims = (extra: JWTPayload = {}): JWTPayload => ({
  sub: 'user-42',
  preferred_username: 'alice',
  realm_access: { roles: ['admin', 'dev'] },
  org: { workspace: 'team-a' },
  scope: 'openid sandbox:read',
  ...extra,
});

function sign(key: SigningKey, payload: JWTPayload = claims(), opts: { iss?: string; aud?: string; exp?: number | string } = {}): Promise<string> {
  return new SignJWT(payload)
    .setProtectedHeader({ alg: 'RS256', kid: key.kid, typ: 'JWT' })
    .setIssuer(opts.iss ?? issuer)
    .setAudience(opts.aud ?? AUDIENCE)
    .setIssuedAt()
    .setExpirationTime(opts.exp ?? '5m')
    .sign(key.privateKey);
}

const b64 = (v: object | string) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');

function whoami(token: string): Promise<Record<string, unknown>> {
  const client = openShellClient(replica.grpcAddress, { token });
  return unaryCall<Record<string, unknown>>(client, 'GetCurrentUser', {}).finally(() => client.close());
}

async function refused(token: string): Promise<string> {
  const err = (await whoami(token).then(
    () => {
      throw new Error('the token was accepted');
    },
    (e: unknown) => e,
  )) as ServiceError;
  expect(err.code, err.details).toBe(grpcStatus.UNAUTHENTICATED);
  expect(err.details).toMatch(/^invalid token: /);
  return err.details;
}

describe('OIDC bearer tokens', () => {
  it('a token of the issuer works: GetCurrentUser shows its subject, name, roles and scopes', async () => {
    expect(await whoami(await sign(current))).toEqual({
      subject: 'user-42',
      display_name: 'alice',
      roles: ['admin', 'dev'],
      scopes: ['openid', 'sandbox:read'],
      identity_provider: 'oidc',
    });
  });

  it('maps the workspace claim (dotted path, default when absent) and the admin role', async () => {
    const verifier = new OidcVerifier({ issuer, audience: AUDIENCE, jwksUrl: '', workspaceClaim: 'org.workspace', roleClaim: 'realm_access.roles', adminRole: 'admin' });
    expect(await verifier.verify(await sign(current))).toMatchObject({ workspace: 'team-a', admin: true, provider: 'oidc' });
    const member = await verifier.verify(await sign(current, { sub: 'bob', realm_access: { roles: 'dev' }, scp: ['a', 'b'] }));
    expect(member).toMatchObject({ subject: 'bob', workspace: 'default', admin: false, roles: ['dev'], scopes: ['a', 'b'], displayName: '' });
  });

  it('refuses an expired token', async () => {
    expect(await refused(await sign(current, claims(), { exp: Math.floor(Date.now() / 1000) - 120 }))).toMatch(/expired/);
  });

  it('refuses a token for another audience', async () => {
    expect(await refused(await sign(current, claims(), { aud: 'someone-else' }))).toMatch(/aud/);
  });

  it('refuses a token from another issuer', async () => {
    expect(await refused(await sign(current, claims(), { iss: 'https://evil.example' }))).toMatch(/iss/);
  });

  it("refuses an unsigned token (alg 'none')", async () => {
    const now = Math.floor(Date.now() / 1000);
    const token = `${b64({ alg: 'none', typ: 'JWT' })}.${b64({ ...claims(), iss: issuer, aud: AUDIENCE, iat: now, exp: now + 300 })}.`;
    expect(await refused(token)).toMatch(/none/);
  });

  it("refuses a token signed by another key under the issuer's key id", async () => {
    expect(await refused(await sign(stranger))).toMatch(/signature/);
  });

  it("refuses HS256 'signed' with the issuer's public key (algorithm confusion)", async () => {
    const now = Math.floor(Date.now() / 1000);
    for (const secret of [current.publicPem, JSON.stringify(current.publicJwk)]) {
      const token = await new SignJWT({ ...claims(), iss: issuer, aud: AUDIENCE, iat: now, exp: now + 300 })
        .setProtectedHeader({ alg: 'HS256', kid: current.kid })
        .sign(new TextEncoder().encode(secret));
      expect(await refused(token)).toMatch(/HS256/);
    }
  });

  it('follows a key rotation without a restart', async () => {
    const next = await signingKey('key-2');
    served = [next];
    const fetchesBefore = jwksFetches;
    const token = await sign(next);
    // An unknown key id refetches the JWKS (at most once a second, so a burst of random kids cannot hammer the issuer).
    await waitFor('the rotated key to be accepted', async () => (await whoami(token).catch(() => null))?.subject === 'user-42', 5_000, 100);
    expect(jwksFetches).toBeGreaterThan(fetchesBefore);
    // The retired key is gone with the refetched set.
    expect(await refused(await sign(current))).toMatch(/no key/);
    current = next;
  });
});
