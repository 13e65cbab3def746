// `sandgate up`'s zero-config credentials: the CA and server certificate are made once and reused
// (the server certificate made again when missing, expiring or not for this host), keys are 0600,
// the admin token is reused while it verifies and replaced once revoked, and the client config
// file is written 0600 but never over another gateway's.
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, unlinkSync, writeFileSync, mkdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadCertificateAuthority } from '@sandgate/pki';
import { TokenStore } from '@sandgate/store';
import { startRedis, type TestRedis } from '@sandgate/test-harness/redis';
import { ensureAdminToken, ensureUpTls, upCertificateNames, writeClientConfig } from '../src/up-credentials.ts';
import { resolveConnection } from '../src/client-config.ts';

const dir = mkdtempSync(path.join(os.tmpdir(), 'sg-up-cred-'));
let redis: TestRedis;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const mode = (f: string) => statSync(f).mode & 0o777;
const names = upCertificateNames('myhost', '127.0.0.1');

describe('up: TLS material', () => {
  it('is made once (keys 0600, for localhost, loopback and the host name) and reused after', async () => {
    const state = path.join(dir, 'state1');
    const first = await ensureUpTls(state, names.dnsNames, names.ips);
    expect(first.made).toEqual({ ca: true, server: true });
    expect(mode(path.join(first.dir, 'ca-key.pem'))).toBe(0o600);
    expect(mode(first.keyFile)).toBe(0o600);
    expect(mode(first.dir)).toBe(0o700);
    const cert = new X509Certificate(readFileSync(first.certFile));
    for (const n of ['localhost', 'myhost']) expect(cert.checkHost(n)).toBe(n);
    for (const ip of ['127.0.0.1', '::1']) expect(cert.checkIP(ip)).toBeDefined();
    expect(cert.checkIssued(new X509Certificate(readFileSync(first.caFile)))).toBe(true);

    const again = await ensureUpTls(state, names.dnsNames, names.ips);
    expect(again.made).toEqual({ ca: false, server: false });
    expect(readFileSync(again.certFile, 'utf8')).toBe(readFileSync(first.certFile, 'utf8'));

    // Missing: made again by the same CA.
    const caBefore = readFileSync(first.caFile, 'utf8');
    unlinkSync(first.certFile);
    expect((await ensureUpTls(state, names.dnsNames, names.ips)).made).toEqual({ ca: false, server: true });
    expect(readFileSync(first.caFile, 'utf8')).toBe(caBefore);
    // Another host name: made again for it.
    expect((await ensureUpTls(state, [...names.dnsNames, 'renamed'], names.ips)).made.server).toBe(true);
    // Expiring (or expired): made again.
    const ca = await loadCertificateAuthority({ cert: caBefore, key: readFileSync(path.join(first.dir, 'ca-key.pem'), 'utf8') });
    const old = await ca.issue({ commonName: 'localhost', dnsNames: names.dnsNames, ipAddresses: names.ips, usage: 'server', notBefore: new Date(Date.now() - 10 * 86_400_000), validDays: 5 });
    writeFileSync(first.certFile, old.cert);
    writeFileSync(first.keyFile, old.key, { mode: 0o600 });
    const renewed = await ensureUpTls(state, names.dnsNames, names.ips);
    expect(renewed.made.server).toBe(true);
    expect(new Date(new X509Certificate(readFileSync(renewed.certFile)).validTo).getTime()).toBeGreaterThan(Date.now() + 365 * 86_400_000);
  });

  it('refuses to silently replace a half-missing CA', async () => {
    const state = path.join(dir, 'state2');
    const t = await ensureUpTls(state, names.dnsNames, names.ips);
    unlinkSync(path.join(t.dir, 'ca-key.pem'));
    await expect(ensureUpTls(state, names.dnsNames, names.ips)).rejects.toThrow(/one of ca.pem and ca-key.pem is missing/);
  });
});

describe('up: admin token', () => {
  it('is kept 0600 and reused while it verifies; a revoked one is replaced', async () => {
    const state = path.join(dir, 'state3');
    mkdirSync(state, { recursive: true });
    const a = await ensureAdminToken(redis.url, state);
    expect(a.made).toBe(true);
    expect(mode(path.join(state, 'admin-token'))).toBe(0o600);
    const tokens = new TokenStore(redis.client());
    expect(await tokens.verify(a.token)).toMatchObject({ workspace: 'default', role: 'admin' });
    expect(await ensureAdminToken(redis.url, state)).toEqual({ token: a.token, made: false });
    await tokens.revoke(a.token);
    const b = await ensureAdminToken(redis.url, state);
    expect(b.made).toBe(true);
    expect(b.token).not.toBe(a.token);
  });
});

describe('up: client config file', () => {
  it('is written 0600 and read by the CLI; another gateway\'s file is left alone', () => {
    const home = path.join(dir, 'home');
    const env = { HOME: home };
    const state = path.join(dir, 'state4');
    mkdirSync(path.join(state, 'tls'), { recursive: true });
    const wanted = { gateway: 'https://127.0.0.1:8080', ca: path.join(state, 'tls/ca.pem'), tlsServerName: 'localhost', token: 'sgt_x' };
    const first = writeClientConfig(env, state, wanted);
    expect(first).toEqual({ written: true, path: path.join(home, '.config/sandgate/config.json') });
    expect(mode(first.path)).toBe(0o600);
    expect(JSON.parse(readFileSync(first.path, 'utf8'))).toEqual(wanted);
    // An earlier start of the same state dir on another port: ours, replaced.
    expect(writeClientConfig(env, state, { ...wanted, gateway: 'https://127.0.0.1:9090' }).written).toBe(true);
    // Someone else's gateway: kept; ours is in the state dir, for SANDGATE_CONFIG.
    writeFileSync(first.path, JSON.stringify({ gateway: 'https://prod.example:443', ca: '/etc/prod-ca.pem' }));
    const kept = writeClientConfig(env, state, wanted);
    expect(kept).toMatchObject({ written: false, ownPath: path.join(state, 'client-config.json'), reason: 'it names another gateway, https://prod.example:443' });
    expect(JSON.parse(readFileSync(first.path, 'utf8')).gateway).toBe('https://prod.example:443');
    expect(mode(path.join(state, 'client-config.json'))).toBe(0o600);
    writeFileSync(wanted.ca, '-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n');
    expect(resolveConnection({}, { ...env, SANDGATE_CONFIG: path.join(state, 'client-config.json') })).toMatchObject({
      endpoint: '127.0.0.1:8080',
      token: 'sgt_x',
      tls: { servername: 'localhost', caFile: wanted.ca },
    });
  });
});
