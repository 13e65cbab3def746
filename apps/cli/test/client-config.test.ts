// How a client command reaches the gateway: flags over variables over the client config file
// over defaults, field by field; TLS from the URL's scheme or a CA; the token never printed.
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { UsageError } from '../src/args.ts';
import { clientConfigPath, readClientConfig, resolveConnection } from '../src/client-config.ts';
import { sshConfigBlock } from '../src/commands/sandbox-ssh-config.ts';

const dir = mkdtempSync(path.join(os.tmpdir(), 'sg-client-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const write = (name: string, text: string) => {
  const p = path.join(dir, name);
  mkdirSync(path.dirname(p), { recursive: true });
  writeFileSync(p, text);
  return p;
};
const caFile = write('ca.pem', '-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n');
const otherCa = write('other-ca.pem', '-----BEGIN CERTIFICATE-----\nBB==\n-----END CERTIFICATE-----\n');
const configFile = write('xdg/sandgate/config.json', JSON.stringify({ gateway: 'https://127.0.0.1:9443', ca: '../../ca.pem', token: 'sgt_fromfile' }));
// No file at all: HOME without .config.
const empty = { HOME: path.join(dir, 'nohome') };

describe('resolveConnection', () => {
  it("never sends the file's token or CA to another gateway", () => {
    const env = { ...empty, SANDGATE_CONFIG: configFile };
    // Another gateway, by variable or flag: nothing of the file applies.
    for (const c of [resolveConnection({}, { ...env, SANDGATE_GATEWAY: '127.0.0.1:7000' }), resolveConnection({ gateway: '127.0.0.1:7000' }, env)]) {
      expect(c).toEqual({ endpoint: '127.0.0.1:7000', url: '127.0.0.1:7000', token: undefined, tls: null });
    }
    // The file's own gateway, written differently: its credentials apply.
    const same = resolveConnection({ gateway: 'https://127.0.0.1:9443/' }, env);
    expect(same.token).toBe('sgt_fromfile');
    expect(same.tls?.caFile).toBe(caFile);
  });

  it('without anything: plaintext 127.0.0.1:8080, no token', () => {
    expect(resolveConnection({}, empty)).toEqual({ endpoint: '127.0.0.1:8080', url: '127.0.0.1:8080', token: undefined, tls: null });
  });

  it('reads the config file ($XDG_CONFIG_HOME honoured, relative paths from the file) when nothing else says', () => {
    const env = { ...empty, XDG_CONFIG_HOME: path.join(dir, 'xdg') };
    expect(clientConfigPath(env)).toBe(configFile);
    const c = resolveConnection({}, env);
    expect(c.endpoint).toBe('127.0.0.1:9443');
    expect(c.url).toBe('https://127.0.0.1:9443');
    expect(c.token).toBe('sgt_fromfile');
    expect(c.tls?.caFile).toBe(caFile);
    expect(c.tls?.ca?.toString()).toContain('AA==');
    // SANDGATE_CONFIG points elsewhere.
    expect(resolveConnection({}, { ...empty, SANDGATE_CONFIG: configFile }).token).toBe('sgt_fromfile');
  });

  it('field by field: a flag over a variable over the file', () => {
    const env = { ...empty, XDG_CONFIG_HOME: path.join(dir, 'xdg'), SANDGATE_TOKEN: 'sgt_env' };
    const c = resolveConnection({ ca: otherCa }, env);
    expect(c.token).toBe('sgt_env');
    expect(c.tls?.caFile).toBe(otherCa);
    expect(c.endpoint).toBe('127.0.0.1:9443'); // still the file's
    expect(resolveConnection({ token: 'sgt_flag' }, env).token).toBe('sgt_flag');
    // The file's gateway given explicitly as plaintext host:port, with the file's CA: TLS (a CA was given).
    expect(resolveConnection({ gateway: '127.0.0.1:9443' }, env).tls?.caFile).toBe(caFile);
    // Another gateway: the file's CA is not used.
    expect(resolveConnection({ gateway: '10.0.0.1:8080' }, env).tls).toBeNull();
  });

  it('https without a CA trusts the system CAs; http with a CA is TLS', () => {
    expect(resolveConnection({ gateway: 'https://gw.example' }, empty)).toMatchObject({ endpoint: 'gw.example:443', tls: { ca: undefined } });
    expect(resolveConnection({ gateway: 'grpcs://gw.example:9443' }, empty).tls).not.toBeNull();
    expect(resolveConnection({ gateway: 'http://gw:9000', ca: caFile }, empty)).toMatchObject({ endpoint: 'gw:9000', url: 'https://gw:9000' });
    expect(resolveConnection({ gateway: 'http://gw:9000' }, empty).tls).toBeNull();
  });

  it('refuses what it cannot honour, naming where it came from', () => {
    expect(() => resolveConnection({ ca: path.join(dir, 'missing.pem') }, empty)).toThrow(/--ca .*missing\.pem: cannot read it/);
    expect(() => resolveConnection({}, { ...empty, SANDGATE_CA: path.join(dir, 'missing.pem') })).toThrow(/SANDGATE_CA .*missing\.pem/);
    expect(() => resolveConnection({ 'client-cert': caFile }, empty)).toThrow(/--client-cert needs a client key/);
    const bad = write('bad/config.json', JSON.stringify({ gateway: 'x:1', tokn: 'typo' }));
    expect(() => readClientConfig({ SANDGATE_CONFIG: bad })).toThrow(/unknown field 'tokn'/);
    expect(() => readClientConfig({ SANDGATE_CONFIG: write('bad/notjson.json', '{') })).toThrow(UsageError);
    expect(() => readClientConfig({ SANDGATE_CONFIG: path.join(dir, 'absent.json') })).toThrow(/cannot read it/);
  });

  it('ssh-config hands on the gateway URL and the TLS files, never the token', () => {
    const c = resolveConnection({}, { ...empty, XDG_CONFIG_HOME: path.join(dir, 'xdg'), SANDGATE_TOKEN: 'sgt_secret' });
    const block = sshConfigBlock('demo', c, '/usr/bin/node', '/repo/apps/cli/bin/sandgate.js');
    expect(block).toContain(`--gateway https://127.0.0.1:9443 --ca ${caFile} ssh-proxy --name demo`);
    expect(block).not.toContain('sgt_');
  });
});
