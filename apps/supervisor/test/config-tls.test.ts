// The supervisor's side of the gateway's TLS: it takes the CA file and name the driver set, and
// refuses to start (rather than fall back to plaintext) when they are unusable.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.ts';

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
});
