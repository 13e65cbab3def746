// `direct-tcpip` channels (what `ssh -L` opens): a TCP connection to a loopback port inside the
// sandbox, spliced to the channel. Other hosts are refused: the SSH server must not become a way
// out of the sandbox's network view.
import net from 'node:net';
import type { AcceptConnection, RejectConnection, ServerChannel, TcpipRequestInfo } from 'ssh2';
import type { Logger } from '../log.ts';
import { loopbackHost, validPort } from './loopback.ts';
import type { ChannelUnit } from './session-channel.ts';

export interface DirectTcpipContext {
  track(unit: ChannelUnit): boolean;
  untrack(unit: ChannelUnit): void;
  log: Logger;
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
  const target = net.connect({ host, port: info.destPort });
  const unit: ChannelUnit = { close: () => target.destroy() };
  if (!ctx.track(unit)) {
    target.destroy();
    return reject();
  }
  let accepted = false;
  target.once('close', () => ctx.untrack(unit));
  target.once('error', () => {
    // Before the connection: the client gets "open failed"; after it: the channel just closes.
    if (!accepted) reject();
  });
  target.once('connect', () => {
    accepted = true;
    const channel = accept();
    if (!channel) return target.destroy();
    target.on('error', () => target.destroy());
    channel.on('error', () => target.destroy());
    // Back-pressure and half-close both ways.
    channel.pipe(target);
    target.pipe(channel);
    channel.once('close', () => target.destroy());
    target.once('close', () => {
      try {
        channel.close();
      } catch {
        // already closed
      }
    });
  });
}
