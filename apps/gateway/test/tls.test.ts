// The replica's TLS, attacked at the transport: every bad flag combination is a start-up error
// naming the flag; the public port's credentials serve TLS, request (not require) a client
// certificate with --client-ca, and show a handler only a certificate that chains to the client CA;
// a plaintext client and a client that does not trust the CA get nowhere.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { createCertificateAuthority, type CertificateAuthority, type PemPair } from '@sandgate/pki';
import { ConfigError } from '../src/config.ts';
import { grpcServerCredentials, httpsOptions, loadServerTls, loadSupervisorTls, warnIfPlaintext } from '../src/tls.ts';
import { parseReplicaConfig, startReplica } from '../src/index.ts';
import type { Logger } from '@sandgate/telemetry';
import { buildHttp } from '../src/api/http.ts';
import { Metrics } from '@sandgate/telemetry';

let dir: string;
let ca: CertificateAuthority;
let otherCa: CertificateAuthority;
let server: PemPair;
let client: PemPair;
let strangerClient: PemPair;
const file = (name: string, text: string) => {
  const p = path.join(dir, name);
  writeFileSync(p, text);
  return p;
};
let f: Record<'cert' | 'key' | 'ca' | 'otherCa' | 'otherKey' | 'clientCa', string>;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'sg-tls-'));
  ca = await createCertificateAuthority('test CA');
  otherCa = await createCertificateAuthority('another CA');
  server = await ca.issue({ commonName: 'gateway', dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'], usage: 'server' });
  client = await ca.issue({ commonName: 'alice', usage: 'client' });
  strangerClient = await otherCa.issue({ commonName: 'mallory', usage: 'client' });
  const other = await otherCa.issue({ commonName: 'x', dnsNames: ['localhost'], usage: 'server' });
  f = {
    cert: file('server.pem', server.cert),
    key: file('server-key.pem', server.key),
    ca: file('ca.pem', ca.cert),
    otherCa: file('other-ca.pem', otherCa.cert),
    otherKey: file('other-key.pem', other.key),
    clientCa: file('client-ca.pem', ca.cert),
  };
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const none = { tlsCert: '', tlsKey: '', tlsCa: '', clientCa: '' };

describe('loadServerTls: every mistake is a start-up error naming the flag', () => {
  it.each([
    ['a key without a certificate', () => ({ ...none, tlsKey: f.key }), /--tls-key needs --tls-cert/],
    ['a certificate without a key', () => ({ ...none, tlsCert: f.cert }), /--tls-cert needs --tls-key/],
    ['--client-ca without TLS', () => ({ ...none, clientCa: f.ca }), /--client-ca needs --tls-cert/],
    ['--tls-ca without TLS', () => ({ ...none, tlsCa: f.ca }), /--tls-ca needs --tls-cert/],
    ['an unreadable certificate', () => ({ ...none, tlsCert: path.join(dir, 'missing.pem'), tlsKey: f.key }), /--tls-cert .*missing\.pem: cannot read it \(ENOENT\)/],
    ['a key file that is no key', () => ({ ...none, tlsCert: f.cert, tlsKey: f.cert }), /--tls-key .*: not a PEM private key/],
    ['a certificate file that is no certificate', () => ({ ...none, tlsCert: f.key, tlsKey: f.key }), /--tls-cert .*: no PEM certificate/],
    ['a key that is not the certificate\'s', () => ({ ...none, tlsCert: f.cert, tlsKey: f.otherKey, tlsCa: f.ca }), /--tls-key .* is not the private key of --tls-cert/],
    ['a CA that did not sign the certificate', () => ({ ...none, tlsCert: f.cert, tlsKey: f.key, tlsCa: f.otherCa }), /--tls-ca .* did not sign --tls-cert/],
    ['a CA-signed certificate without --tls-ca', () => ({ ...none, tlsCert: f.cert, tlsKey: f.key }), /not self-signed: give --tls-ca/],
    ['an unreadable client CA', () => ({ ...none, tlsCert: f.cert, tlsKey: f.key, tlsCa: f.ca, clientCa: path.join(dir, 'nope.pem') }), /--client-ca .*nope\.pem: cannot read it/],
  ])('%s', (_what, options, message) => {
    expect(() => loadServerTls(options())).toThrow(ConfigError);
    expect(() => loadServerTls(options())).toThrow(message);
  });

  it('no flags: plaintext; a good pair: the CA and the first DNS name for supervisors', () => {
    expect(loadServerTls(none)).toBeNull();
    const tls = loadServerTls({ ...none, tlsCert: f.cert, tlsKey: f.key, tlsCa: f.ca })!;
    expect(tls.supervisor).toEqual({ ca: ca.cert, serverName: 'localhost' });
    expect(loadSupervisorTls({ tlsCert: f.cert, tlsCa: f.ca })).toEqual({ ca: ca.cert, serverName: 'localhost' });
    expect(loadSupervisorTls({ tlsCert: '', tlsCa: '' })).toBeNull();
  });
});

describe('start-up', () => {
  it('a replica with bad TLS flags stops before it connects anywhere, naming the flag', async () => {
    const base = parseReplicaConfig({}, {}, { hostname: 'test', pid: process.pid, homedir: dir, randomHex: () => '0000' });
    // Redis on a closed port: the error must be the TLS one, raised first.
    const config = { ...base, redisUrl: 'redis://127.0.0.1:1', stateDir: path.join(dir, 'state'), tlsCert: f.cert, tlsKey: f.otherKey, tlsCa: f.ca };
    await expect(startReplica(config)).rejects.toThrow(/--tls-key .* is not the private key of --tls-cert/);
  });

  it('warns about plaintext on a non-loopback address, only there', () => {
    const warnings: string[] = [];
    const log = { warn: (m: string) => warnings.push(m) } as unknown as Logger;
    warnIfPlaintext('127.0.0.1', null, log);
    warnIfPlaintext('::1', null, log);
    warnIfPlaintext('0.0.0.0', loadServerTls({ ...none, tlsCert: f.cert, tlsKey: f.key, tlsCa: f.ca }), log);
    expect(warnings).toEqual([]);
    warnIfPlaintext('0.0.0.0', null, log);
    warnIfPlaintext('10.1.2.3', null, log);
    expect(warnings).toHaveLength(2);
    expect(warnings[0]).toMatch(/plaintext .* non-loopback .* --tls-cert/);
  });
});

// A tiny service on the replica's own credentials: its one method answers with what the handler
// sees of the caller's certificate.
const service: grpc.ServiceDefinition = {
  Who: {
    path: '/test.Tls/Who',
    requestStream: false,
    responseStream: false,
    requestSerialize: (v: Buffer) => v,
    requestDeserialize: (b: Buffer) => b,
    responseSerialize: (v: Buffer) => v,
    responseDeserialize: (b: Buffer) => b,
  },
};
const Client = grpc.makeGenericClientConstructor(service, 'Tls');

async function serve(clientCa: boolean): Promise<{ address: string; stop: () => void }> {
  const tls = loadServerTls({ ...none, tlsCert: f.cert, tlsKey: f.key, tlsCa: f.ca, clientCa: clientCa ? f.clientCa : '' });
  const s = new grpc.Server();
  s.addService(service, {
    Who: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
      const ctx = call.getAuthContext();
      cb(null, Buffer.from(JSON.stringify({ type: ctx.transportSecurityType ?? null, subject: ctx.sslPeerCertificate?.subject?.CN ?? null })));
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    s.bindAsync('127.0.0.1:0', grpcServerCredentials(tls), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { address: `127.0.0.1:${port}`, stop: () => s.forceShutdown() };
}

function who(address: string, creds: grpc.ChannelCredentials, options: grpc.ChannelOptions = {}): Promise<{ type: string | null; subject: string | null }> {
  const c = new Client(address, creds, options) as unknown as grpc.Client & Record<string, (...a: unknown[]) => unknown>;
  return new Promise((resolve, reject) => {
    c.Who(Buffer.alloc(0), { deadline: Date.now() + 5000 }, (err: grpc.ServiceError | null, res: Buffer) => {
      c.close();
      if (err) reject(err);
      else resolve(JSON.parse(res.toString()));
    });
  });
}

describe('the public port over TLS', () => {
  it('with --client-ca: a client certificate of the CA reaches the handler; none, or another CA’s, gets in without one', async () => {
    const { address, stop } = await serve(true);
    try {
      const caBuf = Buffer.from(ca.cert);
      expect(await who(address, grpc.credentials.createSsl(caBuf, Buffer.from(client.key), Buffer.from(client.cert)))).toEqual({ type: 'ssl', subject: 'alice' });
      // No certificate: still connected (a bearer token is then the caller's credential).
      expect(await who(address, grpc.credentials.createSsl(caBuf))).toEqual({ type: null, subject: null });
      // A certificate of another CA is never shown to the handler, so it can never be a principal.
      expect(await who(address, grpc.credentials.createSsl(caBuf, Buffer.from(strangerClient.key), Buffer.from(strangerClient.cert)))).toEqual({ type: null, subject: null });
      // The docker supervisors' way: dial an address, verify the certificate's name.
      expect(await who(address.replace('127.0.0.1', 'localhost'), grpc.credentials.createSsl(caBuf))).toEqual({ type: null, subject: null });
    } finally {
      stop();
    }
  });

  it('refuses a plaintext client and a client that does not trust the CA', async () => {
    const { address, stop } = await serve(false);
    try {
      await expect(who(address, grpc.credentials.createInsecure())).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
      await expect(who(address, grpc.credentials.createSsl(Buffer.from(otherCa.cert)))).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
      await expect(who(address, grpc.credentials.createSsl(Buffer.from(ca.cert)), { 'grpc.ssl_target_name_override': 'not-the-gateway' })).rejects.toMatchObject({
        code: grpc.status.UNAVAILABLE,
      });
      expect(await who(address, grpc.credentials.createSsl(Buffer.from(ca.cert)))).toEqual({ type: null, subject: null });
    } finally {
      stop();
    }
  });

  it('the HTTP port serves HTTPS with the same pair', async () => {
    const tls = loadServerTls({ ...none, tlsCert: f.cert, tlsKey: f.key, tlsCa: f.ca });
    const app = buildHttp({ https: httpsOptions(tls), replicaId: 'r', metrics: new Metrics(), debugBreaks: [], ready: async () => ({ ok: true, detail: 'ok' }) });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const port = (app.server.address() as { port: number }).port;
    const get = (trust: string) =>
      new Promise<number>((resolve, reject) => {
        https.get({ host: '127.0.0.1', port, path: '/readyz', ca: trust, servername: 'localhost' }, (res) => {
          res.resume();
          resolve(res.statusCode!);
        }).on('error', reject);
      });
    try {
      expect(await get(ca.cert)).toBe(200);
      await expect(get(otherCa.cert)).rejects.toThrow(/self-signed|unable to verify|certificate/i);
      const plain = await fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.status, (e: Error) => e.message);
      expect(plain).not.toBe(200);
    } finally {
      await app.close();
    }
  });
});
