// Slow-loris: many connections per port (gRPC, HTTP, peer) of every replica, each sending one
// byte every few seconds of something that looks like the start of a valid exchange. Bounded in
// count and duration. Reports, per port, how many the server closed (and how soon) and how many
// were still open when the fuzzer let go.
import net from 'node:net';
import { PREFACE } from './h2-frames.ts';
import { LINK_MAGIC } from './link-frames.ts';
import type { ReplicaAddresses } from './target.ts';
import { Tally } from './tally.ts';

const SCRIPTS = {
  grpc: Buffer.concat([PREFACE, Buffer.alloc(4096, 0)]),
  http: Buffer.from(`GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ${'a'.repeat(4096)}`),
  peer: Buffer.concat([LINK_MAGIC, Buffer.from([0, 0, 0x10, 0]), Buffer.alloc(4096, 0x20)]),
} as const;
export type SlowPort = keyof typeof SCRIPTS;

export interface SlowLorisOptions {
  replicas: ReplicaAddresses[];
  perPort: number;
  durationMs: number;
  byteIntervalMs: number;
}

export interface SlowLorisResult {
  tallies: Tally[];
  /** Server-side close times (ms after connect), per port. */
  closeMs: Record<SlowPort, number[]>;
}

export function slowLoris(opts: SlowLorisOptions): { done: Promise<SlowLorisResult>; stop(): void } {
  const tallies: Record<SlowPort, Tally> = { grpc: new Tally('slowloris grpc'), http: new Tally('slowloris http'), peer: new Tally('slowloris peer') };
  const closeMs: Record<SlowPort, number[]> = { grpc: [], http: [], peer: [] };
  const sockets = new Set<net.Socket>();
  const pending: Promise<void>[] = [];
  let stopped = false;
  let stopNow: () => void = () => undefined;
  const stopSignal = new Promise<void>((resolve) => (stopNow = resolve));

  for (const replica of opts.replicas) {
    for (const port of Object.keys(SCRIPTS) as SlowPort[]) {
      const portNo = port === 'grpc' ? replica.grpcPort : port === 'http' ? replica.httpPort : replica.peerPort;
      for (let i = 0; i < opts.perPort; i++) {
        pending.push(
          new Promise<void>((resolve) => {
            const started = Date.now();
            const socket = net.connect({ host: replica.host, port: portNo });
            sockets.add(socket);
            let sent = 0;
            let outcome = '';
            // Every other connection stalls after three bytes: not even enough for the server to
            // tell which protocol it is (on the peer port, fewer than the link magic's four).
            const stall = i % 2 === 1;
            const variant = stall ? 'stalled after 3 bytes' : 'a byte every few seconds';
            // Staggered, so the bytes of all connections do not arrive in one burst.
            const offset = Math.floor((i / opts.perPort) * opts.byteIntervalMs);
            let timer: NodeJS.Timeout | undefined;
            const drip = () => {
              if (socket.destroyed) return;
              socket.write(SCRIPTS[port].subarray(sent % SCRIPTS[port].length, (sent % SCRIPTS[port].length) + 1));
              sent++;
              if (stall && sent >= 3) return;
              timer = setTimeout(drip, stall ? 200 : opts.byteIntervalMs);
            };
            socket.on('connect', () => (timer = setTimeout(drip, offset)));
            const end = (why: string) => {
              if (outcome) return;
              outcome = why;
              clearTimeout(timer);
              sockets.delete(socket);
              socket.destroy();
              tallies[port].record(`${outcome}: ${variant}`);
              resolve();
            };
            socket.on('data', () => undefined);
            socket.on('error', (err: NodeJS.ErrnoException) => {
              if (!stopped) {
                closeMs[port].push(Date.now() - started);
                end(`closed by server (${err.code ?? 'error'})`);
              }
            });
            socket.on('close', () => {
              if (!stopped) {
                closeMs[port].push(Date.now() - started);
                end('closed by server');
              }
            });
            void stopSignal.then(() => end(`timeout (still open after ${Math.round(opts.durationMs / 1000)} s)`));
          }),
        );
      }
    }
  }
  const timer = setTimeout(() => stop(), opts.durationMs);
  const stop = () => {
    clearTimeout(timer);
    stopped = true;
    stopNow();
  };
  const done = Promise.all(pending).then(() => {
    for (const s of sockets) s.destroy();
    return { tallies: Object.values(tallies), closeMs };
  });
  return { done, stop };
}
