// The seven workspace RPCs (openshell-v1-more.md §10) with upstream's checks, order, messages and
// status codes. Who may: creating and deleting workspaces needs a gateway admin; reading one, or
// its members, needs a caller that may use it (admin, its own workspace, or a membership);
// membership writes need a gateway admin or an ADMIN membership in the workspace, and only a
// gateway admin may grant ADMIN. As upstream, authorization runs before the existence check, so a
// non-member cannot probe which workspaces exist.
import {
  Code,
  DEFAULT_WORKSPACE,
  GatewayError,
  invalid,
  matchesSelector,
  mayUseWorkspace,
  parseLabelSelector,
  requestedWorkspace,
  validateLabels,
  validateWorkspaceName,
  workspacePageLimit,
  type Principal,
  type WorkspaceRole,
} from '@sandgate/core';
import {
  WorkspacePhase,
  WorkspaceRoleWire,
  type AddWorkspaceMemberRequest,
  type AddWorkspaceMemberResponse,
  type CreateWorkspaceRequest,
  type CreateWorkspaceResponse,
  type DeleteWorkspaceRequest,
  type DeleteWorkspaceResponse,
  type GetWorkspaceRequest,
  type GetWorkspaceResponse,
  type ListWorkspaceMembersRequest,
  type ListWorkspaceMembersResponse,
  type ListWorkspacesRequest,
  type ListWorkspacesResponse,
  type RemoveWorkspaceMemberRequest,
  type RemoveWorkspaceMemberResponse,
  type Workspace,
  type WorkspaceMember,
} from '@sandgate/protocols';
import type { WorkspaceMemberRecord, WorkspaceRecord, WorkspaceStore } from '@sandgate/store';
import type { Logger } from '@sandgate/telemetry';
import { notAMember } from '../api/access.ts';

export interface WorkspaceServiceDeps {
  workspaces: WorkspaceStore;
  log: Logger;
}

export function toWireWorkspace(rec: WorkspaceRecord): Workspace {
  return {
    metadata: {
      id: rec.id,
      name: rec.name,
      created_at_ms: rec.createdAtMs,
      labels: rec.labels,
      resource_version: rec.resourceVersion,
      annotations: {},
      deletion_timestamp_ms: rec.deletedAtMs,
    },
    status: { phase: rec.phase === 'terminating' ? WorkspacePhase.TERMINATING : WorkspacePhase.ACTIVE },
  };
}

export function toWireMember(m: WorkspaceMemberRecord): WorkspaceMember {
  return {
    metadata: { id: m.id, name: m.subject, created_at_ms: m.createdAtMs, workspace: m.workspace, resource_version: 1, labels: {}, annotations: {} },
    principal_subject: m.subject,
    role: m.role === 'admin' ? WorkspaceRoleWire.ADMIN : WorkspaceRoleWire.USER,
  };
}

const adminRequired = (what: string) => new GatewayError(Code.PERMISSION_DENIED, `${what} requires a gateway admin (an admin token or the OIDC admin role)`);

export class WorkspaceService {
  private readonly deps: WorkspaceServiceDeps;
  constructor(deps: WorkspaceServiceDeps) {
    this.deps = deps;
  }

  async create(req: CreateWorkspaceRequest, caller: Principal): Promise<CreateWorkspaceResponse> {
    if (!caller.admin) throw adminRequired('CreateWorkspace');
    const name = req.name ?? '';
    validateWorkspaceName(name);
    validateLabels(req.labels ?? {});
    const rec = await this.deps.workspaces.create(name, req.labels ?? {});
    if (!rec) throw new GatewayError(Code.ALREADY_EXISTS, 'workspace already exists');
    this.deps.log.info('workspace created', { workspace: name, by: caller.subject });
    return { workspace: toWireWorkspace(rec) };
  }

  async get(req: GetWorkspaceRequest, caller: Principal): Promise<GetWorkspaceResponse> {
    const name = req.name ?? '';
    if (!name) throw invalid('name is required');
    await this.authorize(caller, name, 'member');
    const rec = await this.deps.workspaces.get(name);
    if (!rec) throw new GatewayError(Code.NOT_FOUND, 'workspace not found');
    return { workspace: toWireWorkspace(rec) };
  }

  async list(req: ListWorkspacesRequest, caller: Principal): Promise<ListWorkspacesResponse> {
    const selector = parseLabelSelector(req.label_selector);
    const limit = workspacePageLimit(req.limit);
    const offset = req.offset ?? 0;
    const all = await this.deps.workspaces.list();
    const memberOf = caller.admin ? null : await this.deps.workspaces.workspacesOf(caller.subject);
    const visible = all
      .filter((w) => memberOf === null || mayUseWorkspace(caller, w.name, memberOf.has(w.name) ? 'member' : null))
      .filter((w) => matchesSelector(w.labels, selector));
    return { workspaces: visible.slice(offset, offset + limit).map(toWireWorkspace) };
  }

  async delete(req: DeleteWorkspaceRequest, caller: Principal): Promise<DeleteWorkspaceResponse> {
    if (!caller.admin) throw adminRequired('DeleteWorkspace');
    const name = req.name ?? '';
    if (!name) throw invalid('name is required');
    if (name === DEFAULT_WORKSPACE) throw new GatewayError(Code.FAILED_PRECONDITION, 'the default workspace cannot be deleted');
    const result = await this.deps.workspaces.delete(name);
    if (result === 'not-found') throw new GatewayError(Code.NOT_FOUND, `workspace '${name}' not found`);
    if (result === 'holds-sandboxes') {
      throw new GatewayError(Code.FAILED_PRECONDITION, `workspace '${name}' still contains resources: sandbox`);
    }
    this.deps.log.info('workspace deleted', { workspace: name, by: caller.subject });
    return { deleted: true };
  }

  async addMember(req: AddWorkspaceMemberRequest, caller: Principal): Promise<AddWorkspaceMemberResponse> {
    const workspace = requestedWorkspace(caller, req.workspace);
    await this.authorize(caller, workspace, 'admin');
    const rec = await this.deps.workspaces.get(workspace);
    if (!rec) throw new GatewayError(Code.NOT_FOUND, `workspace '${workspace}' not found`);
    if (rec.phase === 'terminating') throw new GatewayError(Code.FAILED_PRECONDITION, `workspace '${workspace}' is being deleted`);
    const subject = req.principal_subject ?? '';
    if (!subject) throw invalid('principal_subject is required');
    const role = roleFromWire(req.role);
    if (role === 'admin' && !caller.admin) throw new GatewayError(Code.PERMISSION_DENIED, 'only platform admins can assign the workspace admin role');
    const added = await this.deps.workspaces.addMember(workspace, subject, role);
    if (added.ok) {
      this.deps.log.info('workspace member added', { workspace, subject, role, by: caller.subject });
      return { member: toWireMember(added.member) };
    }
    switch (added.reason) {
      case 'exists':
        throw new GatewayError(Code.ALREADY_EXISTS, 'member already exists in this workspace');
      case 'at-cap':
        throw new GatewayError(Code.RESOURCE_EXHAUSTED, 'workspace has reached the maximum of 1000 members');
      case 'terminating':
        throw new GatewayError(Code.FAILED_PRECONDITION, `workspace '${workspace}' is being deleted`);
      default:
        throw new GatewayError(Code.NOT_FOUND, `workspace '${workspace}' not found`);
    }
  }

  async removeMember(req: RemoveWorkspaceMemberRequest, caller: Principal): Promise<RemoveWorkspaceMemberResponse> {
    const workspace = requestedWorkspace(caller, req.workspace);
    await this.authorize(caller, workspace, 'admin');
    if (!(await this.deps.workspaces.get(workspace))) throw new GatewayError(Code.NOT_FOUND, `workspace '${workspace}' not found`);
    const subject = req.principal_subject ?? '';
    if (!subject) throw invalid('principal_subject is required');
    const removed = await this.deps.workspaces.removeMember(workspace, subject);
    if (removed) this.deps.log.info('workspace member removed', { workspace, subject, by: caller.subject });
    return { removed };
  }

  async listMembers(req: ListWorkspaceMembersRequest, caller: Principal): Promise<ListWorkspaceMembersResponse> {
    const workspace = requestedWorkspace(caller, req.workspace);
    await this.authorize(caller, workspace, 'member');
    if (!(await this.deps.workspaces.get(workspace))) throw new GatewayError(Code.NOT_FOUND, `workspace '${workspace}' not found`);
    const limit = workspacePageLimit(req.limit);
    const offset = req.offset ?? 0;
    const members = await this.deps.workspaces.listMembers(workspace);
    return { members: members.slice(offset, offset + limit).map(toWireMember) };
  }

  /**
   * Upstream's workspace check (§2.4) with sandgate's principals: a gateway admin passes; for
   * `member`, the caller's own workspace or any membership passes; for `admin`, only an ADMIN
   * membership does (a member token is not an admin of its own workspace).
   */
  private async authorize(caller: Principal, workspace: string, min: WorkspaceRole): Promise<void> {
    if (caller.admin) return;
    const role = await this.deps.workspaces.memberRole(workspace, caller.subject);
    if (min === 'member') {
      if (!mayUseWorkspace(caller, workspace, role)) throw notAMember(workspace);
      return;
    }
    if (role === 'admin') return;
    if (role === null && caller.workspace !== workspace) throw notAMember(workspace);
    throw new GatewayError(
      Code.PERMISSION_DENIED,
      `workspace role 'admin' required in workspace '${workspace}'; a gateway admin can grant it with \`sandgate workspace member add --workspace ${workspace} --subject ${caller.subject} --role admin\``,
    );
  }
}

/** USER or ADMIN; 0 and numbers outside the enum are refused (§10.8). */
function roleFromWire(role: number | undefined): WorkspaceRole {
  if (role === WorkspaceRoleWire.USER) return 'member';
  if (role === WorkspaceRoleWire.ADMIN) return 'admin';
  throw invalid('role must be USER or ADMIN, not UNSPECIFIED');
}
