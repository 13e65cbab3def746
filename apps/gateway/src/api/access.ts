// The access rule, applied by everything that reaches into a running sandbox: exec, attaching to
// the main process, CreateSshSession, ForwardTcp and exposed services. The rule itself (phase × live session) is
// libs/core's decideAccess; this is where the record and the session's liveness are looked up.
import { GatewayError, Code, Phase, decideAccess, notFound, mayUseWorkspace, requestedWorkspace, type Principal } from '@sandgate/core';
import type { Sandbox } from '@sandgate/protocols';
import type { SandboxStore, StoredSandbox, WorkspaceStore } from '@sandgate/store';

export interface AccessDeps {
  store: SandboxStore;
  /** Is the sandbox's supervisor session live anywhere (on this replica or another)? */
  sessionLive(sandboxId: string): Promise<boolean>;
}

/** The sandbox's record if it may be accessed now; NOT_FOUND or FAILED_PRECONDITION otherwise. */
export async function requireAccess(deps: AccessDeps, sandboxId: string, scope: { caller: Principal; workspaces: WorkspaceAccess }): Promise<StoredSandbox> {
  const found = await deps.store.get(sandboxId);
  // Workspace scoping before the phase rule: another workspace's sandbox is NOT_FOUND, never
  // FAILED_PRECONDITION (which would say it exists).
  const record = await scope.workspaces.visible(scope.caller, found);
  await requireServing(deps, record);
  return record;
}

/**
 * The phase half of the rule alone, for a record whose workspace scoping is settled elsewhere
 * (the exposed-service proxy: a signed link carries no caller). FAILED_PRECONDITION when the
 * sandbox is not serving.
 */
export async function requireServing(deps: Pick<AccessDeps, 'sessionLive'>, record: StoredSandbox): Promise<void> {
  const phase = record.sandbox.status?.phase;
  // A Ready sandbox is judged without the session lookup, so the common case costs one read.
  const decision = decideAccess(phase, phase === Phase.READY ? true : await deps.sessionLive(record.sandbox.metadata!.id!));
  if (!decision.allowed) throw new GatewayError(Code.FAILED_PRECONDITION, decision.message);
}

/**
 * Workspace scoping, the rule every sandbox path applies with the caller the gate hands it:
 * a sandbox of a workspace the caller may not use does not exist for it (NOT_FOUND, the same
 * answer as a sandbox that does not exist, so names and ids cannot be probed). The membership
 * is looked up in Redis only when the caller is neither an admin nor in its own workspace.
 */
export class WorkspaceAccess {
  private readonly workspaces: WorkspaceStore;
  constructor(workspaces: WorkspaceStore) {
    this.workspaces = workspaces;
  }

  async mayUse(caller: Principal, workspace: string): Promise<boolean> {
    if (mayUseWorkspace(caller, workspace)) return true;
    return mayUseWorkspace(caller, workspace, await this.workspaces.memberRole(workspace, caller.subject));
  }

  /** The record if the caller may see it; NOT_FOUND if it is absent or of another workspace. */
  async visible<T extends { sandbox: Sandbox }>(caller: Principal, record: T | null): Promise<T> {
    if (!record || !(await this.mayUse(caller, record.sandbox.metadata?.workspace ?? ''))) throw notFound();
    return record;
  }

  /**
   * The workspace a request names (empty: the caller's own), if the caller may use it;
   * PERMISSION_DENIED otherwise (ListSandboxes and CreateSandbox, as upstream's check, §2.4).
   */
  async requireMember(caller: Principal, workspace: string | undefined): Promise<string> {
    const ws = requestedWorkspace(caller, workspace);
    if (!(await this.mayUse(caller, ws))) throw notAMember(ws);
    return ws;
  }
}

/** Upstream's wording (openshell-v1-more.md §2.4), with sandgate's way to fix it. */
export function notAMember(workspace: string): GatewayError {
  return new GatewayError(
    Code.PERMISSION_DENIED,
    `not a member of workspace '${workspace}'; an admin can add you with \`sandgate workspace member add --workspace ${workspace} --subject <your subject> --role user\``,
  );
}
