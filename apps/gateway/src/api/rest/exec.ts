// /v1 routes: exec, unary, JSON in and out. The request is ExecSandbox's, run by ExecService
// through an adapter that looks like the grpc-js call it serves: the same validation, access
// rule, slots, relay to the owner and kill procedure. The output is collected up to a cap (the
// answer is one JSON document); past it the exec is cancelled, which kills its tree, and the
// client is told to stream with the WebSocket exec instead.
import { Writable } from 'node:stream';
import { isUtf8 } from 'node:buffer';
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import type { ExecSandboxRequest } from '@sandgate/protocols';
import type { ClientExecEvent } from '../../exec/exec-service.ts';
import { Code, GatewayError } from '@sandgate/core';
import type { RestDeps } from './index.ts';
import { ERROR_RESPONSES, ErrorSchema, NameParams, WorkspaceField, authenticate, callerOf } from './common.ts';
import { HttpStatusError } from './errors.ts';

const MiB = 1024 * 1024;
/** What an answer holds unless the request asks otherwise (stdout and stderr together). */
export const DEFAULT_MAX_OUTPUT_BYTES = 16 * MiB;
/** The most a request may ask for: the answer is built in memory, base64 may add a third. */
export const HARD_MAX_OUTPUT_BYTES = 64 * MiB;
/** As ExecSandbox over gRPC, whose whole request is one message of at most 4 MiB. */
export const MAX_STDIN_BYTES = 4 * MiB;

export const ExecBody = Type.Object(
  {
    argv: Type.Array(Type.String(), { minItems: 1, description: 'The command and its arguments (no shell: use ["sh","-c","…"] for one)' }),
    env: Type.Optional(Type.Record(Type.String(), Type.String(), { description: 'Extra environment variables' })),
    workdir: Type.Optional(Type.String({ description: 'Working directory (default: the sandbox user’s home)' })),
    timeout_seconds: Type.Optional(Type.Integer({ minimum: 0, description: 'Kill the process tree after this long (exit code 124); 0: no timeout' })),
    stdin: Type.Optional(Type.String({ description: 'Standard input as text (UTF-8); closed after it' })),
    stdin_base64: Type.Optional(Type.String({ contentEncoding: 'base64', description: 'Standard input as base64 (binary); exclusive with stdin' })),
    max_output_bytes: Type.Optional(
      Type.Integer({ minimum: 1, maximum: HARD_MAX_OUTPUT_BYTES, description: `Cap on stdout + stderr (default ${DEFAULT_MAX_OUTPUT_BYTES}); past it the command is killed and the answer is 413` }),
    ),
    output_encoding: Type.Optional(
      Type.Union([Type.Literal('utf8'), Type.Literal('base64')], {
        description: 'utf8 (default): stdout/stderr as text, but a stream that is not valid UTF-8 comes as stdout_base64/stderr_base64 instead (never altered); base64: always the *_base64 fields',
      }),
    ),
  },
  { additionalProperties: false, title: 'ExecRequest' },
);
type ExecBody = Static<typeof ExecBody>;

export const ExecResult = Type.Object(
  {
    exit_code: Type.Integer(),
    timed_out: Type.Boolean({ description: 'timeout_seconds passed and the tree was killed (exit code 124)' }),
    stdout: Type.Optional(Type.String()),
    stderr: Type.Optional(Type.String()),
    stdout_base64: Type.Optional(Type.String({ contentEncoding: 'base64' })),
    stderr_base64: Type.Optional(Type.String({ contentEncoding: 'base64' })),
  },
  { title: 'ExecResult', description: 'Exactly one of stdout / stdout_base64, and one of stderr / stderr_base64' },
);
type ExecResult = Static<typeof ExecResult>;

const ExecQuery = Type.Object({ workspace: Type.Optional(WorkspaceField) }, { additionalProperties: false });

/** stdout and stderr of one exec, held up to a cap on their sum. */
export class OutputCollector {
  readonly cap: number;
  private readonly chunks: Record<'stdout' | 'stderr', Buffer[]> = { stdout: [], stderr: [] };
  private total = 0;
  private over = false;

  constructor(cap: number) {
    this.cap = cap;
  }

  /** Keeps `data`; false (keeping nothing more, ever) once the sum would pass the cap. */
  add(stream: 'stdout' | 'stderr', data: Uint8Array): boolean {
    if (this.over) return false;
    if (this.total + data.byteLength > this.cap) {
      this.over = true;
      return false;
    }
    this.total += data.byteLength;
    this.chunks[stream].push(Buffer.from(data.buffer, data.byteOffset, data.byteLength));
    return true;
  }

  get overflowed(): boolean {
    return this.over;
  }

  get bytes(): number {
    return this.total;
  }

  take(stream: 'stdout' | 'stderr'): Buffer {
    return Buffer.concat(this.chunks[stream]);
  }
}

/** One stream in the answer: text when asked and lossless, base64 otherwise. */
export function encodeStream(name: 'stdout' | 'stderr', data: Buffer, encoding: 'utf8' | 'base64'): Partial<ExecResult> {
  return encoding === 'utf8' && isUtf8(data) ? { [name]: data.toString('utf8') } : { [`${name}_base64`]: data.toString('base64') };
}

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** The stdin bytes of a request; INVALID_ARGUMENT for both fields, bad base64 or too much. */
export function stdinOf(body: Pick<ExecBody, 'stdin' | 'stdin_base64'>): Buffer {
  if (body.stdin !== undefined && body.stdin_base64 !== undefined) {
    throw new GatewayError(Code.INVALID_ARGUMENT, 'stdin and stdin_base64 are mutually exclusive: send text as stdin or bytes as stdin_base64');
  }
  if (body.stdin_base64 !== undefined && !BASE64.test(body.stdin_base64)) {
    throw new GatewayError(Code.INVALID_ARGUMENT, 'stdin_base64 is not valid base64 (RFC 4648, with padding)');
  }
  const stdin = body.stdin_base64 !== undefined ? Buffer.from(body.stdin_base64, 'base64') : Buffer.from(body.stdin ?? '', 'utf8');
  if (stdin.byteLength > MAX_STDIN_BYTES) {
    throw new GatewayError(Code.INVALID_ARGUMENT, `stdin is ${stdin.byteLength} bytes, more than ${MAX_STDIN_BYTES}: stream it with the WebSocket exec (/v1/sandboxes/{name}/exec/ws)`);
  }
  return stdin;
}

/**
 * What ExecService.handleUnary takes: a grpc-js server-writable call. Events are written to it,
 * it is ended on the exit, a failure arrives as emit('error', {code, details}); 'cancelled' is
 * the client going away (or the output passing its cap), which kills the exec's tree.
 */
class UnaryExecCall extends Writable {
  readonly request: ExecSandboxRequest;
  cancelled = false;
  exitCode: number | null = null;
  /** The supervisor's own word (ExecService passes Exit.timed_out on): not guessed from 124. */
  timedOut = false;
  private readonly output: OutputCollector;
  private readonly onOverflow: () => void;

  constructor(request: ExecSandboxRequest, output: OutputCollector, onOverflow: () => void) {
    super({ objectMode: true });
    this.request = request;
    this.output = output;
    this.onOverflow = onOverflow;
  }

  override _write(ev: ClientExecEvent, _enc: BufferEncoding, done: (err?: Error | null) => void): void {
    const kept = (ev.stdout?.data ? this.output.add('stdout', ev.stdout.data) : true) && (ev.stderr?.data ? this.output.add('stderr', ev.stderr.data) : true);
    if (ev.exit) {
      this.exitCode = ev.exit.exit_code ?? 0;
      this.timedOut = ev.exit.timed_out ?? false;
    }
    done();
    if (!kept && !this.cancelled) this.onOverflow();
  }

  cancel(): void {
    if (this.cancelled) return;
    this.cancelled = true;
    this.emit('cancelled');
  }
}

export function execRoutes(app: FastifyInstance, deps: RestDeps): void {
  app.post<{ Params: Static<typeof NameParams>; Querystring: Static<typeof ExecQuery>; Body: ExecBody }>(
    '/sandboxes/:name/exec',
    {
      onRequest: authenticate(deps.authenticator),
      // base64 of MAX_STDIN_BYTES and the rest of the document.
      bodyLimit: Math.ceil((MAX_STDIN_BYTES * 4) / 3) + MiB,
      schema: {
        tags: ['exec'],
        operationId: 'execSandbox',
        summary: 'Run a command to completion (ExecSandbox) and get its exit code and output',
        description:
          'The output is collected up to max_output_bytes; past it the command is killed and the answer is 413. A client that disconnects kills the command. For streaming, a terminal or large output use the WebSocket exec (/v1/sandboxes/{name}/exec/ws).',
        params: NameParams,
        querystring: ExecQuery,
        body: ExecBody,
        response: { 200: ExecResult, ...ERROR_RESPONSES, 413: ErrorSchema },
      },
    },
    async (req, reply) => {
      const caller = callerOf(req);
      const body = req.body;
      const stdin = stdinOf(body);
      const cap = body.max_output_bytes ?? DEFAULT_MAX_OUTPUT_BYTES;
      // The path names the sandbox; ExecSandbox takes its id (the same lookup GetSandbox does).
      const { sandbox } = await deps.sandboxes.get({ name: req.params.name, workspace: req.query.workspace }, caller);
      const request: ExecSandboxRequest = {
        sandbox_id: sandbox!.metadata!.id!,
        command: body.argv,
        environment: body.env ?? {},
        workdir: body.workdir,
        timeout_seconds: body.timeout_seconds,
        stdin,
      };
      const output = new OutputCollector(cap);
      let timedOut = false;
      const exitCode = await new Promise<number>((resolve, reject) => {
        let settled = false;
        const settle = (fn: () => void) => {
          if (settled) return;
          settled = true;
          reply.raw.off('close', clientGone);
          fn();
        };
        // Both ways out below settle first: cancelling makes the service fail the call, and
        // that failure must not be what the client is told.
        const cancel = () => {
          call.cancel();
          call.destroy();
        };
        const call = new UnaryExecCall(request, output, () => {
          settle(() =>
            reject(
              new HttpStatusError(
                413,
                Code.RESOURCE_EXHAUSTED,
                `the command's output passed ${cap} bytes (max_output_bytes; default ${DEFAULT_MAX_OUTPUT_BYTES}, at most ${HARD_MAX_OUTPUT_BYTES}) and the command was killed; for large output use the WebSocket exec (/v1/sandboxes/{name}/exec/ws), which streams it`,
              ),
            ),
          );
          cancel();
        });
        // The HTTP client went away before its answer: a gRPC cancel, the tree is killed.
        const clientGone = () => {
          settle(() => reject(new GatewayError(Code.CANCELLED, 'client went away')));
          cancel();
        };
        reply.raw.on('close', clientGone);
        // Gone already (while the route looked the sandbox up): nobody would see this exec.
        if (reply.raw.destroyed) return clientGone();
        call.on('error', (err: unknown) => settle(() => reject(err)));
        call.on('finish', () =>
          settle(() => (call.exitCode === null ? reject(new GatewayError(Code.UNAVAILABLE, 'exec ended without an exit status')) : ((timedOut = call.timedOut), resolve(call.exitCode)))),
        );
        deps.exec.handleUnary(call as never, caller);
      });
      const encoding = body.output_encoding ?? 'utf8';
      const result: ExecResult = {
        exit_code: exitCode,
        timed_out: timedOut,
        ...encodeStream('stdout', output.take('stdout'), encoding),
        ...encodeStream('stderr', output.take('stderr'), encoding),
      };
      return result;
    },
  );
}
