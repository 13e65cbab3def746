// Signed service links: what verifies and what does not (the e2e test attacks them through the
// proxy; this pins the rules themselves).
import { describe, expect, it } from 'vitest';
import { ServiceLinks, cookieHeaderWithout, parseCookies, parseLinkCookie, linkCookieValue } from '../src/services/service-links.ts';

const host = 'default--demo--web.openshell.localhost';

describe('ServiceLinks', () => {
  const links = new ServiceLinks('peer-secret-a');
  const exp = Date.now() + 60_000;
  const sig = links.sign(host, 'ep-1', exp);

  it('verifies its own link at any replica holding the same peer secret', () => {
    expect(links.verify(host, 'ep-1', String(exp), sig)).toEqual({ ok: true, expiresAtMs: exp });
    expect(new ServiceLinks('peer-secret-a').verify(host.toUpperCase(), 'ep-1', String(exp), sig).ok).toBe(true);
  });

  it('refuses another host, endpoint id, expiry or secret, and garbage', () => {
    expect(links.verify('default--demo--other.openshell.localhost', 'ep-1', String(exp), sig)).toEqual({ ok: false, reason: 'invalid' });
    expect(links.verify(host, 'ep-2', String(exp), sig).ok).toBe(false);
    expect(links.verify(host, '', String(exp), sig).ok).toBe(false);
    expect(links.verify(host, 'ep-1', String(exp + 1), sig).ok).toBe(false);
    expect(new ServiceLinks('peer-secret-b').verify(host, 'ep-1', String(exp), sig).ok).toBe(false);
    for (const [e, s] of [['', sig], ['abc', sig], [String(exp), ''], [String(exp), sig.slice(1)], [String(exp), `${sig.slice(0, -1)}=`]]) {
      expect(links.verify(host, 'ep-1', e!, s!).ok).toBe(false);
    }
  });

  it('says expired only for a genuine link past its time', () => {
    const past = Date.now() - 1;
    expect(links.verify(host, 'ep-1', String(past), links.sign(host, 'ep-1', past))).toEqual({ ok: false, reason: 'expired' });
    // A forged past link is invalid, not expired (nothing about the endpoint is confirmed).
    expect(links.verify(host, 'ep-1', String(past), sig)).toEqual({ ok: false, reason: 'invalid' });
  });

  it('is not the peer secret itself (its own HKDF label)', () => {
    expect(sig).not.toContain('peer-secret-a');
    expect(links.sign(host, 'ep-1', exp)).toBe(sig);
  });
});

describe('cookies', () => {
  it('round-trips the link cookie and drops only the named cookies', () => {
    expect(parseLinkCookie(linkCookieValue(123, 'abc'))).toEqual({ expiry: '123', signature: 'abc' });
    expect(parseLinkCookie('nodot')).toBeNull();
    expect(parseCookies('a=1; sg_service_link=9.x; a=2').get('a')).toBe('1');
    expect(cookieHeaderWithout('a=1; sg_service_link=9.x;CF_Authorization=t; b=2', new Set(['sg_service_link', 'CF_Authorization']))).toBe('a=1; b=2');
    expect(cookieHeaderWithout('sg_service_link=9.x', new Set(['sg_service_link']))).toBeUndefined();
  });
});
