// Public links to an exposed service: an unguessable signature with an expiry, as peers' preview
// links. The signature is an HMAC-SHA256 over (service host, expiry, endpoint id) with a key every
// replica derives from the peer secret (HKDF, its own label: the key opens links only, never peer
// links). So a link verifies at every replica, names one service only (another host, or the
// endpoint deleted and exposed again, fails), and stops at its expiry; nothing is stored.
//
// A browser first presents the link's query parameters; the proxy answers with a cookie carrying
// the same expiry and signature (HttpOnly, host-only, SameSite=Lax) and a redirect to the clean
// URL, so the page's subresources and WebSockets carry the cookie instead.
import { createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';

/** Query parameters of a signed link. */
export const LINK_EXPIRY_PARAM = 'sg_exp';
export const LINK_SIGNATURE_PARAM = 'sg_sig';
/** The cookie a verified link becomes (never forwarded to the service, never settable by it). */
export const LINK_COOKIE = 'sg_service_link';

/** Longest lifetime a link may be given. */
export const MAX_LINK_SECONDS = 7 * 24 * 3600;
export const DEFAULT_LINK_SECONDS = 3600;

const HKDF_SALT = 'sandgate service links';
const HKDF_INFO = 'sandgate service link v1';

export type LinkCheck = { ok: true; expiresAtMs: number } | { ok: false; reason: 'expired' | 'invalid' };

export class ServiceLinks {
  private readonly key: Buffer;

  constructor(peerSecret: string) {
    this.key = Buffer.from(hkdfSync('sha256', peerSecret, HKDF_SALT, HKDF_INFO, 32));
  }

  /** The signature of a link to `host` (lowercase, no port) of endpoint `endpointId`, valid until `expiresAtMs`. */
  sign(host: string, endpointId: string, expiresAtMs: number): string {
    return createHmac('sha256', this.key).update(`${host.toLowerCase()}\n${expiresAtMs}\n${endpointId}`).digest('base64url');
  }

  /**
   * Checks an expiry and signature as they came (query or cookie). `endpointId` is '' when the
   * host names no endpoint: nothing can verify then, and the answer is the same `invalid` as for
   * a forged signature, so a link prober learns nothing about which endpoints exist.
   */
  verify(host: string, endpointId: string, expiry: string, signature: string, nowMs = Date.now()): LinkCheck {
    if (!/^\d{1,16}$/.test(expiry) || !/^[A-Za-z0-9_-]{43}$/.test(signature)) return { ok: false, reason: 'invalid' };
    const expiresAtMs = Number(expiry);
    const expected = Buffer.from(this.sign(host, endpointId, expiresAtMs));
    const given = Buffer.from(signature);
    if (!endpointId || given.length !== expected.length || !timingSafeEqual(given, expected)) return { ok: false, reason: 'invalid' };
    if (expiresAtMs <= nowMs) return { ok: false, reason: 'expired' };
    return { ok: true, expiresAtMs };
  }
}

/** The cookie value of a verified link: `<expiry>.<signature>`. */
export function linkCookieValue(expiresAtMs: number, signature: string): string {
  return `${expiresAtMs}.${signature}`;
}

/** The expiry and signature a cookie value carries, or null. */
export function parseLinkCookie(value: string): { expiry: string; signature: string } | null {
  const dot = value.indexOf('.');
  if (dot <= 0) return null;
  return { expiry: value.slice(0, dot), signature: value.slice(dot + 1) };
}

/** Every `name=value` of a Cookie header (first value wins, as browsers send the most specific first). */
export function parseCookies(header: string | undefined): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq <= 0) continue;
    const name = part.slice(0, eq).trim();
    if (!out.has(name)) out.set(name, part.slice(eq + 1).trim());
  }
  return out;
}

/** A Cookie header without the cookies named in `drop` (undefined when nothing is left). */
export function cookieHeaderWithout(header: string | undefined, drop: ReadonlySet<string>): string | undefined {
  if (!header) return undefined;
  const kept = header
    .split(';')
    .map((p) => p.trim())
    .filter((p) => p.length > 0 && !drop.has(p.slice(0, Math.max(0, p.indexOf('='))).trim()));
  return kept.length > 0 ? kept.join('; ') : undefined;
}
