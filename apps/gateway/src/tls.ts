// The replica's TLS: loading and checking --tls-cert/--tls-key/--tls-ca/--client-ca once at start
// (every mistake is a start-up error naming the flag), the public gRPC port's credentials, the
// HTTP port's HTTPS options, and what supervisors are handed to verify the gateway.
//
// mTLS is optional: with --client-ca the client certificate is requested but not required, so a
// caller without one can still present a bearer token. grpc-js' createSsl(…, true) would require
// it (Node's rejectUnauthorized); its certificate-provider credentials take requestCert and
// rejectUnauthorized separately. A presented certificate is verified by TLS against the client CA;
// grpc-js shows a handler (`call.getAuthContext().sslPeerCertificate`) only a certificate that
// verified, so one from another CA is never a principal (the call then needs a token).
import { X509Certificate, createPrivateKey, type KeyObject } from 'node:crypto';
import fs from 'node:fs';
import { ServerCredentials, experimental } from '@grpc/grpc-js';
import { loopbackHost } from '@sandgate/protocols';
import type { Logger } from '@sandgate/telemetry';
import { ConfigError, type ReplicaConfig } from './config.ts';

export type TlsOptions = Pick<ReplicaConfig, 'tlsCert' | 'tlsKey' | 'tlsCa' | 'clientCa'>;

/** The public listeners' TLS, loaded and checked. */
export interface ServerTls {
  /** PEM chain and key of the listeners. */
  cert: Buffer;
  key: Buffer;
  /** PEM CA of client certificates (mTLS); absent: no client certificate is requested. */
  clientCa?: Buffer;
  /** What supervisors verify the gateway with. */
  supervisor: SupervisorTls;
}

/** What a driver hands a supervisor (LaunchSpec.gatewayTls). */
export interface SupervisorTls {
  /** PEM CA (--tls-ca, else the self-signed --tls-cert). */
  ca: string;
  /** A name in the certificate (its first DNS name, else its first IP address). */
  serverName: string;
}

const PEM_CERT = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

function readPem(file: string, flag: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (err) {
    throw new ConfigError(`--${flag} ${file}: cannot read it (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
}

/** Every certificate in a PEM file, in order; at least one. */
function certificates(pem: Buffer, file: string, flag: string): X509Certificate[] {
  const blocks = pem.toString('utf8').match(PEM_CERT) ?? [];
  if (blocks.length === 0) throw new ConfigError(`--${flag} ${file}: no PEM certificate in it`);
  return blocks.map((block) => {
    try {
      return new X509Certificate(block);
    } catch (err) {
      throw new ConfigError(`--${flag} ${file}: not a valid PEM certificate (${(err as Error).message})`);
    }
  });
}

function privateKey(pem: Buffer, file: string): KeyObject {
  try {
    return createPrivateKey(pem);
  } catch (err) {
    throw new ConfigError(`--tls-key ${file}: not a PEM private key (${(err as Error).message})`);
  }
}

function signs(ca: X509Certificate, cert: X509Certificate): boolean {
  return cert.checkIssued(ca) && cert.verify(ca.publicKey);
}

/** The first DNS name of the certificate's subjectAltName, else its first IP address, else its CN. */
export function certificateName(cert: X509Certificate): string | null {
  const sans = (cert.subjectAltName ?? '').split(/,\s*/).filter((s) => s.length > 0);
  const dns = sans.find((s) => s.startsWith('DNS:'));
  if (dns) return dns.slice(4);
  const ip = sans.find((s) => s.startsWith('IP Address:'));
  if (ip) return ip.slice('IP Address:'.length);
  const cn = /(?:^|\n)CN=([^\n]+)/.exec(cert.subject);
  return cn ? cn[1]!.trim() : null;
}

/**
 * The TLS the options ask for, or null (plaintext). Throws ConfigError naming the flag for an
 * unreadable file, a file that holds no certificate or key, a key that is not the certificate's,
 * a CA that did not sign the certificate, or a flag without the ones it needs.
 */
export function loadServerTls(o: TlsOptions): ServerTls | null {
  if (!o.tlsCert) {
    if (o.tlsKey) throw new ConfigError('--tls-key needs --tls-cert (the certificate of that key)');
    if (o.clientCa) throw new ConfigError('--client-ca needs --tls-cert and --tls-key: client certificates are only seen over TLS');
    if (o.tlsCa) throw new ConfigError('--tls-ca needs --tls-cert and --tls-key');
    return null;
  }
  if (!o.tlsKey) throw new ConfigError('--tls-cert needs --tls-key (the private key of the certificate)');
  const cert = readPem(o.tlsCert, 'tls-cert');
  const chain = certificates(cert, o.tlsCert, 'tls-cert');
  const leaf = chain[0]!;
  const key = readPem(o.tlsKey, 'tls-key');
  if (!leaf.checkPrivateKey(privateKey(key, o.tlsKey))) {
    throw new ConfigError(`--tls-key ${o.tlsKey} is not the private key of --tls-cert ${o.tlsCert}`);
  }
  if (new Date(leaf.validTo).getTime() < Date.now()) {
    throw new ConfigError(`--tls-cert ${o.tlsCert} expired on ${leaf.validTo}`);
  }
  const supervisor = supervisorTrust(chain, o.tlsCert, o.tlsCa);
  let clientCa: Buffer | undefined;
  if (o.clientCa) {
    clientCa = readPem(o.clientCa, 'client-ca');
    certificates(clientCa, o.clientCa, 'client-ca');
  }
  return { cert, key, clientCa, supervisor };
}

/** What supervisors verify the gateway with: the CA (checked to have signed the chain) and a name in the leaf. */
function supervisorTrust(chain: X509Certificate[], certFile: string, caFile: string): SupervisorTls {
  const leaf = chain[0]!;
  let ca: string;
  if (caFile) {
    const caPem = readPem(caFile, 'tls-ca');
    const cas = certificates(caPem, caFile, 'tls-ca');
    // The CA signed the leaf or one of the intermediates the chain file carries.
    if (!cas.some((c) => chain.some((link) => signs(c, link) || link.raw.equals(c.raw)))) {
      throw new ConfigError(`--tls-ca ${caFile} did not sign --tls-cert ${certFile}: supervisors would refuse the gateway`);
    }
    ca = caPem.toString('utf8');
  } else {
    if (!signs(leaf, leaf)) {
      throw new ConfigError(`--tls-cert ${certFile} is not self-signed: give --tls-ca (the CA that signed it) so supervisors can verify the gateway`);
    }
    ca = leaf.toString();
  }
  const serverName = certificateName(leaf);
  if (!serverName) throw new ConfigError(`--tls-cert ${certFile} names no host (no subjectAltName, no CN): supervisors cannot verify it`);
  return { ca, serverName };
}

/**
 * `sandgate worker`: it serves nothing, but the supervisors of sandboxes it restarts must verify
 * the gateway like any other: --tls-cert (the gateway's certificate) and --tls-ca. Null: plaintext.
 */
export function loadSupervisorTls(o: Pick<ReplicaConfig, 'tlsCert' | 'tlsCa'>): SupervisorTls | null {
  if (!o.tlsCert) {
    if (o.tlsCa) throw new ConfigError("--tls-ca needs --tls-cert (the gateway's certificate, for the name supervisors verify)");
    return null;
  }
  return supervisorTrust(certificates(readPem(o.tlsCert, 'tls-cert'), o.tlsCert, 'tls-cert'), o.tlsCert, o.tlsCa);
}

/** A certificate provider that never changes (the files were read once, at start). */
function staticProvider(update: { ca?: Buffer; cert: Buffer; key: Buffer }): experimental.CertificateProvider {
  return {
    // Delivered asynchronously: grpc-js registers its listener for the update only after adding
    // ours, so a synchronous call would be missed and connections dropped as "unloaded credentials".
    addCaCertificateListener: (listener) => queueMicrotask(() => listener(update.ca ? { caCertificate: update.ca } : null)),
    removeCaCertificateListener: () => undefined,
    addIdentityCertificateListener: (listener) => queueMicrotask(() => listener({ certificate: update.cert, privateKey: update.key })),
    removeIdentityCertificateListener: () => undefined,
  };
}

/** The public gRPC port's credentials: plaintext, TLS, or TLS requesting (not requiring) a client certificate. */
export function grpcServerCredentials(tls: ServerTls | null): ServerCredentials {
  if (!tls) return ServerCredentials.createInsecure();
  if (!tls.clientCa) return ServerCredentials.createSsl(null, [{ cert_chain: tls.cert, private_key: tls.key }], false);
  const provider = staticProvider({ ca: tls.clientCa, cert: tls.cert, key: tls.key });
  // (identity provider, CA provider, requireClientCertificate): requestCert is on because a CA
  // provider is given; rejectUnauthorized is off, so a caller without a certificate gets in.
  return experimental.createCertificateProviderServerCredentials(provider, provider, false);
}

/** fastify's `https` options for the HTTP port (/healthz, /readyz, /metrics need no client certificate). */
export function httpsOptions(tls: ServerTls | null): { cert: Buffer; key: Buffer } | null {
  return tls ? { cert: tls.cert, key: tls.key } : null;
}

/** Plaintext on an address others can reach is allowed, but said loudly. */
export function warnIfPlaintext(host: string, tls: ServerTls | null, log: Logger): void {
  if (tls || loopbackHost(host) !== null) return;
  log.warn('serving plaintext gRPC and HTTP on a non-loopback address: anyone on the network can read and alter calls; give --tls-cert and --tls-key', { host });
}
