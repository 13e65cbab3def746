// Who is calling: the identity every public call is authenticated as, and the one rule that says
// which workspaces it may touch. Pure: the authenticators (apps/gateway/src/auth) build principals,
// the services ask `mayUseWorkspace` before reading or writing anything of a workspace.
import { DEFAULT_WORKSPACE } from './limits.ts';
import { isPoolWorkspace } from './pools.ts';

/**
 * How the identity was established. `oidc`, `mtls` and `local_dev` are upstream's values of
 * GetCurrentUserResponse.identity_provider; `api_token` is sandgate's own (`sandgate token`).
 */
export type IdentityProvider = 'api_token' | 'oidc' | 'mtls' | 'local_dev';

/** A caller's role inside a workspace it belongs to. */
export type WorkspaceRole = 'admin' | 'member';

export interface Principal {
  /** Stable identifier: token id (`token:<id>`), OIDC `sub`, certificate CN, or the local-dev subject. */
  subject: string;
  displayName: string;
  provider: IdentityProvider;
  /**
   * Gateway-wide admin: every workspace, `all_workspaces`, workspace management, GetGatewayInfo.
   * An `admin` API token, an OIDC token whose role claim says admin, a certificate whose OU says
   * admin, and the local-dev principal of a `--no-auth` gateway.
   */
  admin: boolean;
  /** The caller's own workspace: what an empty `workspace` field means for this caller. */
  workspace: string;
  /** Role names for GetCurrentUser. */
  roles: string[];
  /** OAuth2 scopes for GetCurrentUser (OIDC only). */
  scopes: string[];
}

/** Every caller of a `--no-auth` gateway: upstream's built-in local-dev user (an admin). */
export const LOCAL_DEV_PRINCIPAL: Principal = Object.freeze({
  subject: 'unauthenticated-local-dev',
  displayName: 'Unauthenticated Local Dev',
  provider: 'local_dev',
  admin: true,
  workspace: DEFAULT_WORKSPACE,
  roles: ['openshell-user', 'openshell-admin'],
  scopes: ['openshell:all'],
}) as Principal;

/** The workspace a request means: its `workspace` field, or the caller's own when empty. */
export function requestedWorkspace(caller: Principal, workspace: string | undefined): string {
  return workspace && workspace.length > 0 ? workspace : caller.workspace;
}

/**
 * May `caller` see and touch what lives in `workspace`? Admins everywhere; anyone in their own
 * workspace; others only with a membership record (`membership`, looked up by the caller when the
 * first two rules do not decide). Nobody, admins included, in a warm pool's workspace: a member
 * is touched by no one before its claim (pools.ts).
 */
export function mayUseWorkspace(caller: Principal, workspace: string, membership: WorkspaceRole | null = null): boolean {
  if (isPoolWorkspace(workspace)) return false;
  return caller.admin || caller.workspace === workspace || membership !== null;
}
