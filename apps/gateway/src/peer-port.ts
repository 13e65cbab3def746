// The replica-to-replica port. Two protocols share it, told apart by the first bytes:
// - peer links (libs/relay/src/link.ts): one TCP connection per relayed exec or TCP channel;
// - gRPC (sandgate.v1.Peer): KillExec.
import { createServer, type Server as NetServer, type Socket } from 'node:net';
import { timingSafeEqual } from 'node:crypto';
import { ServerCredentials, type Server as GrpcServer } from '@grpc/grpc-js';
import { LinkChannel, sniffLink, type LinkCodec, type LinkHello } from '@sandgate/relay';
import { codec, type ExecFrame, type TcpFrame } from '@sandgate/protocols';
import type { Logger } from '@sandgate/telemetry';

export const execFrameCodec: LinkCodec<ExecFrame> = codec<ExecFrame>('sandgate.v1.ExecFrame');
export const tcpFrameCodec: LinkCodec<TcpFrame> = codec<TcpFrame>('sandgate.v1.TcpFrame');

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

export function secretsEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export function servePeerPort(deps: PeerPortDeps): Promise<PeerPort> {
  const injector = deps.grpc.createConnectionInjector(ServerCredentials.createInsecure());
  const links = new Set<Socket>();

  const acceptLink = (socket: Socket) => {
    links.add(socket);
    socket.once('close', () => links.delete(socket));
    // Decode with the exec codec until the hello says which relay this is; then re-wrap.
    const helloTimer = setTimeout(() => socket.destroy(), HELLO_TIMEOUT_MS);
    readHello(socket, (hello, rest) => {
      clearTimeout(helloTimer);
      if (!hello || !secretsEqual(hello.secret ?? '', deps.peerSecret)) {
        deps.log.warn('peer link refused: bad hello or secret', { remote: socket.remoteAddress });
        socket.destroy();
        return;
      }
      if (rest.length) socket.unshift(rest);
      if (hello.kind === 'exec') {
        const channel = new LinkChannel(socket, execFrameCodec, 'server');
        channel.hello = hello;
        deps.onExec(channel);
      } else if (hello.kind === 'tcp') {
        const channel = new LinkChannel(socket, tcpFrameCodec, 'server');
        channel.hello = hello;
        deps.onTcp(channel);
      } else socket.destroy();
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

/**
 * Reads the HELLO frame (u32 length | type 1 | JSON) that opens a link, before the channel object
 * exists: which codec the channel needs depends on it. Calls back with null on anything else.
 */
function readHello(socket: Socket, done: (hello: LinkHello | null, rest: Buffer) => void): void {
  let buffered = Buffer.alloc(0);
  const onData = (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk]);
    if (buffered.length < 5) return;
    const length = buffered.readUInt32BE(0);
    if (buffered[4] !== 1 || length < 1 || length > 64 * 1024) return finish(null);
    if (buffered.length < 4 + length) return;
    let hello: LinkHello | null = null;
    try {
      hello = JSON.parse(buffered.subarray(5, 4 + length).toString()) as LinkHello;
    } catch {
      hello = null;
    }
    finish(hello, buffered.subarray(4 + length));
  };
  const finish = (hello: LinkHello | null, rest = Buffer.alloc(0)) => {
    socket.off('data', onData);
    socket.pause();
    done(hello, rest);
  };
  socket.on('data', onData);
  socket.resume();
}
