// `direct-tcpip` channels (what `ssh -L` opens): a TCP connection to a loopback port inside the
// sandbox, spliced to the channel. Other hosts are refused: the SSH server must not become a way
// out of the sandbox's network view. With an isolated network the sandbox's loopback is its own
// namespace's, so the connection is made there (ctx.dial, through the netns agent), never on the
// supervisor's loopback, where the gateway and other sandboxes' ports live.
import type net from 'node:net';
import type { AcceptConnection, RejectConnection, ServerChannel, TcpipRequestInfo } from 'ssh2';
import type { Logger } from '@sandgate/telemetry/log';
import { directDial, type Dialer } from '../workload/dial.ts';
import { loopbackHost, validPort } from './loopback.ts';
import type { ChannelUnit } from './session-channel.ts';

const CONNECT_TIMEOUT_MS = 10_000;

export interface DirectTcpipContext {
  track(unit: ChannelUnit): boolean;
  untrack(unit: ChannelUnit): void;
  log: Logger;
  /** Default: a plain connect (no network isolation). */
  dial?: Dialer;
}

export function handleDirectTcpip(
  accept: AcceptConnection<ServerChannel>,
  reject: RejectConnection,
  info: TcpipRequestInfo,
  ctx: DirectTcpipContext,
): void {
  const host = loopbackHost(info.destIP);
  if (!host || !validPort(info.destPort)) {
    ctx.log.info('direct-tcpip refused: not a loopback target', { host: info.destIP, port: info.destPort });
    return reject();
  }
  let target: net.Socket | undefined;
  let closed = false;
  const unit: ChannelUnit = {
    close: () => {
      closed = true;
      target?.destroy();
    },
  };
  if (!ctx.track(unit)) return reject();
  (ctx.dial ?? directDial)(host, info.destPort, CONNECT_TIMEOUT_MS).then(
    (socket) => {
      target = socket;
      socket.once('close', () => ctx.untrack(unit));
      socket.on('error', () => socket.destroy());
      if (closed) return socket.destroy();
      const channel = accept();
      if (!channel) return socket.destroy();
      channel.on('error', () => socket.destroy());
      // Back-pressure and half-close both ways.
      channel.pipe(socket);
      socket.pipe(channel);
      channel.once('close', () => socket.destroy());
      socket.once('close', () => {
        try {
          channel.close();
        } catch {
          // already closed
        }
      });
      // The dialled socket may have been handed over paused (netns agent): start the flow.
      socket.resume();
    },
    (err: Error) => {
      ctx.untrack(unit);
      ctx.log.debug('direct-tcpip connect failed', { host, port: info.destPort, err: err.message });
      // Before the connection: the client gets "open failed".
      if (!closed) reject();
    },
  );
}
