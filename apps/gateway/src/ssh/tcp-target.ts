// Pure checks of a ForwardTcp `init` frame: which target, and that a TCP target stays on the
// sandbox's own loopback (ForwardTcp must never become a way to reach other hosts).
import { GatewayError, Code } from '@sandgate/core';
import { loopbackHost, type TcpForwardInit, type TcpOpen } from '@sandgate/protocols';
import { injectContext } from '@sandgate/telemetry';

export type ForwardTarget = { kind: 'ssh' } | { kind: 'tcp'; host: string; port: number };

/** The init's sandbox id and target, or INVALID_ARGUMENT saying what is wrong. */
export function validateForwardInit(init: TcpForwardInit): { sandboxId: string; target: ForwardTarget } {
  const sandboxId = init.sandbox_id ?? '';
  if (!sandboxId) throw new GatewayError(Code.INVALID_ARGUMENT, 'sandbox_id is required');
  if (init.ssh) return { sandboxId, target: { kind: 'ssh' } };
  if (!init.tcp) throw new GatewayError(Code.INVALID_ARGUMENT, 'tcp forward target is required');
  const port = init.tcp.port ?? 0;
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new GatewayError(Code.INVALID_ARGUMENT, 'tcp target port must be between 1 and 65535');
  }
  const host = loopbackHost(init.tcp.host ?? '');
  if (!host) throw new GatewayError(Code.INVALID_ARGUMENT, 'tcp target host must be loopback');
  return { sandboxId, target: { kind: 'tcp', host, port } };
}

/** The supervisor protocol's open_tcp for a validated target. */
export function tcpOpenFor(channelId: string, sandboxId: string, target: ForwardTarget, serviceId: string): TcpOpen {
  const open: TcpOpen = { channel_id: channelId, sandbox_id: sandboxId, service_id: serviceId };
  // The calling span's context (ForwardTcp's, or the SSH session's): on to the owner and the supervisor.
  const trace = injectContext();
  if (trace.traceparent) open.trace_context = trace;
  if (target.kind === 'ssh') open.ssh = {};
  else open.tcp = { host: target.host, port: target.port };
  return open;
}
