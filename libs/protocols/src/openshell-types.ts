// TypeScript shapes of the decoded OpenShell messages sandgate touches (see load.ts for the
// conversion rules: snake_case keys, absent scalars undefined, repeated/map always present).

// SandboxPhase lives in contract.ts (one definition for the wire, the store and the domain).

export const ServiceStatus = { UNSPECIFIED: 0, HEALTHY: 1, DEGRADED: 2, UNHEALTHY: 3 } as const;

export type StringMap = Record<string, string>;

export interface ObjectMeta {
  id?: string;
  name?: string;
  created_at_ms?: number;
  labels: StringMap;
  resource_version?: number;
  annotations: StringMap;
  workspace?: string;
  deletion_timestamp_ms?: number;
}

export interface SandboxTemplate {
  image?: string;
  runtime_class_name?: string;
  agent_socket?: string;
  labels: StringMap;
  annotations: StringMap;
  environment: StringMap;
  resources?: Buffer;
  user_namespaces?: boolean;
  driver_config?: Buffer;
}

export interface SandboxSpec {
  log_level?: string;
  environment: StringMap;
  template?: SandboxTemplate;
  policy?: Buffer;
  providers: string[];
  resource_requirements?: Buffer;
  command: string[];
  tty?: boolean;
  restart_policy?: number;
}

export interface SandboxCondition {
  type?: string;
  status?: string;
  reason?: string;
  message?: string;
  last_transition_time?: string;
}

export interface SandboxStatus {
  sandbox_name?: string;
  agent_pod?: string;
  agent_fd?: string;
  sandbox_fd?: string;
  conditions: SandboxCondition[];
  phase?: number;
  current_policy_version?: number;
  main_process_instance_id?: string;
  exit_code?: number;
  restart_count?: number;
  next_restart_at_ms?: number;
  main_process_started_at_ms?: number;
}

export interface Sandbox {
  metadata?: ObjectMeta;
  spec?: SandboxSpec;
  status?: SandboxStatus;
}

export interface CreateSandboxRequest {
  spec?: SandboxSpec;
  name?: string;
  labels: StringMap;
  annotations: StringMap;
  workspace?: string;
}

export interface SandboxResponse {
  sandbox?: Sandbox;
}

export interface GetSandboxRequest {
  name?: string;
  workspace?: string;
}

export interface ListSandboxesRequest {
  limit?: number;
  offset?: number;
  label_selector?: string;
  workspace?: string;
  all_workspaces?: boolean;
}

export interface ListSandboxesResponse {
  sandboxes: Sandbox[];
}

export interface DeleteSandboxRequest {
  name?: string;
  workspace?: string;
}

export interface DeleteSandboxResponse {
  deleted?: boolean;
}

export interface ExecSandboxRequest {
  sandbox_id?: string;
  command: string[];
  workdir?: string;
  environment: StringMap;
  timeout_seconds?: number;
  stdin?: Buffer;
  tty?: boolean;
  cols?: number;
  rows?: number;
}

export interface ExecSandboxEvent {
  stdout?: { data?: Buffer };
  stderr?: { data?: Buffer };
  exit?: { exit_code?: number };
}

export interface ExecSandboxInput {
  start?: ExecSandboxRequest;
  stdin?: Buffer;
  resize?: { cols?: number; rows?: number };
}

export interface HealthResponse {
  status: number;
  version: string;
}

export interface StopSandboxRequest {
  name?: string;
  workspace?: string;
}

export type StartSandboxRequest = StopSandboxRequest;

export interface WatchSandboxRequest {
  id?: string;
  follow_status?: boolean;
  follow_logs?: boolean;
  follow_events?: boolean;
  log_tail_lines?: number;
  event_tail?: number;
  stop_on_terminal?: boolean;
  log_since_ms?: number;
  log_sources: string[];
  log_min_level?: string;
}

export interface SandboxLogLine {
  sandbox_id?: string;
  timestamp_ms?: number;
  level?: string;
  target?: string;
  message?: string;
  source?: string;
  fields: StringMap;
}

export interface SandboxStreamEvent {
  sandbox?: Sandbox;
  log?: SandboxLogLine;
  warning?: { message?: string };
}

export interface GetSandboxLogsRequest {
  sandbox_id?: string;
  lines?: number;
  since_ms?: number;
  sources: string[];
  min_level?: string;
  workspace?: string;
}

export interface GetSandboxLogsResponse {
  logs: SandboxLogLine[];
  buffer_total: number;
}

export interface CreateSshSessionRequest {
  sandbox_id?: string;
}

export interface CreateSshSessionResponse {
  sandbox_id: string;
  token: string;
  gateway_host: string;
  gateway_port: number;
  gateway_scheme: string;
  host_key_fingerprint: string;
  expires_at_ms: number;
}

export interface RevokeSshSessionRequest {
  token?: string;
}

export interface RevokeSshSessionResponse {
  revoked: boolean;
}

export interface TcpForwardInit {
  sandbox_id?: string;
  service_id?: string;
  ssh?: Record<string, never>;
  tcp?: { host?: string; port?: number };
  authorization_token?: string;
}

export interface TcpForwardFrame {
  init?: TcpForwardInit;
  data?: Buffer;
}

// ---- GetGatewayInfo (openshell-v1-wire.md §3.1, §5.1) ----

export interface ComputeDriverInfo {
  name?: string;
  capabilities?: { driver_name?: string; driver_version?: string };
}

export interface GetGatewayInfoResponse {
  status?: number;
  gateway_version?: string;
  compute_drivers: ComputeDriverInfo[];
}

// ---- workspaces (openshell-v1-more.md §10.2) ----

export const WorkspacePhase = { UNSPECIFIED: 0, ACTIVE: 1, TERMINATING: 2 } as const;
/** openshell.v1.WorkspaceRole (open enum: unknown numbers are tolerated on decode). */
export const WorkspaceRoleWire = { UNSPECIFIED: 0, USER: 1, ADMIN: 2 } as const;

export interface Workspace {
  metadata?: ObjectMeta;
  status?: { phase?: number };
}

export interface WorkspaceMember {
  metadata?: ObjectMeta;
  principal_subject?: string;
  role?: number;
}

export interface CreateWorkspaceRequest {
  name?: string;
  labels: StringMap;
}
export interface CreateWorkspaceResponse {
  workspace?: Workspace;
}
export interface GetWorkspaceRequest {
  name?: string;
}
export interface GetWorkspaceResponse {
  workspace?: Workspace;
}
export interface ListWorkspacesRequest {
  limit?: number;
  offset?: number;
  label_selector?: string;
}
export interface ListWorkspacesResponse {
  workspaces: Workspace[];
}
export interface DeleteWorkspaceRequest {
  name?: string;
}
export interface DeleteWorkspaceResponse {
  deleted?: boolean;
}
export interface AddWorkspaceMemberRequest {
  workspace?: string;
  principal_subject?: string;
  role?: number;
}
export interface AddWorkspaceMemberResponse {
  member?: WorkspaceMember;
}
export interface RemoveWorkspaceMemberRequest {
  workspace?: string;
  principal_subject?: string;
}
export interface RemoveWorkspaceMemberResponse {
  removed?: boolean;
}
export interface ListWorkspaceMembersRequest {
  workspace?: string;
  limit?: number;
  offset?: number;
}
export interface ListWorkspaceMembersResponse {
  members: WorkspaceMember[];
}

/** openshell.v1.ServiceEndpoint: one exposed service of a sandbox (openshell-v1-more.md §7.2). */
export interface ServiceEndpoint {
  metadata?: ObjectMeta;
  sandbox_id?: string;
  sandbox_name?: string;
  service_name?: string;
  target_port?: number;
  domain?: boolean;
}

/** openshell.v1.ServiceEndpointResponse: the endpoint and its URL (computed per response). */
export interface ServiceEndpointResponse {
  endpoint?: ServiceEndpoint;
  url?: string;
}

export interface ExposeServiceRequest {
  sandbox?: string;
  service?: string;
  target_port?: number;
  domain?: boolean;
  workspace?: string;
}

export interface GetServiceRequest {
  sandbox?: string;
  service?: string;
  workspace?: string;
}

export interface ListServicesRequest {
  sandbox?: string;
  limit?: number;
  offset?: number;
  workspace?: string;
  all_workspaces?: boolean;
}

export type DeleteServiceRequest = GetServiceRequest;

export interface ListServicesResponse {
  services: ServiceEndpointResponse[];
}

export interface DeleteServiceResponse {
  deleted?: boolean;
}
