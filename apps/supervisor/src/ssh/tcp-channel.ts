// The supervisor's side of `open_tcp`: open the TcpChannel call on the control session's
// connection (so it reaches the same replica), attach, and hand the resulting socket to its
// target — the in-process SSH server, or a loopback port inside the sandbox (its own network
// namespace when isolated: see workload/dial.ts). Nothing listens on the network: the SSH server
// is only reachable this way.
import type { TcpFrame, TcpOpen } from '@sandgate/protocols';
import type { GatewayConnection } from '../control-session.ts';
import type { Logger } from '@sandgate/telemetry/log';
import { ChannelSocket, type TcpChannelCall } from './channel-socket.ts';
import { loopbackHost, validPort } from './loopback.ts';
import { directDial, type Dialer } from '../workload/dial.ts';

export interface TcpChannelDeps {
  /** Takes an SSH connection's socket. */
  acceptSsh(socket: ChannelSocket, channelId: string): void;
  /** Tells the gateway the channel could not be opened (on the control stream). */
  reportFailed(channelId: string, message: string): void;
  log: Logger;
  /** How long a TCP target may take to accept the connection. */
  connectTimeoutMs?: number;
  /**
   * How the sandbox's loopback is reached: with an isolated network, inside its namespace (the
   * netns agent), never the supervisor's own loopback. Default: a plain connect.
   */
  dial?: Dialer;
}

function attach(open: TcpOpen, conn: GatewayConnection): ChannelSocket {
  const call: TcpChannelCall = conn.client.TcpChannel(conn.metadata());
  call.write({ attach: { channel_id: open.channel_id, session_id: conn.sessionId } });
  const socket = new ChannelSocket(call);
  // The control session dying breaks every path through it, as it does for execs: the channel
  // ends with an error, never as if the connection had closed normally.
  const onAbort = () => socket.abort('the supervisor lost its control session; the connection was dropped');
  if (conn.signal.aborted) onAbort();
  else {
    conn.signal.addEventListener('abort', onAbort, { once: true });
    socket.once('close', () => conn.signal.removeEventListener('abort', onAbort));
  }
  return socket;
}

/** Handles one `open_tcp`. Never throws. */
export function openTcpChannel(open: TcpOpen, conn: GatewayConnection, deps: TcpChannelDeps): void {
  const channelId = open.channel_id ?? '';
  if (!channelId) return;
  try {
    if (open.ssh) {
      deps.acceptSsh(attach(open, conn), channelId);
      return;
    }
    const host = loopbackHost(open.tcp?.host ?? '');
    const port = open.tcp?.port;
    if (!host || !validPort(port)) {
      deps.reportFailed(channelId, 'tcp target must be a loopback host and a port between 1 and 65535');
      return;
    }
    // Connect first: a refused port is reported as a failed open, not as a connection that dies.
    (deps.dial ?? directDial)(host, port, deps.connectTimeoutMs ?? 10_000).then(
      (target) => {
        target.on('error', () => target.destroy());
        let socket: ChannelSocket;
        try {
          socket = attach(open, conn);
        } catch (err) {
          target.destroy();
          deps.reportFailed(channelId, err instanceof Error ? err.message : String(err));
          return;
        }
        // pipe() carries back-pressure and half-closes (end) both ways. The channel closing drops
        // the target; the target closing only ends our side (`eof`), so bytes still queued reach
        // the gateway before it closes the channel.
        socket.pipe(target);
        target.pipe(socket);
        socket.once('close', () => target.destroy());
        target.once('close', () => socket.end());
        deps.log.debug('tcp channel opened', { channel_id: channelId, host, port });
      },
      (err: Error) => deps.reportFailed(channelId, `connect ${host}:${port}: ${err.message}`),
    );
  } catch (err) {
    deps.log.warn('tcp channel open failed', { channel_id: channelId, err });
    deps.reportFailed(channelId, err instanceof Error ? err.message : String(err));
  }
}
