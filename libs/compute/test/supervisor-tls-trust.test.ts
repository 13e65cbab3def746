// The supervisors run with --use-openssl-ca (SUPERVISOR_NODE_FLAGS): Node then does not load its
// bundled root certificates when node:tls loads, about 0.7 MiB per idle supervisor (BENCHMARKS.md,
// "The compile cache's entries and the bundled root certificates"). The flag names OpenSSL's
// default store (SSL_CERT_FILE, SSL_CERT_DIR, /etc/ssl/certs) as the trusted roots wherever a
// TLS client does not name its own. The supervisor always names the gateway's CA, which replaces
// the roots. The attack: a certificate for the gateway's name from a CA that the sandbox's
// system store trusts. A supervisor started with the drivers' flags must refuse it.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { createCertificateAuthority } from '@sandgate/pki';
import { SUPERVISOR_NODE_FLAGS } from '../src/driver.ts';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sg-sup-trust-'));
const servers: tls.Server[] = [];
afterAll(() => {
  for (const s of servers) s.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function serve(pair: { key: string; cert: string }): Promise<number> {
  const server = tls.createServer({ key: pair.key, cert: pair.cert, ALPNProtocols: ['h2'] }, (socket) => socket.end());
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

/** A Node started with the supervisors' flags dials each port as gateway-client.ts does (the gateway's CA, its name, h2). */
async function dialWithSupervisorFlags(ports: number[], gatewayCaFile: string, systemCaFile: string): Promise<string[]> {
  const script = `
    const tls = require('node:tls');
    const ca = require('node:fs').readFileSync(${JSON.stringify(gatewayCaFile)});
    const dial = (port) => new Promise((resolve) => {
      const s = tls.connect({ host: '127.0.0.1', port, ca, servername: 'gateway.test', ALPNProtocols: ['h2'] }, () => { resolve('verified'); s.destroy(); });
      s.on('error', (err) => resolve('refused ' + err.code));
    });
    Promise.all(${JSON.stringify(ports)}.map(dial)).then((r) => console.log(JSON.stringify(r)));`;
  // An empty directory: the system store is only the planted file.
  const emptyDir = fs.mkdtempSync(path.join(dir, 'certs-'));
  // Not spawnSync: the servers answer from this process's event loop.
  const { stdout } = await promisify(execFile)(process.execPath, [...SUPERVISOR_NODE_FLAGS, '-e', script], {
    encoding: 'utf8',
    timeout: 20_000,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', SSL_CERT_FILE: systemCaFile, SSL_CERT_DIR: emptyDir },
  });
  return JSON.parse(stdout) as string[];
}

describe('the supervisors’ TLS trust under their Node flags', () => {
  it('keeps Node’s bundled roots unloaded', () => {
    expect(SUPERVISOR_NODE_FLAGS).toContain('--use-openssl-ca');
  });

  it('verifies the gateway by its CA alone: a certificate from a CA in the system store is refused', async () => {
    const gatewayCa = await createCertificateAuthority('gateway CA');
    const plantedCa = await createCertificateAuthority('a CA the sandbox system store trusts');
    const request = { commonName: 'gateway', dnsNames: ['gateway.test'], ipAddresses: [], usage: 'server' as const };
    const genuine = await serve(await gatewayCa.issue(request));
    const impostor = await serve(await plantedCa.issue(request));
    const gatewayCaFile = path.join(dir, 'gateway-ca.pem');
    const plantedCaFile = path.join(dir, 'planted-ca.pem');
    fs.writeFileSync(gatewayCaFile, gatewayCa.cert);
    fs.writeFileSync(plantedCaFile, plantedCa.cert);

    const [toGenuine, toImpostor] = await dialWithSupervisorFlags([genuine, impostor], gatewayCaFile, plantedCaFile);
    expect(toGenuine).toBe('verified');
    expect(toImpostor).toMatch(/^refused /);
  });
});
