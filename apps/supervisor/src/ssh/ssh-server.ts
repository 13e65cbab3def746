// The supervisor's SSH server (ssh2), in process and never listening on any port: each SSH
// connection arrives as a TcpChannel socket relayed by the gateway (see tcp-channel.ts) and is
// injected into the server. Keepalives detect a client that went silent (laptop asleep, client
// frozen) within keepaliveInterval × (keepaliveCountMax + 1) = 45 s; the connection then ends
// and its channels' processes are killed like any other dropped connection.
//
// ssh2 and the connection code load on the first SSH connection, not at start: they are a third
// of the supervisor's start-up (~28 of ~90 ms of module loading, BENCHMARKS.md "Cold create") and
// memory in every idle sandbox, while most sandboxes are never reached over SSH.
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type ssh2 from 'ssh2';
import type { Logger } from '@sandgate/telemetry/log';
import type { MainChannel, MainChannelDeps } from './main-channel.ts';
import type { SshConnection } from './ssh-connection.ts';
import type { Dialer } from '../workload/dial.ts';
import type { WorkloadLauncher } from '../workload/launcher.ts';

export const KEEPALIVE_INTERVAL_MS = 15_000;
export const KEEPALIVE_COUNT_MAX = 2;
/** Processes started over SSH that may run at once in one sandbox. */
export const MAX_SSH_PROCESSES = 64;
/** After a connection ended, how long its relay may take to close before it is dropped. */
const CLOSE_GRACE_MS = 5_000;

export interface SshServerOptions {
  sandboxEnv: Record<string, string>;
  main: MainChannelDeps;
  log: Logger;
  keepaliveIntervalMs?: number;
  keepaliveCountMax?: number;
  maxProcesses?: number;
  /** Confines the processes SSH channels start; absent: started as is. */
  launcher?: WorkloadLauncher;
  /** How direct-tcpip (ssh -L) reaches the sandbox's loopback; default: a plain connect. */
  dial?: Dialer;
}

interface LoadedServer {
  server: InstanceType<typeof ssh2.Server>;
  Connection: typeof SshConnection;
}

export class SshServer {
  /** Made on the first connection (see the top of this file). */
  private loaded: Promise<LoadedServer> | null = null;
  private readonly opts: SshServerOptions;
  private readonly log: Logger;
  /** Sockets being served, with their channel id and (once ssh2 has read the client's header) connection. */
  private readonly sockets = new Map<Duplex, { channelId: string; conn?: SshConnection }>();
  private readonly connections = new Set<SshConnection>();
  /** Attachments to the main process: terminal delivery waits for them. */
  readonly mainChannels = new Set<MainChannel>();
  private processes = 0;
  private stopped = false;

  constructor(opts: SshServerOptions) {
    this.opts = opts;
    this.log = opts.log.child({ component: 'ssh' });
  }

  private load(): Promise<LoadedServer> {
    this.loaded ??= (async () => {
      const [{ default: ssh2 }, { generateHostKey }, { SshConnection: Connection }] = await Promise.all([
        import('ssh2'),
        import('./host-key.ts'),
        import('./ssh-connection.ts'),
      ]);
      const server = new ssh2.Server({
        hostKeys: [generateHostKey()],
        ident: 'sandgate',
        keepaliveInterval: this.opts.keepaliveIntervalMs ?? KEEPALIVE_INTERVAL_MS,
        keepaliveCountMax: this.opts.keepaliveCountMax ?? KEEPALIVE_COUNT_MAX,
      });
      server.on('error', (err: Error) => this.log.warn('ssh server error', { err: err.message }));
      server.on('connection', (client: ssh2.Connection) => this.onConnection(client, Connection));
      return { server, Connection };
    })();
    return this.loaded;
  }

  private onConnection(client: ssh2.Connection, Connection: typeof SshConnection): void {
    // ssh2 creates one connection per injected socket; find ours by identity.
    const socket = (client as unknown as { _sock?: Duplex })._sock;
    const entry = socket ? this.sockets.get(socket) : undefined;
    if (!entry) {
      client.end();
      return;
    }
    const conn = new Connection(client, this.connectionContext(), entry.channelId);
    entry.conn = conn;
    this.connections.add(conn);
    void conn.closed.then(() => {
      this.connections.delete(conn);
      // Whatever ended the connection, the relay under it ends too (and is dropped if it hangs).
      socket!.end();
      setTimeout(() => socket!.destroy(), CLOSE_GRACE_MS).unref();
    });
  }

  get connectionCount(): number {
    return this.connections.size;
  }

  get processCount(): number {
    return this.processes;
  }

  /** The workload became confined after the server was built (the supervisor starts it first). */
  confine(launcher: WorkloadLauncher, dial: Dialer): void {
    this.opts.launcher = launcher;
    this.opts.dial = dial;
  }

  /** Serves one SSH connection arriving on `socket` (a relayed TcpChannel). */
  accept(socket: Duplex, channelId: string): void {
    if (this.stopped) {
      socket.destroy();
      return;
    }
    this.sockets.set(socket, { channelId });
    // The client half-closed (its ssh died, or the gateway's path ended): an SSH transport is over
    // then. ssh2 will not end a socket whose readable side ended, so end ours, as a TCP socket
    // without allowHalfOpen would: our `eof` lets the gateway close the relay.
    socket.once('end', () => socket.end());
    socket.once('close', () => {
      // The relay under the connection broke or ended: the connection is over whatever ssh2 saw.
      this.sockets.get(socket)?.conn?.end('relay closed');
      this.sockets.delete(socket);
    });
    socket.on('error', () => socket.destroy());
    // Until ssh2 is loaded nothing reads the socket: what the client sent waits in it.
    this.load().then(
      ({ server }) => {
        if (this.stopped || socket.destroyed) socket.destroy();
        else server.injectSocket(socket as unknown as Socket);
      },
      (err: unknown) => {
        this.log.error('ssh server could not be loaded', { err });
        socket.destroy();
      },
    );
  }

  private connectionContext() {
    const max = this.opts.maxProcesses ?? MAX_SSH_PROCESSES;
    return {
      sandboxEnv: this.opts.sandboxEnv,
      main: this.opts.main,
      launcher: this.opts.launcher,
      dial: this.opts.dial,
      log: this.log,
      mainChannels: this.mainChannels,
      takeProcessSlot: () => {
        if (this.processes >= max) return false;
        this.processes++;
        return true;
      },
      releaseProcessSlot: () => {
        this.processes = Math.max(0, this.processes - 1);
      },
    };
  }

  /** Supervisor shutdown: ends every connection (killing what its channels started). */
  async shutdown(reason: string): Promise<void> {
    this.stopped = true;
    const conns = [...this.connections];
    for (const c of conns) c.end(reason);
    for (const s of this.sockets.keys()) s.destroy();
    await Promise.all(conns.map((c) => c.closed));
  }
}
