// The supervisor's side of the gateway's TLS: it takes the CA file and name the driver set, and
// refuses to start (rather than fall back to plaintext) when they are unusable.
import { mkdtempSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createCertificateAuthority } from '@sandgate/pki';
import { ConfigError, loadConfig } from '../src/config.ts';
import { FakeGateway, startSupervisor } from './helpers.ts';

const dir = mkdtempSync(path.join(os.tmpdir(), 'sg-sup-tls-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const credential = path.join(dir, 'credential');
writeFileSync(credential, 'secret\n');
const ca = path.join(dir, 'ca.pem');
writeFileSync(ca, '-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n');
const base = { SANDGATE_GATEWAY: '127.0.0.1:1', SANDGATE_SANDBOX_ID: 'sb', SANDGATE_CREDENTIAL_FILE: credential };
const args = ['--', 'true'];

describe('supervisor TLS configuration', () => {
  it('plaintext when the CA variable is empty or absent', () => {
    expect(loadConfig(base, args).gatewayTls).toBeUndefined();
    expect(loadConfig({ ...base, SANDGATE_GATEWAY_CA_FILE: '', SANDGATE_GATEWAY_TLS_NAME: '' }, args).gatewayTls).toBeUndefined();
  });

  it('reads the CA and the name to verify', () => {
    const c = loadConfig({ ...base, SANDGATE_GATEWAY_CA_FILE: ca, SANDGATE_GATEWAY_TLS_NAME: 'localhost' }, args);
    expect(c.gatewayTls?.serverName).toBe('localhost');
    expect(c.gatewayTls?.ca.toString()).toContain('BEGIN CERTIFICATE');
  });

  it.each([
    [{ SANDGATE_GATEWAY_CA_FILE: ca }, /SANDGATE_GATEWAY_TLS_NAME is empty/],
    [{ SANDGATE_GATEWAY_CA_FILE: path.join(dir, 'missing.pem'), SANDGATE_GATEWAY_TLS_NAME: 'localhost' }, /cannot read SANDGATE_GATEWAY_CA_FILE/],
    [{ SANDGATE_GATEWAY_CA_FILE: credential, SANDGATE_GATEWAY_TLS_NAME: 'localhost' }, /holds no PEM certificate/],
  ])('refuses %j', (extra, message) => {
    expect(() => loadConfig({ ...base, ...extra }, args)).toThrow(ConfigError);
    expect(() => loadConfig({ ...base, ...extra }, args)).toThrow(message);
  });

  it('a supervisor on TLS reads no system trust store: its default roots are the gateway’s CA', async () => {
    // Under --use-openssl-ca (the drivers' flags) Node would build its default roots from
    // SSL_CERT_FILE at the first TLS connection and keep them. runSupervisor makes the gateway's CA
    // the default roots first, so the file is never opened. A read moves the file's access time
    // (relatime: while it is older than the file's change), which this filesystem must show.
    const gatewayCa = await createCertificateAuthority('supervisor TLS test CA');
    const pair = await gatewayCa.issue({ commonName: 'gateway', dnsNames: ['gateway.test'], ipAddresses: [], usage: 'server' });
    const caFile = path.join(dir, 'gateway-ca.pem');
    writeFileSync(caFile, gatewayCa.cert);
    const systemStore = path.join(dir, 'system-store.pem');
    writeFileSync(systemStore, gatewayCa.cert);
    const longAgo = new Date(Date.now() - 86_400_000);
    utimesSync(systemStore, longAgo, new Date());
    readFileSync(systemStore);
    expect(statSync(systemStore).atimeMs, 'this filesystem does not record reads (noatime): the test cannot see one').toBeGreaterThan(longAgo.getTime() + 1000);
    utimesSync(systemStore, longAgo, new Date());

    const gw = await new FakeGateway({ heartbeatIntervalMs: 1000, tls: pair }).start();
    const sup = startSupervisor({
      endpoints: [gw.address],
      sandboxId: 'sb-tls-roots',
      nodeFlags: ['--expose-gc', '--use-openssl-ca'], // SUPERVISOR_NODE_FLAGS (libs/compute/test/supervisor-tls-trust.test.ts checks it has the latter)
      env: { SANDGATE_GATEWAY_CA_FILE: caFile, SANDGATE_GATEWAY_TLS_NAME: 'gateway.test', SSL_CERT_FILE: systemStore, SSL_CERT_DIR: mkdtempSync(path.join(dir, 'certs-')) },
    });
    try {
      await gw.waitHello(1, 15_000);
      expect(statSync(systemStore).atimeMs, "the system store was read").toBeLessThan(longAgo.getTime() + 1000);
    } finally {
      await sup.stop();
      await gw.stop();
    }
  }, 30_000);
});
