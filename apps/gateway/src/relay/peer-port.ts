// The replica-to-replica port. Two protocols share it, told apart by the first bytes:
// - peer links (libs/relay/src/link.ts): one TCP connection per relayed exec or TCP channel;
// - gRPC (sandgate.v1.Peer): KillExec.
import { createServer, type Server as NetServer, type Socket } from 'node:net';
import { ServerCredentials, type Server as GrpcServer } from '@grpc/grpc-js';
import { LinkChannel, sniffLink, type LinkCodec, type LinkHello } from '@sandgate/relay';
import { codec, type ExecFrame, type TcpFrame } from '@sandgate/protocols';
import type { Logger } from '@sandgate/telemetry';
import { secretsEqual } from '../api/secrets.ts';

export const execFrameCodec: LinkCodec<ExecFrame> = codec<ExecFrame>('sandgate.v1.ExecFrame');
export const tcpFrameCodec: LinkCodec<TcpFrame> = codec<TcpFrame>('sandgate.v1.TcpFrame');
const CODECS: Record<string, LinkCodec<ExecFrame | TcpFrame> | undefined> = { exec: execFrameCodec, tcp: tcpFrameCodec };

/** A link that has not said hello by then is dropped. */
const HELLO_TIMEOUT_MS = 10_000;

export interface PeerPortDeps {
  host: string;
  port: number;
  peerSecret: string;
  grpc: GrpcServer;
  /** An exec relayed here by another replica. */
  onExec(channel: LinkChannel<ExecFrame>): void;
  /** A TCP channel relayed here by another replica. */
  onTcp(channel: LinkChannel<TcpFrame>): void;
  log: Logger;
}

export interface PeerPort {
  readonly port: number;
  close(): void;
}

export function servePeerPort(deps: PeerPortDeps): Promise<PeerPort> {
  const injector = deps.grpc.createConnectionInjector(ServerCredentials.createInsecure());
  const links = new Set<Socket>();

  const acceptLink = (socket: Socket) => {
    links.add(socket);
    socket.once('close', () => links.delete(socket));
    const channel = new LinkChannel<ExecFrame | TcpFrame>(socket, (hello) => CODECS[hello.kind] ?? null, 'server');
    const helloTimer = setTimeout(() => channel.destroy(), HELLO_TIMEOUT_MS);
    // Emitted before any message is decoded: a refused link never gets that far.
    channel.once('hello', (hello: LinkHello) => {
      clearTimeout(helloTimer);
      if (!secretsEqual(hello.secret ?? '', deps.peerSecret)) {
        deps.log.warn('peer link refused: bad secret', { remote: socket.remoteAddress, from: hello.from });
        channel.destroy();
      } else if (hello.kind === 'exec') deps.onExec(channel as LinkChannel<ExecFrame>);
      else deps.onTcp(channel as LinkChannel<TcpFrame>);
    });
  };

  const server: NetServer = createServer((socket) =>
    sniffLink(socket, acceptLink, (other, head) => {
      other.unshift(head);
      injector.injectConnection(other);
    }),
  );
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(deps.port, deps.host, () => {
      const address = server.address();
      resolve({
        port: typeof address === 'object' && address ? address.port : deps.port,
        close: () => {
          server.close();
          for (const socket of links) socket.destroy();
          injector.destroy();
        },
      });
    });
  });
}
