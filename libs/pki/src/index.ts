// Certificates for sandgate's TLS: a private CA, server certificates for the replicas and client
// certificates for mTLS callers. `sandgate up` makes its own CA with these, and tests make theirs.
// ECDSA P-256 via WebCrypto, X.509 encoding by @peculiar/x509: no hand-written ASN.1.
import { webcrypto, randomBytes } from 'node:crypto';
import * as x509 from '@peculiar/x509';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);

const ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const DAY_MS = 86_400_000;

/** PEM text of a certificate and its private key (PKCS#8). */
export interface PemPair {
  cert: string;
  key: string;
}

export interface CertificateAuthority extends PemPair {
  /** Issues a certificate signed by this CA. */
  issue(request: IssueRequest): Promise<PemPair>;
}

export interface IssueRequest {
  /** Subject common name (a client certificate's principal subject). */
  commonName: string;
  /** Subject OU values (a client certificate's roles). */
  organizationalUnits?: string[];
  /** DNS names and IP addresses the certificate is valid for (server certificates). */
  dnsNames?: string[];
  ipAddresses?: string[];
  usage: 'server' | 'client';
  /** Validity from now; default 825 days (the most browsers accept for a server certificate). */
  validDays?: number;
  /** Start of validity; default one hour ago (clock skew). */
  notBefore?: Date;
}

function serial(): string {
  const bytes = randomBytes(16);
  bytes[0]! &= 0x7f; // positive
  return bytes.toString('hex');
}

async function keyPem(key: webcrypto.CryptoKey): Promise<string> {
  const der = await webcrypto.subtle.exportKey('pkcs8', key as webcrypto.CryptoKey);
  return x509.PemConverter.encode(der, 'PRIVATE KEY');
}

function escapeDn(value: string): string {
  return value.replace(/([,+"\\<>;=])/g, '\\$1');
}

async function caFrom(cert: x509.X509Certificate, keys: webcrypto.CryptoKeyPair | { privateKey: webcrypto.CryptoKey }): Promise<CertificateAuthority> {
  const certPem = cert.toString('pem');
  const caKeyPem = await keyPem(keys.privateKey);
  return {
    cert: certPem,
    key: caKeyPem,
    async issue(req: IssueRequest): Promise<PemPair> {
      const leafKeys = (await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
      const notBefore = req.notBefore ?? new Date(Date.now() - 3_600_000);
      const names = [`CN=${escapeDn(req.commonName)}`, ...(req.organizationalUnits ?? []).map((ou) => `OU=${escapeDn(ou)}`)];
      const altNames = [
        ...(req.dnsNames ?? []).map((value) => ({ type: 'dns' as const, value })),
        ...(req.ipAddresses ?? []).map((value) => ({ type: 'ip' as const, value })),
      ];
      const leaf = await x509.X509CertificateGenerator.create({
        serialNumber: serial(),
        subject: names.join(', '),
        issuer: cert.subject,
        notBefore,
        notAfter: new Date(notBefore.getTime() + (req.validDays ?? 825) * DAY_MS),
        signingAlgorithm: ALGORITHM,
        publicKey: leafKeys.publicKey,
        signingKey: keys.privateKey,
        extensions: [
          new x509.BasicConstraintsExtension(false, undefined, true),
          new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyAgreement, true),
          new x509.ExtendedKeyUsageExtension([req.usage === 'server' ? x509.ExtendedKeyUsage.serverAuth : x509.ExtendedKeyUsage.clientAuth]),
          ...(altNames.length > 0 ? [new x509.SubjectAlternativeNameExtension(altNames)] : []),
          await x509.AuthorityKeyIdentifierExtension.create(cert),
        ],
      });
      return { cert: leaf.toString('pem'), key: await keyPem(leafKeys.privateKey) };
    },
  };
}

/** A new self-signed CA (10 years). */
export async function createCertificateAuthority(commonName = 'sandgate CA'): Promise<CertificateAuthority> {
  const keys = (await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const notBefore = new Date(Date.now() - 3_600_000);
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(),
    name: `CN=${escapeDn(commonName)}`,
    notBefore,
    notAfter: new Date(notBefore.getTime() + 3650 * DAY_MS),
    signingAlgorithm: ALGORITHM,
    keys,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return caFrom(cert, keys);
}

/** A CA from its PEM certificate and key (e.g. one `sandgate up` made on an earlier start). */
export async function loadCertificateAuthority(pair: PemPair): Promise<CertificateAuthority> {
  const cert = new x509.X509Certificate(pair.cert);
  const der = x509.PemConverter.decode(pair.key)[0]!;
  const privateKey = (await webcrypto.subtle.importKey('pkcs8', der, ALGORITHM, true, ['sign'])) as unknown as CryptoKey;
  return caFrom(cert, { privateKey });
}
