// The authentication chain of the public API, in upstream's order: a bearer token decides alone
// (an `sgt_` API token, else an OIDC JWT); a bad bearer is refused and never falls through to the
// client certificate. Without a bearer, a client certificate verified against --client-ca is the
// caller; without either, the call is refused saying what to send.
import { Code, GatewayError, type Principal } from '@sandgate/core';
import { API_TOKEN_PREFIX, TokenStore, type RedisClient } from '@sandgate/store';
import type { Logger } from '@sandgate/telemetry';
import type { ReplicaConfig } from '../config.ts';
import { noAuthentication, type Authenticator, type CallCredentials } from './authenticator.ts';
import { ApiTokenAuthenticator } from './api-tokens.ts';
import { OidcVerifier } from './oidc.ts';
import { certificatePrincipal, loadClientCa } from './mtls.ts';
import { X509Certificate } from 'node:crypto';

type AuthConfig = Pick<ReplicaConfig, 'auth' | 'clientCa' | 'oidcIssuer' | 'oidcAudience' | 'oidcJwksUrl' | 'oidcWorkspaceClaim' | 'oidcRoleClaim' | 'oidcAdminRole'>;

export const MISSING_CREDENTIALS =
  'missing authorization header: send `authorization: Bearer <token>` (an API token from `sandgate token create`, or an OIDC token), or a client certificate of the --client-ca';

const unauthenticated = (message: string) => new GatewayError(Code.UNAUTHENTICATED, message);

/**
 * The bearer token of a call, undefined when there is no authorization header. OpenShell's SDKs
 * send `authorization: Bearer <token>`; the scheme is case-insensitive (RFC 9110).
 */
export function bearerToken(call: CallCredentials): string | undefined {
  const values = call.metadata.get('authorization');
  if (values.length === 0) return undefined;
  if (values.length > 1) throw unauthenticated('invalid token: more than one authorization header');
  const value = values[0];
  if (typeof value !== 'string') throw unauthenticated('invalid token: the authorization header must be text');
  const match = /^\s*bearer\s+(\S+)\s*$/i.exec(value);
  if (!match) throw unauthenticated('invalid token: the authorization header must be `Bearer <token>`');
  return match[1]!;
}

export class ChainAuthenticator implements Authenticator {
  private readonly tokens: ApiTokenAuthenticator;
  private readonly oidc: OidcVerifier | undefined;
  private readonly clientCas: X509Certificate[];

  constructor(tokens: ApiTokenAuthenticator, oidc: OidcVerifier | undefined, clientCas: X509Certificate[]) {
    this.tokens = tokens;
    this.oidc = oidc;
    this.clientCas = clientCas;
  }

  async authenticate(call: CallCredentials): Promise<Principal> {
    const token = bearerToken(call);
    if (token !== undefined) {
      if (token.startsWith(API_TOKEN_PREFIX)) return this.tokens.verify(token);
      if (this.oidc) return this.oidc.verify(token);
      throw unauthenticated(`invalid token: not a sandgate API token (${API_TOKEN_PREFIX}…), and OIDC is not configured on this gateway`);
    }
    const peer = this.clientCas.length > 0 ? call.authContext?.sslPeerCertificate : undefined;
    if (peer?.raw) {
      let cert: X509Certificate;
      try {
        cert = new X509Certificate(peer.raw);
      } catch {
        throw unauthenticated('client certificate refused: it cannot be parsed');
      }
      return certificatePrincipal(cert, this.clientCas);
    }
    throw unauthenticated(MISSING_CREDENTIALS);
  }
}

/** The chain for an auth-on replica. Throws (the replica does not start) on unusable OIDC or mTLS settings. */
export function createAuthenticator(config: AuthConfig, deps: { redis: RedisClient; log: Logger }): Authenticator {
  const oidc = config.oidcIssuer
    ? new OidcVerifier({
        issuer: config.oidcIssuer,
        audience: config.oidcAudience,
        jwksUrl: config.oidcJwksUrl,
        workspaceClaim: config.oidcWorkspaceClaim,
        roleClaim: config.oidcRoleClaim,
        adminRole: config.oidcAdminRole,
      })
    : undefined;
  if (!config.oidcIssuer && config.oidcAudience) throw new Error('--oidc-audience was given without --oidc-issuer: set the issuer too, or drop the audience');
  const clientCas = config.clientCa ? loadClientCa(config.clientCa) : [];
  // No way in yet is fine: tokens can be created at any time (`sandgate token create`).
  deps.log.info('authentication on', {
    apiTokens: true,
    oidc: oidc ? config.oidcIssuer : false,
    mtls: clientCas.length > 0,
  });
  return new ChainAuthenticator(new ApiTokenAuthenticator(new TokenStore(deps.redis)), oidc, clientCas);
}

/** What replica.ts serves: the chain, or, with an explicit --no-auth, everyone as an admin (loudly). */
export function authenticatorFor(config: AuthConfig, deps: { redis: RedisClient; log: Logger }): Authenticator {
  if (config.auth) return createAuthenticator(config, deps);
  deps.log.warn('authentication is OFF (--no-auth): every caller that reaches the gRPC port is an admin of every workspace');
  return noAuthentication;
}
