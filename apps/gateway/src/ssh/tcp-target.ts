// Pure checks of a ForwardTcp `init` frame: which target, and that a TCP target stays on the
// sandbox's own loopback (ForwardTcp must never become a way to reach other hosts).
import { isIP } from 'node:net';
import { GatewayError, Code } from '@sandgate/core';
import type { TcpForwardInit, TcpOpen } from '@sandgate/protocols';

export type ForwardTarget = { kind: 'ssh' } | { kind: 'tcp'; host: string; port: number };

/** `localhost` becomes 127.0.0.1; loopback literals (127.0.0.0/8, ::1) pass; anything else is null. */
export function normaliseLoopbackHost(raw: string): string | null {
  let host = raw.trim();
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1);
  if (host.toLowerCase() === 'localhost') return '127.0.0.1';
  const family = isIP(host);
  if (family === 4) return host.split('.')[0] === '127' ? host : null;
  if (family === 6) {
    const lower = host.toLowerCase();
    if (lower === '::1' || lower === '0:0:0:0:0:0:0:1') return '::1';
    // ::ffff:127.x.y.z is loopback too.
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(lower);
    return mapped && mapped[1]!.split('.')[0] === '127' ? mapped[1]! : null;
  }
  return null;
}

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
  const host = normaliseLoopbackHost(init.tcp.host ?? '');
  if (!host) throw new GatewayError(Code.INVALID_ARGUMENT, 'tcp target host must be loopback');
  return { sandboxId, target: { kind: 'tcp', host, port } };
}

/** The supervisor protocol's open_tcp for a validated target. */
export function tcpOpenFor(channelId: string, sandboxId: string, target: ForwardTarget, serviceId: string): TcpOpen {
  const open: TcpOpen = { channel_id: channelId, sandbox_id: sandboxId, service_id: serviceId };
  if (target.kind === 'ssh') open.ssh = {};
  else open.tcp = { host: target.host, port: target.port };
  return open;
}
