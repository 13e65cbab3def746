// One raw TCP exchange: connect, write the chunks (optionally spaced out), half-close or not, and
// collect what comes back until the server closes or the deadline passes.
import net from 'node:net';

export interface Exchange {
  received: Buffer;
  /** The server closed (FIN or reset) before the deadline. */
  closed: boolean;
  /** The connection was reset or failed (ECONNRESET, EPIPE…). */
  error: string;
  /** ms from connect until the server closed (or the deadline). */
  ms: number;
  /** `stopWhen` said the answer was complete before the server closed. */
  stopped: boolean;
}

export interface ExchangeOptions {
  host: string;
  port: number;
  chunks: Buffer[];
  /** FIN after the last chunk (default true). */
  halfClose?: boolean;
  timeoutMs: number;
  /** Ends the exchange early once the received bytes are enough to judge. */
  stopWhen?: (received: Buffer) => boolean;
  /** Keep at most this many received bytes (default 64 KiB). */
  keepBytes?: number;
}

export function exchange(opts: ExchangeOptions): Promise<Exchange> {
  return new Promise((resolve) => {
    const started = Date.now();
    const socket = net.connect({ host: opts.host, port: opts.port, allowHalfOpen: true });
    const parts: Buffer[] = [];
    let kept = 0;
    const keep = opts.keepBytes ?? 64 * 1024;
    let error = '';
    let done = false;
    const finish = (closed: boolean, stopped = false) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ received: Buffer.concat(parts), closed, error, ms: Date.now() - started, stopped });
    };
    const timer = setTimeout(() => finish(false), opts.timeoutMs);
    socket.on('data', (chunk: Buffer) => {
      if (kept < keep) {
        parts.push(chunk);
        kept += chunk.length;
      }
      if (opts.stopWhen?.(Buffer.concat(parts))) finish(false, true);
    });
    socket.on('error', (err: NodeJS.ErrnoException) => {
      error ||= err.code ?? err.message;
      finish(true);
    });
    socket.on('end', () => finish(true));
    socket.on('close', () => finish(true));
    socket.on('connect', () => {
      for (const c of opts.chunks) if (!socket.destroyed) socket.write(c);
      if (opts.halfClose !== false && !socket.destroyed) socket.end();
    });
  });
}
