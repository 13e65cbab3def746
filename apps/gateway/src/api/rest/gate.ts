// The HTTP side of the door: the same Authenticator as every gRPC call, fed the request's
// `authorization` header. The HTTP port asks for no client certificate, so an mTLS identity does
// not reach it: HTTP callers present a bearer token (an API token or an OIDC JWT).
import { Metadata } from '@grpc/grpc-js';
import type { IncomingHttpHeaders } from 'node:http';
import type { Principal } from '@sandgate/core';
import type { Authenticator, AuthContext } from '../../auth/authenticator.ts';

/** The caller of an HTTP request (or a WebSocket upgrade), or a GatewayError UNAUTHENTICATED. */
export function httpCaller(authenticator: Authenticator, headers: IncomingHttpHeaders): Promise<Principal> {
  const metadata = new Metadata();
  const value = headers.authorization;
  if (value !== undefined) metadata.set('authorization', value);
  return authenticator.authenticate({ metadata, authContext: {} as AuthContext });
}
