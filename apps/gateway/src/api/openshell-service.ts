// The public openshell.v1.OpenShell service: binds handlers to the wire; everything else in the
// service answers UNIMPLEMENTED with the method's name.
import { type UntypedServiceImplementation, type handleUnaryCall, type sendUnaryData, type ServerUnaryCall } from '@grpc/grpc-js';
import { serviceDefinition, ServiceStatus } from '@sandgate/protocols';
import { GatewayError, Code } from '@sandgate/core';
import type { Logger } from '@sandgate/telemetry';
import type { SandboxService } from '../sandboxes/sandbox-service.ts';
import type { ExecService } from '../exec/exec-service.ts';
import type { LifecycleService } from '../sandboxes/lifecycle-service.ts';
import type { WatchService } from '../sandboxes/watch-service.ts';
import type { SshService } from '../ssh/ssh-service.ts';
import type { TcpForwardService } from '../ssh/tcp-forward.ts';
import type { ConfigService } from '../sandboxes/config-service.ts';
import { toServiceError } from './grpc-errors.ts';

export const openShellDefinition = serviceDefinition('openshell.v1.OpenShell');

export const GATEWAY_VERSION = '0.1.0';

function unary<Req, Res>(log: Logger, fn: (req: Req) => Promise<Res>): handleUnaryCall<Req, Res> {
  return (call: ServerUnaryCall<Req, Res>, callback: sendUnaryData<Res>) => {
    fn(call.request).then(
      (res) => callback(null, res),
      (err: unknown) => callback(toServiceError(err, log)),
    );
  };
}

export function openShellImplementation(
  sandboxes: SandboxService,
  exec: ExecService,
  lifecycle: LifecycleService,
  watch: WatchService,
  log: Logger,
  ssh?: { sessions: SshService; forward: TcpForwardService },
  config?: ConfigService,
): UntypedServiceImplementation {
  const implemented: UntypedServiceImplementation = {
    Health: unary(log, async () => ({ status: ServiceStatus.HEALTHY, version: GATEWAY_VERSION })),
    CreateSandbox: unary(log, (req: Parameters<SandboxService['create']>[0]) => sandboxes.create(req)),
    GetSandbox: unary(log, (req: Parameters<SandboxService['get']>[0]) => sandboxes.get(req)),
    ListSandboxes: unary(log, (req: Parameters<SandboxService['list']>[0]) => sandboxes.list(req)),
    DeleteSandbox: unary(log, (req: Parameters<SandboxService['delete']>[0]) => sandboxes.delete(req)),
    StopSandbox: unary(log, (req: Parameters<LifecycleService['stop']>[0]) => lifecycle.stop(req)),
    StartSandbox: unary(log, (req: Parameters<LifecycleService['start']>[0]) => lifecycle.start(req)),
    WatchSandbox: (call: Parameters<WatchService['handleWatch']>[0]) => watch.handleWatch(call),
    GetSandboxLogs: unary(log, (req: Parameters<WatchService['getLogs']>[0]) => watch.getLogs(req)),
    ExecSandbox: (call: Parameters<ExecService['handleUnary']>[0]) => exec.handleUnary(call),
    ExecSandboxInteractive: (call: Parameters<ExecService['handleInteractive']>[0]) => exec.handleInteractive(call),
  };
  if (ssh) {
    implemented.CreateSshSession = unary(log, (req: Parameters<SshService['create']>[0]) => ssh.sessions.create(req));
    implemented.RevokeSshSession = unary(log, (req: Parameters<SshService['revoke']>[0]) => ssh.sessions.revoke(req));
    implemented.ForwardTcp = (call: Parameters<TcpForwardService['handleForward']>[0]) => ssh.forward.handleForward(call);
  }
  if (config) {
    implemented.GetSandboxConfig = unary(log, (req: Parameters<ConfigService['getSandboxConfig']>[0]) => config.getSandboxConfig(req));
    implemented.UpdateConfig = unary(log, (req: Parameters<ConfigService['updateConfig']>[0]) => config.updateConfig(req));
  }
  for (const method of Object.keys(openShellDefinition)) {
    if (implemented[method]) continue;
    const def = openShellDefinition[method]!;
    const err = new GatewayError(Code.UNIMPLEMENTED, `method ${method} is not implemented by sandgate yet`);
    implemented[method] = unimplementedHandler(def.requestStream, def.responseStream, err, log);
  }
  return implemented;
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
