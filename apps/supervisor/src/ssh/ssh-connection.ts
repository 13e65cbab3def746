// One SSH connection to the supervisor's SSH server, and the one rule that keeps shells from
// being orphaned: everything its channels started is tracked here, and when the connection ends
// — cleanly, by error, by keepalive timeout, or because the relay under it broke — every channel
// is closed as if the client had closed it, which kills each process tree. This is keyed to the
// connection's own end/close/error, not only to per-channel events: on an abrupt socket loss ssh2
// does not emit a close for every channel.
import { randomUUID } from 'node:crypto';
import type { Connection } from 'ssh2';
import type { Logger } from '@sandgate/telemetry/log';
import { handleDirectTcpip } from './direct-tcpip.ts';
import { handleSession, type ChannelUnit, type SessionContext } from './session-channel.ts';
import type { Dialer } from '../workload/dial.ts';

/** Session channels one connection may have open at once. */
export const MAX_SESSIONS_PER_CONNECTION = 16;

export type ConnectionContext = Omit<SessionContext, 'track' | 'untrack' | 'log'> & { log: Logger; dial?: Dialer };

export class SshConnection {
  readonly id = randomUUID();
  /** Resolves once the connection ended and all its channels' processes are gone. */
  readonly closed: Promise<void>;
  private resolveClosed!: () => void;
  private readonly client: Connection;
  private readonly units = new Set<ChannelUnit>();
  private readonly log: Logger;
  private sessions = 0;
  private ended = false;

  constructor(client: Connection, ctx: ConnectionContext, channelId: string) {
    this.client = client;
    this.log = ctx.log.child({ ssh_connection: this.id, channel_id: channelId });
    this.closed = new Promise((resolve) => (this.resolveClosed = resolve));
    const track = (unit: ChannelUnit) => {
      if (this.ended) {
        unit.close('connection closed');
        return false;
      }
      this.units.add(unit);
      return true;
    };
    const untrack = (unit: ChannelUnit) => void this.units.delete(unit);
    const sessionCtx: SessionContext = { ...ctx, log: this.log, track, untrack };

    // The gateway authorised this connection (token, sandbox, run) before it reached us.
    client.on('authentication', (auth) => auth.accept());
    client.on('session', (accept, reject) => {
      if (this.ended || this.sessions >= MAX_SESSIONS_PER_CONNECTION) return reject();
      const session = accept();
      this.sessions++;
      session.once('close', () => this.sessions--);
      handleSession(session, sessionCtx);
    });
    client.on('tcpip', (accept, reject, info) => handleDirectTcpip(accept, reject, info, { track, untrack, log: this.log, dial: ctx.dial }));
    // Remote forwarding (-R) and anything else global: not offered.
    client.on('request', (_accept, reject) => reject?.());
    client.on('error', (err: Error & { level?: string }) => this.end(`connection error: ${err.message}`));
    client.on('end', () => this.end('connection ended'));
    client.on('close', () => this.end('connection closed'));
    this.log.debug('ssh connection opened');
  }

  /** Closes every channel's unit (killing process trees), then the connection. Idempotent. */
  end(reason: string): void {
    if (this.ended) return;
    this.ended = true;
    const units = [...this.units];
    this.units.clear();
    if (units.length > 0) this.log.info('ssh connection gone: closing its channels', { reason, channels: units.length });
    else this.log.debug('ssh connection gone', { reason });
    const closing = units.map((u) => Promise.resolve(u.close(reason)).catch(() => undefined));
    try {
      this.client.end();
    } catch {
      // the socket is gone already
    }
    void Promise.all(closing).then(() => this.resolveClosed());
  }
}
