// SSE for the REST API: event ids (watch positions) round-trip, the wire format, the position
// just before a stream entry, and the SSE 'call': back-pressure, heartbeats, the end event and
// 'cancelled' when the HTTP client goes away.
import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import type { ServerResponse } from 'node:http';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { GatewayError } from '@sandgate/core';
import { HEARTBEAT_MS, SseWatchCall, decodeEventId, encodeEventId, formatEvent } from '../src/api/rest/sse.ts';
import { streamIdBefore } from '@sandgate/store';

describe('event ids', () => {
  it('round-trip a watch position', () => {
    const p = { events: '1796000000000-3', logs: '0-0', rv: 42 };
    expect(encodeEventId(p)).toBe('1796000000000-3.0-0.42');
    expect(decodeEventId(encodeEventId(p))).toEqual(p);
  });

  it('refuse what is not one of ours with INVALID_ARGUMENT naming the header', () => {
    for (const bad of ['', 'garbage', '1-0.2-0', '1-0.2-0.x', '1-0.2.3', '1-0.2-0.3.4', '$(id).1-0.2']) {
      expect(() => decodeEventId(bad), bad).toThrow(GatewayError);
      expect(() => decodeEventId(bad), bad).toThrow(/Last-Event-ID/);
    }
  });
});

describe('streamIdBefore', () => {
  it('is the entry id just before (XREAD reads after the id it is given)', () => {
    expect(streamIdBefore('1700-5')).toBe('1700-4');
    expect(streamIdBefore('1700-0')).toBe('1699-18446744073709551615');
    expect(streamIdBefore('0-0')).toBe('0-0');
  });
});

describe('formatEvent', () => {
  it('writes id, event and one data line', () => {
    expect(formatEvent('log', { message: 'a\nb' }, '1-0.2-0.3')).toBe('id: 1-0.2-0.3\nevent: log\ndata: {"message":"a\\nb"}\n\n');
    expect(formatEvent('end', {})).toBe('event: end\ndata: {}\n\n');
  });
});

describe('SseWatchCall', () => {
  afterEach(() => vi.useRealTimers());

  const make = (out = new PassThrough({ highWaterMark: 16 })) => {
    const res = new EventEmitter() as unknown as ServerResponse;
    const call = new SseWatchCall({ id: 'sb', log_sources: [] }, res, out, (ev) => (ev.log ? formatEvent('log', ev.log, ev.position ? encodeEventId(ev.position) : undefined) : null));
    return { res, call, out };
  };

  it('writes events with their ids, skips what the route drops, and ends with an end event', async () => {
    const { call, out } = make(new PassThrough());
    const chunks: string[] = [];
    out.on('data', (c: Buffer) => chunks.push(c.toString()));
    call.write({ sandbox: {} });
    call.write({ log: { message: 'hi', fields: {} }, position: { events: '1-0', logs: '2-0', rv: 1 } });
    call.end();
    await new Promise((r) => out.on('end', r));
    expect(chunks.join('')).toBe('id: 1-0.2-0.1\nevent: log\ndata: {"message":"hi","fields":{}}\n\nevent: end\ndata: {}\n\n');
  });

  it('holds the writer back until the client drains (back-pressure)', async () => {
    const { call, out } = make();
    const big = { log: { message: 'x'.repeat(100), fields: {} } };
    call.write(big);
    // highWaterMark 1: the second write waits for the first to be accepted by a drained `out`.
    expect(call.write(big)).toBe(false);
    await new Promise((r) => setTimeout(r, 20));
    expect(call.writableLength).toBeGreaterThan(0);
    out.resume();
    await new Promise((r) => call.once('drain', r));
    expect(call.writableLength).toBe(0);
  });

  it('sends a comment every HEARTBEAT_MS while idle', () => {
    vi.useFakeTimers();
    const { out, call } = make(new PassThrough());
    let text = '';
    out.on('data', (c: Buffer) => (text += c.toString()));
    vi.advanceTimersByTime(HEARTBEAT_MS * 2 + 1);
    expect(text).toBe(': keep-alive\n\n: keep-alive\n\n');
    call.destroy();
    vi.advanceTimersByTime(HEARTBEAT_MS * 2);
    expect(text).toBe(': keep-alive\n\n: keep-alive\n\n');
  });

  it("emits 'cancelled' when the HTTP client goes away", () => {
    const { res, call } = make(new PassThrough());
    const cancelled = vi.fn();
    call.on('cancelled', cancelled);
    (res as unknown as EventEmitter).emit('close');
    expect(cancelled).toHaveBeenCalledOnce();
    expect(call.cancelled).toBe(true);
    expect(call.destroyed).toBe(true);
  });

  it('is cancelled from the start when the HTTP client was gone before the stream opened', () => {
    const res = Object.assign(new EventEmitter(), { destroyed: true }) as unknown as ServerResponse;
    const call = new SseWatchCall({ id: 'sb', log_sources: [] }, res, new PassThrough(), () => null);
    expect(call.cancelled).toBe(true);
    expect(call.destroyed).toBe(true);
  });

  it('turns a failure on the open stream into an error event in the one shape', async () => {
    const { call, out } = make(new PassThrough());
    let text = '';
    out.on('data', (c: Buffer) => (text += c.toString()));
    call.emit('error', { code: 5, details: 'sandbox not found' });
    await new Promise((r) => out.on('end', r));
    expect(text).toBe('event: error\ndata: {"error":{"code":"NOT_FOUND","grpc_code":5,"message":"sandbox not found"}}\n\n');
  });
});
