// Server-Sent Events for the REST API: the wire format, the event ids that let a reconnecting
// client resume (Last-Event-ID), and a writable 'call' that WatchService streams into, so the
// watch loop itself (follower, filters, back-pressure, end on disconnect) is WatchService's only.
import { PassThrough, Writable } from 'node:stream';
import type { ServerResponse } from 'node:http';
import { GatewayError, Code } from '@sandgate/core';
import type { SandboxStreamEvent, WatchSandboxRequest } from '@sandgate/protocols';
import type { WatchPosition } from '../../sandboxes/watch-service.ts';
import { httpError } from './errors.ts';

/** How often an idle stream gets a comment line, so that proxies do not close it (~15 s). */
export const HEARTBEAT_MS = 15_000;

const STREAM_ID = /^\d{1,20}-\d{1,20}$/;

/**
 * An SSE event id: the watch position after the event, `<events entry>.<logs entry>.<rv>`.
 * Opaque to clients; they only send it back as Last-Event-ID.
 */
export function encodeEventId(p: WatchPosition): string {
  return `${p.events}.${p.logs}.${p.rv}`;
}

/** The position a Last-Event-ID names; INVALID_ARGUMENT when it is not one of ours. */
export function decodeEventId(id: string): WatchPosition {
  const parts = id.trim().split('.');
  const [events, logs, rv] = parts;
  if (parts.length !== 3 || !STREAM_ID.test(events!) || !STREAM_ID.test(logs!) || !/^\d{1,15}$/.test(rv!)) {
    throw new GatewayError(Code.INVALID_ARGUMENT, `Last-Event-ID '${id.slice(0, 80)}' is not an event id of this stream: send back the id: of the last event received, or omit the header to start over`);
  }
  return { events: events!, logs: logs!, rv: Number(rv) };
}

/** One SSE event (data as one JSON line, so no line breaks need splitting). */
export function formatEvent(event: string, data: unknown, id?: string): string {
  return `${id !== undefined ? `id: ${id}\n` : ''}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

type Positioned = SandboxStreamEvent & { position?: WatchPosition };

/**
 * The 'call' WatchService writes into: an object-mode Writable with `request` and `cancelled`
 * that turns each event into SSE text on `out` and waits for `out` to drain (so a slow client
 * holds the watch back instead of filling memory). 'cancelled' is emitted when the HTTP client
 * goes away; WatchService then closes its follower (its Redis connection).
 */
export class SseWatchCall extends Writable {
  readonly request: WatchSandboxRequest;
  cancelled = false;
  private readonly out: PassThrough;
  private readonly toSse: (ev: Positioned) => string | null;
  private readonly heartbeat: NodeJS.Timeout;

  constructor(request: WatchSandboxRequest, res: ServerResponse, out: PassThrough, toSse: (ev: Positioned) => string | null) {
    // One event at a time: WatchService's own wait for 'drain' is then the client's pace.
    super({ objectMode: true, highWaterMark: 1 });
    this.request = request;
    this.out = out;
    this.toSse = toSse;
    this.heartbeat = setInterval(() => {
      if (!this.out.writableNeedDrain) this.out.write(': keep-alive\n\n');
    }, HEARTBEAT_MS);
    this.heartbeat.unref();
    const clientGone = () => {
      if (this.out.writableEnded || this.cancelled) return;
      this.cancelled = true;
      this.emit('cancelled');
      this.destroy();
    };
    res.on('close', clientGone);
    // Gone already (while the route looked the sandbox up): the watch must not start following.
    if (res.destroyed) clientGone();
    // The watch ended by itself (deleted, terminal phase, follow off): say so, so that an
    // EventSource does not reconnect for more.
    this.on('finish', () => this.close(formatEvent('end', {})));
    // A failure once the stream is open: the one error shape, as an event.
    this.on('error', (err: unknown) => this.close(formatEvent('error', httpError(err).body)));
  }

  override _write(ev: Positioned, _enc: BufferEncoding, done: (err?: Error | null) => void): void {
    const text = this.toSse(ev);
    if (text === null || this.out.write(text)) return done();
    const resume = () => {
      this.out.off('drain', resume);
      this.out.off('close', resume);
      done();
    };
    this.out.on('drain', resume);
    this.out.on('close', resume);
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    clearInterval(this.heartbeat);
    cb(err);
  }

  private close(last: string): void {
    clearInterval(this.heartbeat);
    if (!this.out.writableEnded) this.out.end(last);
  }
}
