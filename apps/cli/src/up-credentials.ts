// What `sandgate up` makes so that zero-config stays zero-config with TLS and auth on: a CA and a
// server certificate under <stateDir>/tls (reused on later starts; the server certificate made
// again when missing, expiring, or not for this host), an admin token of workspace `default`
// (kept 0600 in the state dir and reused while it still verifies), and the client config file
// the CLI reads when no flag or variable says otherwise.
import { X509Certificate, createPrivateKey } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { clientConfigPath, type ClientConfigFile } from './client-config.ts';
import type { Env } from './args.ts';

export interface UpTls {
  dir: string;
  caFile: string;
  certFile: string;
  keyFile: string;
  /** Whether this start made the CA, the server certificate, both or neither. */
  made: { ca: boolean; server: boolean };
}

const RENEW_BEFORE_MS = 30 * 86_400_000;

function readIf(file: string): string | null {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/** Written whole then renamed, with its mode from the start (keys: 0600). */
function writeFileAtomic(file: string, text: string, mode: number): void {
  const tmp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, text, { mode });
  fs.chmodSync(tmp, mode);
  fs.renameSync(tmp, file);
}

/** Is `certPem` a live certificate of `ca`, for every name in `hosts`, with `keyPem` as its key? */
export function serverCertificateFits(certPem: string, keyPem: string, caPem: string, dnsNames: string[], ips: string[], nowMs = Date.now()): boolean {
  try {
    const cert = new X509Certificate(certPem);
    const ca = new X509Certificate(caPem);
    if (!cert.checkIssued(ca) || !cert.verify(ca.publicKey)) return false;
    if (!cert.checkPrivateKey(createPrivateKey(keyPem))) return false;
    if (new Date(cert.validTo).getTime() - nowMs < RENEW_BEFORE_MS) return false;
    if (new Date(cert.validFrom).getTime() > nowMs) return false;
    return dnsNames.every((n) => cert.checkHost(n) !== undefined) && ips.every((ip) => cert.checkIP(ip) !== undefined);
  } catch {
    return false;
  }
}

/**
 * The CA and server certificate under `<stateDir>/tls` (directory 0700, keys 0600): made on the
 * first start, reused after; the server certificate is made again when it is missing, expires
 * within 30 days, or does not name one of `dnsNames`/`ips`. A CA that cannot be read back is an
 * error (replacing it would silently invalidate every client that trusts it).
 */
export async function ensureUpTls(stateDir: string, dnsNames: string[], ips: string[]): Promise<UpTls> {
  const { createCertificateAuthority, loadCertificateAuthority } = await import('@sandgate/pki');
  const dir = path.join(stateDir, 'tls');
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  fs.chmodSync(dir, 0o700);
  const caFile = path.join(dir, 'ca.pem');
  const caKeyFile = path.join(dir, 'ca-key.pem');
  const certFile = path.join(dir, 'server.pem');
  const keyFile = path.join(dir, 'server-key.pem');
  const made = { ca: false, server: false };

  let caCert = readIf(caFile);
  let caKey = readIf(caKeyFile);
  let ca;
  if (caCert === null || caKey === null) {
    if ((caCert === null) !== (caKey === null)) {
      throw new Error(`${dir}: one of ca.pem and ca-key.pem is missing; remove both to make a new CA (clients that trust the old one must then be given the new ca.pem)`);
    }
    ca = await createCertificateAuthority('sandgate up CA');
    writeFileAtomic(caKeyFile, ca.key, 0o600);
    writeFileAtomic(caFile, ca.cert, 0o644);
    caCert = ca.cert;
    caKey = ca.key;
    made.ca = true;
  }
  const cert = readIf(certFile);
  const key = readIf(keyFile);
  if (made.ca || cert === null || key === null || !serverCertificateFits(cert, key, caCert, dnsNames, ips)) {
    ca ??= await loadCertificateAuthority({ cert: caCert, key: caKey }).catch((err: unknown) => {
      throw new Error(`${caFile}/${caKeyFile} cannot be read back as a CA (${(err as Error).message}); remove both to make a new one`);
    });
    const pair = await ca.issue({ commonName: dnsNames[0] ?? 'localhost', dnsNames, ipAddresses: ips, usage: 'server' });
    writeFileAtomic(keyFile, pair.key, 0o600);
    writeFileAtomic(certFile, pair.cert, 0o644);
    made.server = true;
  }
  return { dir, caFile, certFile, keyFile, made };
}

/** The names `up`'s server certificate is for: localhost, the loopback addresses, the host name, and a non-loopback bind address. */
export function upCertificateNames(hostname: string, bindHost: string): { dnsNames: string[]; ips: string[] } {
  const isIp = (h: string) => /^[\d.]+$/.test(h) || h.includes(':');
  const dnsNames = [...new Set(['localhost', hostname, ...(isIp(bindHost) ? [] : [bindHost])].filter((n) => n && /^[A-Za-z0-9.-]+$/.test(n)))];
  const ips = [...new Set(['127.0.0.1', '::1', ...(isIp(bindHost) && bindHost !== '0.0.0.0' && bindHost !== '::' ? [bindHost] : [])])];
  return { dnsNames, ips };
}

/** The token file: `<stateDir>/admin-token`, 0600. */
export function adminTokenFile(stateDir: string): string {
  return path.join(stateDir, 'admin-token');
}

/**
 * An admin token of workspace `default`: the one kept in the state dir if it still verifies
 * (not revoked, not expired, still admin of default), else a new one (then kept, 0600).
 */
export async function ensureAdminToken(redisUrl: string, stateDir: string, redisCa = ''): Promise<{ token: string; made: boolean }> {
  const { TokenStore, createRedisConnection, loadRedisCa } = await import('@sandgate/store');
  const redis = createRedisConnection(redisUrl, 'commands', { lazyConnect: true, oneShot: true, connectionName: 'sandgate:up', tlsCa: loadRedisCa(redisCa) });
  try {
    await redis.connect();
    const tokens = new TokenStore(redis);
    const file = adminTokenFile(stateDir);
    const kept = readIf(file)?.trim();
    if (kept) {
      const record = await tokens.verify(kept);
      if (record && record.workspace === 'default' && record.role === 'admin') return { token: kept, made: false };
    }
    const { token } = await tokens.create({ workspace: 'default', role: 'admin', name: 'sandgate up' });
    writeFileAtomic(file, `${token}\n`, 0o600);
    return { token, made: true };
  } finally {
    redis.disconnect();
  }
}

export type ClientConfigOutcome =
  | { written: true; path: string }
  /** An existing file names another gateway (or cannot be read): left alone; ours is at `ownPath`. */
  | { written: false; path: string; ownPath: string; reason: string };

/**
 * Writes the client config file (0600) for `wanted`, unless one already there names another
 * gateway with another CA (an earlier `up` of this state dir is ours to replace): that one belongs
 * to someone else's setup and is left alone; the same content then goes
 * to `<stateDir>/client-config.json`, for SANDGATE_CONFIG. Always writes that copy as well.
 */
export function writeClientConfig(env: Env, stateDir: string, wanted: ClientConfigFile): ClientConfigOutcome {
  const ownPath = path.join(stateDir, 'client-config.json');
  const text = `${JSON.stringify(wanted, null, 2)}\n`;
  writeFileAtomic(ownPath, text, 0o600);
  const file = clientConfigPath(env);
  const existing = readIf(file);
  if (existing !== null) {
    let old: { gateway?: unknown; ca?: unknown };
    try {
      old = JSON.parse(existing) as typeof old;
    } catch {
      return { written: false, path: file, ownPath, reason: 'it is not JSON' };
    }
    // Ours from an earlier start (same CA file, perhaps another port): replaced. Another gateway's: kept.
    const ours = old.gateway === undefined || old.gateway === wanted.gateway || (old.ca !== undefined && old.ca === wanted.ca);
    if (!ours) return { written: false, path: file, ownPath, reason: `it names another gateway, ${String(old.gateway)}` };
  }
  fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  writeFileAtomic(file, text, 0o600);
  return { written: true, path: file };
}
