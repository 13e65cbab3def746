// The door of the public API: every OpenShell call is authenticated before its handler runs, and
// the handler gets the caller (a Principal). The credential kinds (API tokens, OIDC JWTs, mTLS
// client certificates) live beside this file; this is the interface the gate uses.
import type { Metadata, ServerUnaryCall } from '@grpc/grpc-js';

/** grpc-js' TLS facts about a call (not exported by name from the package). */
export type AuthContext = ReturnType<ServerUnaryCall<unknown, unknown>['getAuthContext']>;
import { LOCAL_DEV_PRINCIPAL, type Principal } from '@sandgate/core';

/** What an authenticator sees of a call: its metadata and its TLS facts. */
export interface CallCredentials {
  metadata: Metadata;
  /** grpc-js' view of the transport: the verified client certificate, if the call came over mTLS. */
  authContext: AuthContext;
}

export interface Authenticator {
  /** The caller, or a GatewayError UNAUTHENTICATED saying what is missing or wrong. */
  authenticate(call: CallCredentials): Promise<Principal>;
}

/** `--no-auth`: every caller is upstream's local-dev user (an admin). */
export const noAuthentication: Authenticator = {
  authenticate: async () => LOCAL_DEV_PRINCIPAL,
};
