// GET /v1/sandboxes/{name}/exec/ws: an interactive exec over a WebSocket, for clients without a
// gRPC stack (browsers, terminals in web apps). It is ExecSandboxInteractive behind an adapter:
// the socket becomes a Duplex that looks like the gRPC call ExecService.handleInteractive takes,
// so validation, the access rule, the relay to the owner, back-pressure and the kill on a vanished
// client are the gRPC exec's own code, not a copy.
//
// The protocol (also in README "Exec over WebSocket" and in the route's OpenAPI description):
//   client → server  text   {"type":"start","argv":[…],"env":{},"workdir":"","timeout_seconds":0,"tty":false,"cols":80,"rows":24}  (first, once)
//                    binary stdin bytes
//                    text   {"type":"stdin_eof"} | {"type":"resize","cols":C,"rows":R} | {"type":"signal","signal":"TERM"|15}
//   server → client  binary 0x01 + stdout bytes | 0x02 + stderr bytes
//                    text   {"type":"exit","exit_code":N,"timed_out":bool}, then close 1000
//                    text   {"type":"error","code":"NOT_FOUND","grpc_code":5,"message":"…"}, then close 4000 + grpc_code
import os from 'node:os';
import { Duplex } from 'node:stream';
import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { WebSocket } from '@fastify/websocket';
import { Type } from '@sinclair/typebox';
import { Code, GatewayError, type Principal } from '@sandgate/core';
import type { ExecSandboxRequest } from '@sandgate/protocols';
import type { Logger } from '@sandgate/telemetry';
import { byteSlices } from '@sandgate/relay';
import type { ClientExecEvent, InteractiveInput } from '../../exec/exec-service.ts';
import { httpCaller } from './gate.ts';
import { httpError, sendError } from './errors.ts';
import type { RestDeps } from './index.ts';

/** The subprotocol the server speaks (and selects when the client offers it). */
export const EXEC_WS_SUBPROTOCOL = 'sandgate.exec.v1';
/** A browser cannot set Authorization on a WebSocket: it offers `bearer.<token>` as a subprotocol instead. */
export const BEARER_SUBPROTOCOL_PREFIX = 'bearer.';
/** The one-byte prefix of a binary output frame (as Kubernetes' channel protocol numbers them). */
export const STREAM_STDOUT = 1;
export const STREAM_STDERR = 2;
/** Close code of a normal end (after the exit frame); errors close with 4000 + their gRPC code. */
export const CLOSE_NORMAL = 1000;
export const CLOSE_ERROR_BASE = 4000;
/**
 * Output back-pressure: above this many bytes queued on the socket, the exec's output stops being
 * pumped (and, hop by hop, the supervisor stops reading the process) until it drains.
 */
export const OUTPUT_HIGH_WATER_BYTES = 1024 * 1024;
/**
 * While the socket is paused (stdin back-pressure) the server reads nothing, so it cannot see the
 * client's close or its connection drop. It pings this often instead: a client that is gone
 * answers the ping with a TCP reset, the next write fails, and the socket closes (and the exec is
 * cancelled) as if it had been read.
 */
export const PAUSED_PROBE_MS = 1_000;

const START_FIELDS = ['type', 'argv', 'env', 'workdir', 'timeout_seconds', 'tty', 'cols', 'rows'] as const;
const CONTROL_FIELDS: Readonly<Record<string, readonly string[]>> = {
  stdin_eof: ['type'],
  resize: ['type', 'cols', 'rows'],
  signal: ['type', 'signal'],
};

const invalid = (message: string) => new GatewayError(Code.INVALID_ARGUMENT, message);

/** The frame's fields that the protocol does not have (refused, never ignored). */
function unknownFields(msg: Record<string, unknown>, known: readonly string[]): void {
  const extra = Object.keys(msg).filter((k) => !known.includes(k));
  if (extra.length > 0) {
    throw invalid(`unknown field${extra.length > 1 ? 's' : ''} in '${String(msg.type)}' message: ${extra.join(', ')} (allowed: ${known.join(', ')})`);
  }
}

function uint(msg: Record<string, unknown>, field: string, max: number): number {
  const v = msg[field];
  if (v === undefined) return 0;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > max) throw invalid(`${field} must be a whole number from 0 to ${max}`);
  return v;
}

/** The start message as ExecSandboxInteractive's start payload (ExecService validates the rest). */
export function parseStart(msg: Record<string, unknown>, sandboxId: string): ExecSandboxRequest {
  unknownFields(msg, START_FIELDS);
  const { argv, env, workdir, tty } = msg;
  if (!Array.isArray(argv) || argv.length === 0 || !argv.every((a) => typeof a === 'string')) throw invalid('argv must be a non-empty array of strings');
  if (env !== undefined && (typeof env !== 'object' || env === null || Array.isArray(env) || !Object.values(env).every((v) => typeof v === 'string'))) {
    throw invalid('env must be an object of string values');
  }
  if (workdir !== undefined && typeof workdir !== 'string') throw invalid('workdir must be a string');
  if (tty !== undefined && typeof tty !== 'boolean') throw invalid('tty must be true or false');
  const cols = uint(msg, 'cols', 65535);
  const rows = uint(msg, 'rows', 65535);
  if (!tty && (cols || rows)) throw invalid('cols and rows go with "tty": true');
  return {
    sandbox_id: sandboxId,
    command: argv as string[],
    environment: (env as Record<string, string> | undefined) ?? {},
    workdir: (workdir as string | undefined) ?? '',
    timeout_seconds: uint(msg, 'timeout_seconds', 2 ** 32 - 1),
    tty: tty === true,
    cols,
    rows,
  };
}

/** A signal by name (`TERM`, `SIGTERM`) or number (1–64), as a number. */
export function parseSignal(value: unknown): number {
  if (typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= 64) return value;
  if (typeof value === 'string') {
    const name = value.startsWith('SIG') ? value : `SIG${value}`;
    const n = (os.constants.signals as Record<string, number | undefined>)[name];
    if (n !== undefined) return n;
  }
  throw invalid(`signal must be a signal name (e.g. "TERM", "SIGINT") or a number from 1 to 64, got ${JSON.stringify(value)}`);
}

/** A control message after the start, as an interactive input (null for none). */
export function parseControl(msg: Record<string, unknown>): InteractiveInput {
  const type = msg.type;
  if (type === 'start') throw invalid('the exec has already started: "start" is the first message only');
  const known = typeof type === 'string' ? CONTROL_FIELDS[type] : undefined;
  if (!known) throw invalid(`unknown message type ${JSON.stringify(type)} (expected stdin_eof, resize or signal; stdin goes in binary frames)`);
  unknownFields(msg, known);
  if (type === 'stdin_eof') return { stdin_eof: true };
  if (type === 'signal') return { signal: { signo: parseSignal(msg.signal) } };
  const cols = uint(msg, 'cols', 65535);
  const rows = uint(msg, 'rows', 65535);
  if (cols === 0 || rows === 0) throw invalid('resize needs cols and rows from 1 to 65535');
  return { resize: { cols, rows } };
}

function parseJson(text: string): Record<string, unknown> {
  let msg: unknown;
  try {
    msg = JSON.parse(text);
  } catch {
    throw invalid('text frames must be JSON objects');
  }
  if (typeof msg !== 'object' || msg === null || Array.isArray(msg)) throw invalid('text frames must be JSON objects');
  return msg as Record<string, unknown>;
}

/**
 * The headers to authenticate: Authorization as is, or the bearer token offered as a subprotocol.
 * The offered subprotocols must start with sandgate.exec.v1 (the server selects the first one, so
 * a token is never echoed back) and may add one bearer.<token>; anything else is refused.
 */
export function upgradeCredentials(headers: IncomingHttpHeaders): IncomingHttpHeaders {
  const offered = (headers['sec-websocket-protocol'] ?? '')
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p !== '');
  if (offered.length === 0) return headers;
  if (offered[0] !== EXEC_WS_SUBPROTOCOL) throw invalid(`the first subprotocol offered must be ${EXEC_WS_SUBPROTOCOL}`);
  const bearers = offered.filter((p) => p.startsWith(BEARER_SUBPROTOCOL_PREFIX));
  const others = offered.slice(1).filter((p) => !p.startsWith(BEARER_SUBPROTOCOL_PREFIX));
  if (others.length > 0) throw invalid(`unknown subprotocol${others.length > 1 ? 's' : ''}: ${others.join(', ')} (offer ${EXEC_WS_SUBPROTOCOL} and optionally ${BEARER_SUBPROTOCOL_PREFIX}<token>)`);
  if (bearers.length === 0) return headers;
  if (bearers.length > 1) throw invalid(`offer at most one ${BEARER_SUBPROTOCOL_PREFIX}<token> subprotocol`);
  if (headers.authorization !== undefined) throw invalid(`give the token either in Authorization or as a ${BEARER_SUBPROTOCOL_PREFIX}<token> subprotocol, not both`);
  return { authorization: `Bearer ${bearers[0]!.slice(BEARER_SUBPROTOCOL_PREFIX.length)}` };
}

/**
 * The socket as the gRPC call ExecService.handleInteractive serves: reads InteractiveInput
 * objects, takes ClientExecEvent objects, and is `cancelled` (emitting 'cancelled') when the
 * socket closes before the exec reported an exit — the same path, and so the same kill of the
 * whole tree, as a gRPC client's cancel.
 */
export class WsExecCall extends Duplex {
  cancelled = false;
  private readonly ws: WebSocket;
  private readonly log: Logger;
  /** The exit or an error frame went out: the exec is over, a close is no cancel. */
  private over = false;
  private probe: NodeJS.Timeout | undefined;

  constructor(ws: WebSocket, log: Logger) {
    // One unread message is enough to stop reading the socket (the pump keeps it flowing otherwise).
    super({ objectMode: true, readableHighWaterMark: 1, writableHighWaterMark: 16 });
    this.ws = ws;
    this.log = log;
    // ExecService fails the call by emitting 'error' (endWithError): the exec is over.
    this.on('error', (err: unknown) => {
      this.over = true;
      this.refuse(err);
    });
    ws.on('close', () => {
      this.stopProbe();
      if (!this.over) {
        this.cancelled = true;
        this.emit('cancelled');
      }
      this.destroy();
    });
  }

  /** A client message for the exec; a full read buffer (the supervisor's side not draining) pauses the socket. */
  input(msg: InteractiveInput): void {
    if (this.destroyed) return;
    if (!this.push(msg) && !this.ws.isPaused) {
      this.ws.pause();
      this.probe ??= setInterval(() => this.ws.ping(), PAUSED_PROBE_MS);
    }
  }

  override _read(): void {
    this.stopProbe();
    if (this.ws.isPaused) this.ws.resume();
  }

  private stopProbe(): void {
    clearInterval(this.probe);
    this.probe = undefined;
  }

  override _write(event: ClientExecEvent, _enc: BufferEncoding, callback: (err?: Error | null) => void): void {
    if (this.ws.readyState !== this.ws.OPEN) return callback();
    if (event.exit) {
      this.over = true;
      this.ws.send(JSON.stringify({ type: 'exit', exit_code: event.exit.exit_code ?? 0, timed_out: event.exit.timed_out ?? false }));
      return callback();
    }
    const stream = event.stdout ? STREAM_STDOUT : event.stderr ? STREAM_STDERR : 0;
    const data = event.stdout?.data ?? event.stderr?.data;
    if (!stream || !data || data.length === 0) return callback();
    let called = false;
    const done = () => {
      if (called) return;
      called = true;
      callback();
    };
    this.ws.send(Buffer.concat([Buffer.of(stream), data]), { binary: true }, done);
    // Above the high-water mark, this write completes only once the socket has flushed it (and
    // everything before it): ExecService's pump then stops reading the path until we drain.
    if (this.ws.bufferedAmount <= OUTPUT_HIGH_WATER_BYTES) done();
  }

  /** ExecService ended the call after the exit: close normally. */
  override _final(callback: () => void): void {
    this.over = true;
    if (this.ws.readyState === this.ws.OPEN) this.ws.close(CLOSE_NORMAL, 'exit');
    callback();
  }

  /**
   * Sends `err` as an error frame and closes with 4000 + its gRPC code. Unless the exec is already
   * over, the close then cancels it (a protocol error ends the exec like a vanished client).
   */
  refuse(err: unknown): void {
    if (this.ws.readyState !== this.ws.OPEN) return;
    const { body } = httpError(err, this.log);
    this.ws.send(JSON.stringify({ type: 'error', ...body.error }));
    this.ws.close(CLOSE_ERROR_BASE + body.error.grpc_code, body.error.code);
  }
}

const Params = Type.Object({ name: Type.String({ description: 'The sandbox name.' }) });
const Query = Type.Object({
  workspace: Type.Optional(Type.String({ description: "The sandbox's workspace (default: the caller's)." })),
});
const ErrorBody = Type.Object(
  { error: Type.Object({ code: Type.String(), grpc_code: Type.Integer(), message: Type.String() }) },
  { description: 'The one error shape.' },
);

const DESCRIPTION = `Runs a command in the sandbox over a WebSocket: stdin, stdout, stderr, resize, signals and the exit as frames, binary-safe, with back-pressure both ways.

**Authentication** (checked before the upgrade; a refusal is a plain HTTP answer: 401 without a valid token, 404 for a sandbox the caller cannot see): \`Authorization: Bearer <token>\`, or — for browsers, which cannot set headers on a WebSocket — the subprotocols \`${EXEC_WS_SUBPROTOCOL}, ${BEARER_SUBPROTOCOL_PREFIX}<token>\` (\`${EXEC_WS_SUBPROTOCOL}\` first; the server selects it). Not both.

**Client → server**
- first, a text frame \`{"type":"start","argv":["sh","-c","…"],"env":{},"workdir":"","timeout_seconds":0,"tty":false,"cols":80,"rows":24}\` (only \`argv\` is required; \`cols\`/\`rows\` go with \`tty\`; unknown fields are refused);
- binary frames: stdin bytes;
- text frames \`{"type":"stdin_eof"}\`, \`{"type":"resize","cols":C,"rows":R}\`, \`{"type":"signal","signal":"TERM"}\` (a name, with or without SIG, or a number 1–64; sent to the command's process group).

**Server → client**
- binary frames: one byte of stream (1 = stdout, 2 = stderr), then the bytes;
- \`{"type":"exit","exit_code":N,"timed_out":false}\`, then a close with code ${CLOSE_NORMAL};
- on failure \`{"type":"error","code":"INVALID_ARGUMENT","grpc_code":3,"message":"…"}\`, then a close with code ${CLOSE_ERROR_BASE} + grpc_code (e.g. 4003, 4005 NOT_FOUND, 4014 UNAVAILABLE).

A socket that closes before the exit (either side, any reason) kills the command's whole process tree, like a cancelled gRPC exec. A plain GET (no upgrade) is refused with 400.`;

/** Per upgrade request: who asked, and for which sandbox (set by the gate, read by the handler). */
const admitted = new WeakMap<FastifyRequest, { caller: Principal; sandboxId: string; sinceMs: number }>();

export function execWsRoutes(app: FastifyInstance, deps: RestDeps): void {
  const log = deps.log.child({ api: 'exec-ws' });
  app.route({
    method: 'GET',
    url: '/sandboxes/:name/exec/ws',
    schema: {
      tags: ['exec'],
      summary: 'Interactive exec over a WebSocket',
      operationId: 'execWebSocket',
      description: DESCRIPTION,
      params: Params,
      querystring: Query,
      response: {
        101: { description: `Switching Protocols: the exec protocol (subprotocol ${EXEC_WS_SUBPROTOCOL} when offered).`, type: 'null' },
        400: ErrorBody,
        401: ErrorBody,
        404: ErrorBody,
      },
    },
    // Before anything is accepted: the token, then the sandbox. A refusal is an HTTP answer, and
    // the upgrade never happens.
    preValidation: async (req: FastifyRequest, reply: FastifyReply) => {
      const sinceMs = performance.now();
      try {
        const caller = await httpCaller(deps.authenticator, upgradeCredentials(req.headers));
        const extra = Object.keys((req.query as Record<string, unknown>) ?? {}).filter((k) => k !== 'workspace');
        if (extra.length > 0) throw invalid(`unknown query parameter${extra.length > 1 ? 's' : ''}: ${extra.join(', ')} (allowed: workspace)`);
        const { name } = req.params as { name: string };
        const { workspace } = req.query as { workspace?: string };
        const { sandbox } = await deps.sandboxes.get({ name, workspace }, caller);
        admitted.set(req, { caller, sandboxId: sandbox?.metadata?.id ?? '', sinceMs });
      } catch (err) {
        return sendError(reply, err, log);
      }
    },
    handler: async (_req, reply) =>
      sendError(reply, invalid('this endpoint speaks WebSocket: connect with Upgrade: websocket (see the protocol in the description)'), log),
    wsHandler: (ws: WebSocket, req: FastifyRequest) => {
      const who = admitted.get(req);
      admitted.delete(req);
      if (!who) {
        ws.close(CLOSE_ERROR_BASE + Code.UNAUTHENTICATED, 'UNAUTHENTICATED');
        return;
      }
      // fastify's onResponse never runs for an upgraded request: the upgrade is the answer the
      // HTTP request metric counts (status 101, the time until the socket was accepted).
      deps.metrics.record('http.server.request.duration', (performance.now() - who.sinceMs) / 1000, {
        'http.request.method': 'GET',
        'http.route': req.routeOptions.url ?? '',
        'http.response.status_code': '101',
      });
      serveExec(ws, who.caller, who.sandboxId, deps, log);
    },
  });
}

function serveExec(ws: WebSocket, caller: Principal, sandboxId: string, deps: RestDeps, log: Logger): void {
  const call = new WsExecCall(ws, log);
  let started = false;
  let stdinEnded = false;
  ws.on('message', (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => {
    if (call.destroyed) return;
    const bytes = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
    try {
      if (!started) {
        if (isBinary) throw invalid('the first message must be a JSON text frame {"type":"start",…}');
        const msg = parseJson(bytes.toString('utf8'));
        if (msg.type !== 'start') throw invalid(`the first message must be {"type":"start",…}, got type ${JSON.stringify(msg.type)}`);
        const start = parseStart(msg, sandboxId);
        started = true;
        // The same entry point as gRPC ExecSandboxInteractive; the start is its first message.
        deps.exec.handleInteractive(call, caller);
        call.input({ start });
        return;
      }
      if (isBinary) {
        if (stdinEnded) throw invalid('stdin after stdin_eof');
        for (const stdin of byteSlices(bytes)) call.input({ stdin });
        return;
      }
      const input = parseControl(parseJson(bytes.toString('utf8')));
      if (input.stdin_eof) stdinEnded = true;
      call.input(input);
    } catch (err) {
      // A protocol error ends the exec: the error frame, the close, and (if it had started) the
      // kill that follows a close without an exit.
      call.refuse(err);
    }
  });
}
