// The WebSocket exec protocol's parsing (api/rest/exec-ws.ts): what a client may send, and that
// everything else is refused with a message naming what is wrong (never accepted and ignored).
import { describe, expect, it } from 'vitest';
import { parseControl, parseSignal, parseStart, upgradeCredentials } from '../src/api/rest/exec-ws.ts';

describe('start message', () => {
  it('maps onto ExecSandboxInteractive start fields', () => {
    expect(parseStart({ type: 'start', argv: ['sh'], env: { A: 'b' }, workdir: '/w', timeout_seconds: 5, tty: true, cols: 100, rows: 30 }, 'sbx-1')).toEqual({
      sandbox_id: 'sbx-1', command: ['sh'], environment: { A: 'b' }, workdir: '/w', timeout_seconds: 5, tty: true, cols: 100, rows: 30,
    });
    expect(parseStart({ type: 'start', argv: ['true'] }, 's')).toMatchObject({ environment: {}, workdir: '', timeout_seconds: 0, tty: false, cols: 0, rows: 0 });
  });

  it.each([
    [{ type: 'start', argv: ['true'], stdin: 'x' }, /unknown field in 'start' message: stdin/],
    [{ type: 'start', argv: ['true'], a: 1, b: 2 }, /unknown fields in 'start' message: a, b/],
    [{ type: 'start' }, /argv must be a non-empty array of strings/],
    [{ type: 'start', argv: [1] }, /argv must be a non-empty array of strings/],
    [{ type: 'start', argv: ['x'], env: { A: 1 } }, /env must be an object of string values/],
    [{ type: 'start', argv: ['x'], env: [] }, /env must be an object/],
    [{ type: 'start', argv: ['x'], tty: 'yes' }, /tty must be true or false/],
    [{ type: 'start', argv: ['x'], timeout_seconds: -1 }, /timeout_seconds must be a whole number/],
    [{ type: 'start', argv: ['x'], timeout_seconds: 1.5 }, /timeout_seconds must be a whole number/],
    [{ type: 'start', argv: ['x'], cols: 80 }, /cols and rows go with "tty": true/],
    [{ type: 'start', argv: ['x'], tty: true, rows: 70000 }, /rows must be a whole number from 0 to 65535/],
  ])('refuses %j', (msg, message) => {
    expect(() => parseStart(msg as Record<string, unknown>, 's')).toThrow(message);
  });
});

describe('control messages', () => {
  it('stdin_eof, resize, signal by name or number', () => {
    expect(parseControl({ type: 'stdin_eof' })).toEqual({ stdin_eof: true });
    expect(parseControl({ type: 'resize', cols: 120, rows: 40 })).toEqual({ resize: { cols: 120, rows: 40 } });
    expect(parseControl({ type: 'signal', signal: 'TERM' })).toEqual({ signal: { signo: 15 } });
    expect(parseControl({ type: 'signal', signal: 'SIGKILL' })).toEqual({ signal: { signo: 9 } });
    expect(parseControl({ type: 'signal', signal: 2 })).toEqual({ signal: { signo: 2 } });
  });

  it.each([
    [{ type: 'start', argv: ['x'] }, /already started/],
    [{ type: 'stdin' }, /unknown message type "stdin"/],
    [{}, /unknown message type undefined/],
    [{ type: 'stdin_eof', now: true }, /unknown field in 'stdin_eof' message: now/],
    [{ type: 'resize', cols: 0, rows: 10 }, /resize needs cols and rows/],
    [{ type: 'resize', cols: 10 }, /resize needs cols and rows/],
    [{ type: 'signal', signal: 'NOPE' }, /signal must be a signal name/],
    [{ type: 'signal', signal: 0 }, /signal must be a signal name/],
    [{ type: 'signal', signal: 65 }, /signal must be a signal name/],
    [{ type: 'signal' }, /signal must be a signal name/],
    [{ type: 'signal', signal: 'TERM', to: 'all' }, /unknown field in 'signal' message: to/],
  ])('refuses %j', (msg, message) => {
    expect(() => parseControl(msg as Record<string, unknown>)).toThrow(message);
  });

  it('signal names resolve like kill(1) does', () => {
    expect(parseSignal('INT')).toBe(2);
    expect(parseSignal('HUP')).toBe(1);
  });
});

describe('upgrade credentials', () => {
  it('Authorization as is; a bearer subprotocol becomes Authorization', () => {
    expect(upgradeCredentials({ authorization: 'Bearer a' })).toEqual({ authorization: 'Bearer a' });
    expect(upgradeCredentials({ 'sec-websocket-protocol': 'sandgate.exec.v1, bearer.sgt_x' })).toEqual({ authorization: 'Bearer sgt_x' });
    expect(upgradeCredentials({ 'sec-websocket-protocol': 'sandgate.exec.v1', authorization: 'Bearer a' })).toEqual({ 'sec-websocket-protocol': 'sandgate.exec.v1', authorization: 'Bearer a' });
  });

  it.each([
    [{ 'sec-websocket-protocol': 'bearer.x, sandgate.exec.v1' }, /first subprotocol offered must be sandgate.exec.v1/],
    [{ 'sec-websocket-protocol': 'sandgate.exec.v1, chat' }, /unknown subprotocol: chat/],
    [{ 'sec-websocket-protocol': 'sandgate.exec.v1, bearer.a, bearer.b' }, /at most one bearer/],
    [{ 'sec-websocket-protocol': 'sandgate.exec.v1, bearer.a', authorization: 'Bearer a' }, /not both/],
  ])('refuses %j', (headers, message) => {
    expect(() => upgradeCredentials(headers)).toThrow(message);
  });
});
