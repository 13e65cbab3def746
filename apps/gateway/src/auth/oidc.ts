// OIDC callers: a JWT from the configured issuer, verified with `jose` against the issuer's JWKS
// (no hand-written JWT code). The key set is fetched on first use, cached, and fetched again when
// a token names a key id it does not hold, so the issuer can rotate keys under running replicas.
import { createRemoteJWKSet, decodeProtectedHeader, errors as joseErrors, jwtVerify, type JWTPayload } from 'jose';
import { Code, DEFAULT_WORKSPACE, GatewayError, type Principal } from '@sandgate/core';

/**
 * Asymmetric signatures only: never `none`, never HMAC (an HS256 token "signed" with the issuer's
 * public key must not verify).
 */
export const OIDC_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'];

/**
 * How soon after a fetch an unknown key id may trigger another: a new key is picked up within this
 * after rotation, and random key ids cannot make a replica hammer the issuer.
 */
const JWKS_COOLDOWN_MS = 1_000;
/** How long a fetched key set is trusted without a refetch. */
const JWKS_MAX_AGE_MS = 10 * 60_000;
const FETCH_TIMEOUT_MS = 5_000;

export interface OidcOptions {
  issuer: string;
  audience: string;
  /** Empty: `jwks_uri` of `<issuer>/.well-known/openid-configuration`. */
  jwksUrl: string;
  workspaceClaim: string;
  roleClaim: string;
  adminRole: string;
}

const invalid = (why: string) => new GatewayError(Code.UNAUTHENTICATED, `invalid token: ${why}`);

/** The value at a dotted path (`realm_access.roles`) of the claims, or undefined. */
export function claimAt(payload: JWTPayload, dotted: string): unknown {
  let value: unknown = payload;
  for (const part of dotted.split('.')) {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}

function stringList(value: unknown, claim: string, separator?: RegExp): string[] {
  if (value === undefined || value === null) return [];
  if (typeof value === 'string') return separator ? value.split(separator).filter(Boolean) : [value];
  if (Array.isArray(value) && value.every((v) => typeof v === 'string')) return value as string[];
  throw invalid(`claim '${claim}' must be a string or an array of strings`);
}

export class OidcVerifier {
  private readonly options: OidcOptions;
  private keys: ReturnType<typeof createRemoteJWKSet> | undefined;
  private discovering: Promise<ReturnType<typeof createRemoteJWKSet>> | undefined;

  constructor(options: OidcOptions) {
    if (!options.audience) throw new Error('--oidc-audience is required with --oidc-issuer: tokens for other audiences must not be accepted');
    try {
      new URL(options.issuer);
      if (options.jwksUrl) new URL(options.jwksUrl);
    } catch {
      throw new Error(`--oidc-issuer '${options.issuer}' / SANDGATE_OIDC_JWKS_URL '${options.jwksUrl}' must be absolute URLs`);
    }
    this.options = options;
  }

  private keySet(): Promise<ReturnType<typeof createRemoteJWKSet>> {
    if (this.keys) return Promise.resolve(this.keys);
    // One discovery at a time; a failed one is retried by the next call.
    this.discovering ??= this.discover().then(
      (url) => (this.keys = createRemoteJWKSet(url, { cooldownDuration: JWKS_COOLDOWN_MS, cacheMaxAge: JWKS_MAX_AGE_MS, timeoutDuration: FETCH_TIMEOUT_MS })),
      (err: unknown) => {
        this.discovering = undefined;
        throw err;
      },
    );
    return this.discovering;
  }

  private async discover(): Promise<URL> {
    if (this.options.jwksUrl) return new URL(this.options.jwksUrl);
    const url = `${this.options.issuer.replace(/\/$/, '')}/.well-known/openid-configuration`;
    let doc: { jwks_uri?: unknown };
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(FETCH_TIMEOUT_MS) });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      doc = (await res.json()) as { jwks_uri?: unknown };
    } catch (err) {
      throw new GatewayError(Code.UNAVAILABLE, `cannot verify OIDC tokens: discovery at ${url} failed (${(err as Error).message})`);
    }
    if (typeof doc.jwks_uri !== 'string') throw new GatewayError(Code.UNAVAILABLE, `cannot verify OIDC tokens: ${url} has no jwks_uri`);
    return new URL(doc.jwks_uri);
  }

  /** The principal of a verified token, or UNAUTHENTICATED "invalid token: …". */
  async verify(token: string): Promise<Principal> {
    // Malformed tokens are refused before the issuer is asked for anything.
    let alg: unknown;
    try {
      alg = decodeProtectedHeader(token).alg;
    } catch {
      throw invalid('not a sandgate API token (sgt_…) nor a well-formed JWT');
    }
    if (typeof alg !== 'string' || !OIDC_ALGORITHMS.includes(alg)) throw invalid(`the token is signed with '${String(alg)}': only ${OIDC_ALGORITHMS.join(', ')} are accepted`);
    const keys = await this.keySet();
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, keys, { issuer: this.options.issuer, audience: this.options.audience, algorithms: OIDC_ALGORITHMS }));
    } catch (err) {
      throw this.explain(err);
    }
    if (typeof payload.sub !== 'string' || payload.sub === '') throw invalid("the token has no 'sub' claim");
    const workspace = claimAt(payload, this.options.workspaceClaim);
    if (workspace !== undefined && (typeof workspace !== 'string' || workspace === '')) {
      throw invalid(`claim '${this.options.workspaceClaim}' must be a non-empty string (the caller's workspace)`);
    }
    const roles = stringList(claimAt(payload, this.options.roleClaim), this.options.roleClaim);
    const scopes = [...stringList(payload.scope, 'scope', / +/), ...stringList(payload.scp, 'scp', / +/)];
    const name = payload.preferred_username;
    return {
      subject: payload.sub,
      displayName: typeof name === 'string' ? name : '',
      provider: 'oidc',
      admin: roles.includes(this.options.adminRole),
      workspace: (workspace as string | undefined) ?? DEFAULT_WORKSPACE,
      roles,
      scopes: [...new Set(scopes)],
    };
  }

  private explain(err: unknown): GatewayError {
    if (err instanceof joseErrors.JWKSTimeout || (err instanceof joseErrors.JOSEError && err.code === 'ERR_JWKS_INVALID')) {
      return new GatewayError(Code.UNAVAILABLE, `cannot verify OIDC tokens: the issuer's key set is unavailable (${err.message})`);
    }
    if (err instanceof joseErrors.JWTExpired) return invalid('the token has expired');
    if (err instanceof joseErrors.JWTClaimValidationFailed) return invalid(`claim '${err.claim}' check failed (${err.reason}): ${err.message}`);
    if (err instanceof joseErrors.JWKSNoMatchingKey) return invalid("no key of the issuer's key set matches the token's key id and algorithm");
    if (err instanceof joseErrors.JOSEAlgNotAllowed) return invalid('the token is not signed with an accepted algorithm (RS*, PS*, ES*, EdDSA)');
    if (err instanceof joseErrors.JWSSignatureVerificationFailed) return invalid('signature verification failed');
    if (err instanceof joseErrors.JOSEError) return invalid(err.message);
    if (err instanceof Error && /fetch failed|ECONNREFUSED/i.test(err.message)) {
      return new GatewayError(Code.UNAVAILABLE, `cannot verify OIDC tokens: fetching the issuer's key set failed (${err.message})`);
    }
    return invalid(err instanceof Error ? err.message : String(err));
  }
}
