// The replica-to-replica port: peer links only (libs/relay/src/link.ts). Every connection starts
// with the link handshake — this side sends a fresh challenge before reading a byte, and the
// client must prove it holds the peer secret (and this side proves it back) before any frame
// other than the handshake's is decoded. Anything else (a wrong MAC, a replayed HELLO, an HTTP/2
// preface, frames out of order, silence) is closed, logged and counted.
// Kinds: 'exec' and 'tcp' relay one channel; 'call' carries one unary peer call (KillExec,
// PushPolicy): one request MSG, one response MSG or a STATUS.
import { createServer, type Server as NetServer, type Socket } from 'node:net';
import { acceptLink, jsonCodec, type LinkChannel, type LinkCodec, type LinkPeer } from '@sandgate/relay';
import { codec, type ExecFrame, type TcpFrame } from '@sandgate/protocols';
import { Code, GatewayError } from '@sandgate/core';
import type { Logger, Metrics } from '@sandgate/telemetry';
import { endWithError } from '../api/calls.ts';
import { toServiceError } from '../api/grpc-errors.ts';

export const execFrameCodec: LinkCodec<ExecFrame> = codec<ExecFrame>('sandgate.v1.ExecFrame');
export const tcpFrameCodec: LinkCodec<TcpFrame> = codec<TcpFrame>('sandgate.v1.TcpFrame');

/** One unary peer call on a 'call' link: the request, and the response that comes back. */
export interface PeerCallRequest {
  method: string;
  request: Record<string, unknown>;
}
export const peerCallCodec: LinkCodec<PeerCallRequest | Record<string, unknown>> = jsonCodec();

/** The unary peer calls this replica answers (sandgate.v1.Peer's methods, carried on links). */
export interface PeerCalls {
  KillExec(request: { sandbox_id?: string; exec_id?: string; trace_context?: Record<string, string> }): Promise<{ killed: number }>;
  PushPolicy(request: { sandbox_id?: string; revision?: number }): Promise<{ connected: boolean; applied_revision: number }>;
  StartMain(request: { sandbox_id?: string }): Promise<{ connected: boolean }>;
}

const CODECS: Record<string, LinkCodec<unknown> | undefined> = {
  exec: execFrameCodec as LinkCodec<unknown>,
  tcp: tcpFrameCodec as LinkCodec<unknown>,
  call: peerCallCodec as LinkCodec<unknown>,
};

/** A connection that has not completed the handshake by then is dropped. */
const HANDSHAKE_TIMEOUT_MS = 10_000;

/** Counts every connection refused before or during the handshake. */
export const PEER_REFUSED_METRIC = 'sandgate_peer_link_refused_total';
/**
 * Counts every connection accepted on the peer port. Against `sandgate_execs_total{path="relayed"}`
 * on the entry replicas it shows whether links are kept: one connection per relayed exec means none are.
 */
export const PEER_CONNECTIONS_METRIC = 'sandgate_peer_link_connections_total';

export interface PeerPortDeps {
  host: string;
  port: number;
  /** This replica's id: named in the challenge, bound into both MACs. */
  replicaId: string;
  peerSecret: string;
  /** An exec relayed here by another replica. */
  onExec(channel: LinkChannel<ExecFrame>): void;
  /** A TCP channel relayed here by another replica. */
  onTcp(channel: LinkChannel<TcpFrame>): void;
  calls: PeerCalls;
  log: Logger;
  metrics: Metrics;
}

export interface PeerPort {
  readonly port: number;
  close(): void;
}

export function servePeerPort(deps: PeerPortDeps): Promise<PeerPort> {
  const links = new Set<Socket>();

  const accept = (socket: Socket) => {
    deps.metrics.inc(PEER_CONNECTIONS_METRIC);
    links.add(socket);
    socket.once('close', () => links.delete(socket));
    socket.on('error', () => undefined);
    const remote = `${socket.remoteAddress}:${socket.remotePort}`;
    // `reuse`: an entry replica's exec links carry one exec after another (link.ts, 'successor').
    const channel = acceptLink<unknown>(socket, (hello) => CODECS[hello.kind] ?? null, { secret: deps.peerSecret, self: deps.replicaId, reuse: true });
    const handshakeTimer = setTimeout(() => {
      deps.metrics.inc(PEER_REFUSED_METRIC);
      deps.log.warn('peer connection refused: no handshake in time', { remote });
      channel.destroy();
    }, HANDSHAKE_TIMEOUT_MS);
    channel.once('close', () => clearTimeout(handshakeTimer));
    channel.once('refused', (why: string) => {
      clearTimeout(handshakeTimer);
      deps.metrics.inc(PEER_REFUSED_METRIC);
      deps.log.warn('peer connection refused', { remote, why });
    });
    // A channel of a kept connection, served like the first; it waits for its first frame.
    const serve = (ch: LinkChannel<unknown>, hello: LinkPeer) => {
      ch.once('successor', (next: LinkChannel<unknown>) => serve(next, hello));
      if (hello.kind === 'exec') deps.onExec(ch as LinkChannel<ExecFrame>);
      else if (hello.kind === 'tcp') deps.onTcp(ch as LinkChannel<TcpFrame>);
      else serveCall(ch as LinkChannel<PeerCallRequest | Record<string, unknown>>, deps);
    };
    // Emitted once the client proved itself, before any message is decoded.
    channel.once('hello', (hello: LinkPeer) => {
      clearTimeout(handshakeTimer);
      serve(channel, hello);
    });
  };

  const server: NetServer = createServer(accept);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(deps.port, deps.host, () => {
      const address = server.address();
      resolve({
        port: typeof address === 'object' && address ? address.port : deps.port,
        close: () => {
          server.close();
          for (const socket of links) socket.destroy();
        },
      });
    });
  });
}

/** One unary call: the first MSG is the request; the answer is one MSG and END, or a STATUS. */
function serveCall(channel: LinkChannel<PeerCallRequest | Record<string, unknown>>, deps: PeerPortDeps): void {
  channel.on('error', () => undefined);
  channel.once('data', (first: PeerCallRequest | Record<string, unknown>) => {
    const { method, request } = first as Partial<PeerCallRequest>;
    const handler = method === 'KillExec' || method === 'PushPolicy' || method === 'StartMain' ? deps.calls[method] : undefined;
    const done = handler
      ? (handler as (r: Record<string, unknown>) => Promise<Record<string, unknown>>).call(deps.calls, request && typeof request === 'object' ? request : {})
      : Promise.reject(new GatewayError(Code.UNIMPLEMENTED, `unknown peer call '${String(method)}'`));
    done.then(
      (response) => channel.end(response),
      (err: unknown) => endWithError(channel, toServiceError(err, deps.log)),
    );
    // The client ends its side after the request; reading on lets that END arrive.
    channel.resume();
  });
}
