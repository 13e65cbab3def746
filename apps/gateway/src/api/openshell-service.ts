// The public openshell.v1.OpenShell service: binds handlers to the wire; everything else in the
// service answers UNIMPLEMENTED with the method's name. Every method, implemented or not, first
// passes the gate: the call is authenticated (UNAUTHENTICATED otherwise) and the handler is given
// the caller.
import { type UntypedServiceImplementation, type handleUnaryCall, type sendUnaryData, type ServerUnaryCall, type Metadata } from '@grpc/grpc-js';
import { serviceDefinition, ServiceStatus } from '@sandgate/protocols';
import { GatewayError, Code, type Principal } from '@sandgate/core';
import type { AuthContext, Authenticator } from '../auth/authenticator.ts';
import { tracingEnabled, type Logger } from '@sandgate/telemetry';
import { traceCall } from './call-tracing.ts';
import type { SandboxService } from '../sandboxes/sandbox-service.ts';
import type { ExecService } from '../exec/exec-service.ts';
import type { LifecycleService } from '../sandboxes/lifecycle-service.ts';
import type { WatchService } from '../sandboxes/watch-service.ts';
import type { SshService } from '../ssh/ssh-service.ts';
import type { TcpForwardService } from '../ssh/tcp-forward.ts';
import type { ConfigService } from '../sandboxes/config-service.ts';
import { toServiceError } from './grpc-errors.ts';
import type { WorkspaceService } from '../workspaces/workspace-service.ts';
import { gatewayInfo } from './gateway-info.ts';
import type { SandboxMetrics } from '../sandboxes/sandbox-metrics.ts';
import type { GetSandboxUsageRequest, SetPoolRequest } from '@sandgate/protocols';
import type { PoolService } from '../pools/pool-service.ts';
import type { ServiceEndpointService, ServiceLinkRequest } from '../services/service-endpoints.ts';
import type { FileService } from '../files/file-service.ts';
import { downloadFileHandler, uploadFileHandler } from '../files/file-grpc.ts';

export const openShellDefinition = serviceDefinition('openshell.v1.OpenShell');

export const GATEWAY_VERSION = '0.1.0';

type GatedCall = { metadata: Metadata; getAuthContext(): AuthContext };

function unary<Req, Res>(log: Logger, fn: (req: Req, caller: Principal) => Promise<Res>): (call: ServerUnaryCall<Req, Res>, callback: sendUnaryData<Res>, caller: Principal) => void {
  return (call, callback, caller) => {
    fn(call.request, caller).then(
      (res) => callback(null, res),
      (err: unknown) => callback(toServiceError(err, log)),
    );
  };
}

/**
 * Wraps a handler that takes the caller as its last argument into a plain grpc-js handler that
 * authenticates first. A refused call is failed through its callback (unary and client-streaming)
 * or its 'error' event (server-streaming and bidi), before the handler sees any of it.
 */
function gated(fullMethod: string, authenticator: Authenticator, log: Logger, respondsByCallback: boolean, handler: (call: never, callback: never, caller: Principal) => void) {
  const plain = (call: GatedCall & { emit(e: 'error', v: unknown): void }, callback?: sendUnaryData<unknown>) => {
    authenticator.authenticate({ metadata: call.metadata, authContext: call.getAuthContext() }).then(
      (caller) => (handler as (c: unknown, cb: unknown, p: Principal) => void)(call, callback, caller),
      (err: unknown) => {
        const e = toServiceError(err, log);
        if (respondsByCallback) callback!(e);
        else call.emit('error', e);
      },
    );
  };
  // Every public call gets its SERVER span here (the caller's traceparent as parent), around the
  // gate too; a flag check only while tracing is off.
  return (call: GatedCall & { emit(e: 'error', v: unknown): void }, callback?: sendUnaryData<unknown>) => {
    if (!tracingEnabled()) return plain(call, callback);
    traceCall(fullMethod, call as never, callback, respondsByCallback, plain as never);
  };
}

const openShellServiceName = 'openshell.v1.OpenShell';

export function openShellImplementation(
  authenticator: Authenticator,
  sandboxes: SandboxService,
  exec: ExecService,
  lifecycle: LifecycleService,
  watch: WatchService,
  log: Logger,
  ssh?: { sessions: SshService; forward: TcpForwardService },
  config?: ConfigService,
  door?: { workspaces: WorkspaceService; driverName: string },
  services?: ServiceEndpointService,
): UntypedServiceImplementation {
  // Handlers before the gate: each takes (call, callback, caller) or (call, caller).
  const implemented: Record<string, (call: never, callback: never, caller: Principal) => void> = {
    Health: unary(log, async () => ({ status: ServiceStatus.HEALTHY, version: GATEWAY_VERSION })),
    GetCurrentUser: unary(log, async (_req: unknown, caller: Principal) => currentUser(caller)),
    CreateSandbox: unary(log, (req: Parameters<SandboxService['create']>[0], caller) => sandboxes.create(req, caller)),
    GetSandbox: unary(log, (req: Parameters<SandboxService['get']>[0], caller) => sandboxes.get(req, caller)),
    ListSandboxes: unary(log, (req: Parameters<SandboxService['list']>[0], caller) => sandboxes.list(req, caller)),
    DeleteSandbox: unary(log, (req: Parameters<SandboxService['delete']>[0], caller) => sandboxes.delete(req, caller)),
    StopSandbox: unary(log, (req: Parameters<LifecycleService['stop']>[0], caller) => lifecycle.stop(req, caller)),
    StartSandbox: unary(log, (req: Parameters<LifecycleService['start']>[0], caller) => lifecycle.start(req, caller)),
    WatchSandbox: (call: Parameters<WatchService['handleWatch']>[0], _cb: unknown, caller: Principal) => watch.handleWatch(call, caller),
    GetSandboxLogs: unary(log, (req: Parameters<WatchService['getLogs']>[0], caller) => watch.getLogs(req, caller)),
    ExecSandbox: (call: Parameters<ExecService['handleUnary']>[0], _cb: unknown, caller: Principal) => exec.handleUnary(call, caller),
    ExecSandboxInteractive: (call: Parameters<ExecService['handleInteractive']>[0], _cb: unknown, caller: Principal) => exec.handleInteractive(call, caller),
  };
  if (ssh) {
    implemented.CreateSshSession = unary(log, (req: Parameters<SshService['create']>[0], caller) => ssh.sessions.create(req, caller));
    implemented.RevokeSshSession = unary(log, (req: Parameters<SshService['revoke']>[0], caller) => ssh.sessions.revoke(req, caller));
    implemented.ForwardTcp = (call: Parameters<TcpForwardService['handleForward']>[0], _cb: unknown, caller: Principal) => ssh.forward.handleForward(call, caller);
  }
  if (config) {
    implemented.GetSandboxConfig = unary(log, (req: Parameters<ConfigService['getSandboxConfig']>[0], caller) => config.getSandboxConfig(req, caller));
    implemented.UpdateConfig = unary(log, (req: Parameters<ConfigService['updateConfig']>[0], caller) => config.updateConfig(req, caller));
  }
  if (door) {
    const ws = door.workspaces;
    implemented.GetGatewayInfo = unary(log, async (_req: unknown, caller) => gatewayInfo(caller, GATEWAY_VERSION, door.driverName));
    implemented.CreateWorkspace = unary(log, (req: Parameters<WorkspaceService['create']>[0], caller) => ws.create(req, caller));
    implemented.GetWorkspace = unary(log, (req: Parameters<WorkspaceService['get']>[0], caller) => ws.get(req, caller));
    implemented.ListWorkspaces = unary(log, (req: Parameters<WorkspaceService['list']>[0], caller) => ws.list(req, caller));
    implemented.DeleteWorkspace = unary(log, (req: Parameters<WorkspaceService['delete']>[0], caller) => ws.delete(req, caller));
    implemented.AddWorkspaceMember = unary(log, (req: Parameters<WorkspaceService['addMember']>[0], caller) => ws.addMember(req, caller));
    implemented.RemoveWorkspaceMember = unary(log, (req: Parameters<WorkspaceService['removeMember']>[0], caller) => ws.removeMember(req, caller));
    implemented.ListWorkspaceMembers = unary(log, (req: Parameters<WorkspaceService['listMembers']>[0], caller) => ws.listMembers(req, caller));
  }
  if (services) {
    implemented.ExposeService = unary(log, (req: Parameters<ServiceEndpointService['expose']>[0], caller) => services.expose(req, caller));
    implemented.GetService = unary(log, (req: Parameters<ServiceEndpointService['get']>[0], caller) => services.get(req, caller));
    implemented.ListServices = unary(log, (req: Parameters<ServiceEndpointService['list']>[0], caller) => services.list(req, caller));
    implemented.DeleteService = unary(log, (req: Parameters<ServiceEndpointService['delete']>[0], caller) => services.delete(req, caller));
  }
  const service: UntypedServiceImplementation = {};
  for (const method of Object.keys(openShellDefinition)) {
    const def = openShellDefinition[method]!;
    let handler = implemented[method];
    if (!handler) {
      const err = new GatewayError(Code.UNIMPLEMENTED, `method ${method} is not implemented by sandgate yet`);
      handler = unimplementedHandler(def.requestStream, def.responseStream, err, log) as never;
    }
    service[method] = gated(`${openShellServiceName}/${method}`, authenticator, log, !def.responseStream, handler as never) as never;
  }
  return service;
}

export const sandgateDefinition = serviceDefinition('sandgate.v1.Sandgate');

/** sandgate.v1.Sandgate, sandgate's own public calls: behind the same gate as OpenShell's. */
export function sandgateImplementation(
  authenticator: Authenticator,
  log: Logger,
  usage: SandboxMetrics,
  services?: ServiceEndpointService,
  files?: FileService,
  pools?: PoolService,
): UntypedServiceImplementation {
  const out: UntypedServiceImplementation = {
    GetSandboxUsage: gated('sandgate.v1.Sandgate/GetSandboxUsage', authenticator, log, true, unary(log, (req: GetSandboxUsageRequest, caller) => usage.getUsage(req, caller)) as never) as never,
  };
  if (pools) {
    // Warm pools (pools/pool-service.ts): gateway admins only, checked by the service.
    out.SetPool = gated('sandgate.v1.Sandgate/SetPool', authenticator, log, true, unary(log, (req: SetPoolRequest, caller) => pools.set(req, caller)) as never) as never;
    out.ListPools = gated('sandgate.v1.Sandgate/ListPools', authenticator, log, true, unary(log, (_req: object, caller) => pools.list(caller)) as never) as never;
    out.DeletePool = gated('sandgate.v1.Sandgate/DeletePool', authenticator, log, true, unary(log, (req: { name?: string }, caller) => pools.delete(req.name, caller)) as never) as never;
  }
  if (services) {
    out.CreateServiceLink = gated(
      'sandgate.v1.Sandgate/CreateServiceLink',
      authenticator,
      log,
      true,
      unary(log, (req: ServiceLinkRequest, caller) => services.createLink(req, caller)) as never,
    ) as never;
  }
  if (files) {
    // File transfers (files/file-grpc.ts), behind the same gate.
    out.UploadFile = gated('sandgate.v1.Sandgate/UploadFile', authenticator, log, true, uploadFileHandler(files, log) as never) as never;
    out.DownloadFile = gated('sandgate.v1.Sandgate/DownloadFile', authenticator, log, false, downloadFileHandler(files, log) as never) as never;
  }
  return out;
}

/** GetCurrentUserResponse: the identity the gate established (upstream's field sources). */
export function currentUser(caller: Principal) {
  return {
    subject: caller.subject,
    display_name: caller.displayName,
    roles: caller.roles,
    scopes: caller.scopes,
    identity_provider: caller.provider,
  };
}

function unimplementedHandler(requestStream: boolean, responseStream: boolean, err: GatewayError, log: Logger) {
  if (!requestStream && !responseStream) {
    return (_call: unknown, callback: sendUnaryData<unknown>) => callback(toServiceError(err, log));
  }
  if (requestStream && !responseStream) {
    return (_call: unknown, callback: sendUnaryData<unknown>) => callback(toServiceError(err, log));
  }
  return (call: { emit(e: 'error', v: unknown): void }) => call.emit('error', toServiceError(err, log));
}
