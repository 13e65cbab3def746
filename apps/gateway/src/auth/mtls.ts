// mTLS callers: a client certificate signed by the configured client CA is a principal. The TLS
// layer only *requests* a client certificate (optional mTLS: callers with a bearer token need
// none), so it may hand us one it did not verify; every certificate is verified here, against the
// client CA, before it names anyone.
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Code, DEFAULT_WORKSPACE, GatewayError, type Principal } from '@sandgate/core';

const CLIENT_AUTH_EKU = '1.3.6.1.5.5.7.3.2';
const WORKSPACE_OU_PREFIX = 'workspace:';

/** Every certificate in a PEM bundle (the client CA file may hold several CAs). */
export function parseCertificates(pem: string, what: string): X509Certificate[] {
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) throw new Error(`${what} holds no PEM certificate`);
  return blocks.map((block) => {
    try {
      return new X509Certificate(block);
    } catch (err) {
      throw new Error(`${what}: not a valid certificate (${(err as Error).message})`);
    }
  });
}

export function loadClientCa(file: string): X509Certificate[] {
  let pem: string;
  try {
    pem = readFileSync(file, 'utf8');
  } catch (err) {
    throw new Error(`--client-ca ${file}: cannot read it (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  const cas = parseCertificates(pem, `--client-ca ${file}`);
  for (const ca of cas) if (!ca.ca) throw new Error(`--client-ca ${file}: '${ca.subject.replace(/\n/g, ', ')}' is not a CA certificate`);
  return cas;
}

/** The attribute values of a subject as Node prints it (`CN=a\nOU=b\nOU=c`, specials backslash-escaped). */
export function subjectAttributes(subject: string): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const line of subject.split('\n')) {
    const eq = line.indexOf('=');
    if (eq <= 0) continue;
    const value = line.slice(eq + 1).replace(/\\([0-9A-Fa-f]{2}|.)/g, (_m, c: string) => (c.length === 2 ? String.fromCharCode(parseInt(c, 16)) : c));
    out.push([line.slice(0, eq).toUpperCase(), value]);
  }
  return out;
}

const refused = (why: string) => new GatewayError(Code.UNAUTHENTICATED, `client certificate refused: ${why}`);

/**
 * The principal of a client certificate, if one of `cas` issued and signed it and it is valid now;
 * otherwise UNAUTHENTICATED saying why. Only direct issuance is accepted (no intermediates).
 */
export function certificatePrincipal(cert: X509Certificate, cas: readonly X509Certificate[], nowMs = Date.now()): Principal {
  const issuer = cas.find((ca) => cert.checkIssued(ca) && cert.verify(ca.publicKey));
  if (!issuer) throw refused('not signed by the configured client CA (--client-ca)');
  if (nowMs < cert.validFromDate.getTime()) throw refused(`not valid before ${cert.validFromDate.toISOString()}`);
  if (nowMs > cert.validToDate.getTime()) throw refused(`expired at ${cert.validToDate.toISOString()}`);
  if (cert.ca) throw refused('a CA certificate is not a client certificate');
  // A certificate made for something else (a replica's server certificate from the same CA) names no caller.
  const eku = cert.keyUsage;
  if (eku !== undefined && eku.length > 0 && !eku.includes(CLIENT_AUTH_EKU)) throw refused('its extended key usage does not include clientAuth');
  const attrs = subjectAttributes(cert.subject);
  const cn = attrs.find(([k]) => k === 'CN')?.[1] || 'unknown';
  const ous = attrs.filter(([k]) => k === 'OU').map(([, v]) => v);
  const workspaceOu = ous.find((ou) => ou.startsWith(WORKSPACE_OU_PREFIX) && ou.length > WORKSPACE_OU_PREFIX.length);
  return {
    subject: cn,
    displayName: cn,
    provider: 'mtls',
    admin: ous.includes('admin'),
    workspace: workspaceOu ? workspaceOu.slice(WORKSPACE_OU_PREFIX.length) : DEFAULT_WORKSPACE,
    roles: ous,
    scopes: [],
  };
}
