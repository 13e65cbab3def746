// /v1 routes: file upload and download through the supervisor (FileService; no SSH, so no image
// needs sftp-server).
//
//   PUT /v1/sandboxes/{name}/files?path=P[&archive=true][&workspace=W]
//       The raw request body is streamed into the file (never parsed, never buffered whole, no
//       body size limit: the sandbox's disk is the limit). `archive=true` or
//       `Content-Type: application/x-tar`: the body is a tar extracted into the directory P.
//       201 `{path, bytes, archive}` once the file is complete at P (written beside it, fsynced,
//       renamed into place). A client that goes away mid-body aborts: nothing is left at P.
//   GET /v1/sandboxes/{name}/files?path=P[&archive=true][&workspace=W]
//       A file as `application/octet-stream` with its Content-Length; a directory as a tar
//       (`application/x-tar`), whether or not `archive=true` was given (archive=true on a file is
//       FAILED_PRECONDITION). The header `x-sandgate-path` names the absolute path.
//
// Errors before the body starts are the one JSON error shape (errors.ts). Once a download's body
// has started, a failure can no longer change the status: the response is aborted (the connection
// is reset before the announced Content-Length, or the chunked body is cut without its last
// chunk), which every HTTP client reports as an incomplete transfer.
import path from 'node:path';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { GatewayError, Code } from '@sandgate/core';
import type { RestDeps } from './index.ts';
import { httpCaller } from './gate.ts';
import { sendError } from './errors.ts';
import { FileService } from '../../files/file-service.ts';

const Params = Type.Object({ name: Type.String({ description: 'The sandbox name' }) });
const Query = Type.Object(
  {
    path: Type.String({ minLength: 1, description: "The file or directory inside the sandbox: absolute, or relative to its working directory (/sandbox). No '..'." }),
    archive: Type.Optional(Type.Boolean({ description: 'A directory as a tar stream (upload: extract into path; download: tar of path)' })),
    workspace: Type.Optional(Type.String({ description: "The sandbox's workspace (default: the caller's own)" })),
  },
  { additionalProperties: false },
);
const QUERY_FIELDS = new Set(Object.keys(Query.properties));
const ErrorSchema = Type.Object({ error: Type.Object({ code: Type.String(), grpc_code: Type.Integer(), message: Type.String() }) });
const UploadResult = Type.Object({
  path: Type.String({ description: 'The absolute path written inside the sandbox' }),
  bytes: Type.Integer({ description: 'Bytes received (the tar size for an archive)' }),
  archive: Type.Boolean(),
});

type FileQuery = Static<typeof Query>;
type FileRoute = FastifyRequest<{ Params: Static<typeof Params>; Querystring: FileQuery }>;

const errorResponses = {
  400: ErrorSchema,
  401: ErrorSchema,
  403: ErrorSchema,
  404: ErrorSchema,
  412: ErrorSchema,
  503: ErrorSchema,
};

/** Query parameters this route does not know are refused, never ignored. */
function checkQuery(req: FileRoute): void {
  const unknown = [...new URL(req.url, 'http://x').searchParams.keys()].filter((k) => !QUERY_FIELDS.has(k));
  if (unknown.length) throw new GatewayError(Code.INVALID_ARGUMENT, `unknown query parameter(s) ${unknown.join(', ')}: this route takes path, archive and workspace`);
  // The body schema only documents the raw stream (the route never parses a body): its check is moot.
  const invalid = req.validationError as (Error & { validationContext?: string }) | undefined;
  if (invalid && invalid.validationContext !== 'body') throw new GatewayError(Code.INVALID_ARGUMENT, `bad query: ${invalid.message}`);
}

export function fileRoutes(app: FastifyInstance, deps: RestDeps): void {
  const files = deps.files ?? new FileService({ store: deps.store, router: deps.router, workspaces: deps.workspaces, log: deps.log });

  /** The caller, then the sandbox's id (NOT_FOUND for one it may not see, as GetSandbox answers). */
  const resolve = async (req: FileRoute) => {
    const caller = await httpCaller(deps.authenticator, req.headers);
    checkQuery(req);
    const { sandbox } = await deps.sandboxes.get({ name: req.params.name, workspace: req.query.workspace }, caller);
    return { caller, sandboxId: sandbox?.metadata?.id ?? '' };
  };

  // Its own scope: the body of an upload must reach the handler as the raw stream, whatever its
  // Content-Type (a JSON upload is a file too), so every parser is replaced by one that reads nothing.
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined));

    scope.put(
      '/sandboxes/:name/files',
      {
        attachValidation: true,
        schema: {
          tags: ['files'],
          summary: 'Upload a file (or a tar of a directory) into a sandbox',
          description:
            'The raw body is streamed into the file at `path`, which appears only complete (written beside it, fsynced, renamed). `archive=true` or `Content-Type: application/x-tar`: the body is a tar extracted into the directory `path` (entries with `..`, absolute names, hard links, or writing through a symbolic link are refused). No body size limit but the sandbox\'s disk.',
          operationId: 'uploadFile',
          params: Params,
          querystring: Query,
          consumes: ['application/octet-stream', 'application/x-tar'],
          body: Type.String({ format: 'binary', description: 'The file, or (archive) a tar of the directory; streamed, never parsed' }),
          response: { 201: UploadResult, ...errorResponses },
        },
      },
      async (req: FileRoute, reply: FastifyReply) => {
        try {
          const { caller, sandboxId } = await resolve(req);
          const archive = req.query.archive ?? /^application\/x-tar\b/i.test(req.headers['content-type'] ?? '');
          const result = await files.upload({ sandboxId, path: req.query.path, archive }, caller, req.raw);
          return reply.code(201).send(result);
        } catch (err) {
          // The body may be unread (refused before it was wanted): the connection cannot be reused.
          if (!req.raw.readableEnded) reply.header('connection', 'close');
          return sendError(reply, err, deps.log);
        }
      },
    );

    scope.get(
      '/sandboxes/:name/files',
      {
        attachValidation: true,
        exposeHeadRoute: false,
        schema: {
          tags: ['files'],
          summary: 'Download a file (or a directory as a tar) from a sandbox',
          description:
            'A file as `application/octet-stream` with its Content-Length; a directory as `application/x-tar` (with or without `archive=true`). `x-sandgate-path` names the absolute path. Errors before the body are JSON; a failure after the body started aborts the response (an incomplete body).',
          operationId: 'downloadFile',
          params: Params,
          querystring: Query,
          produces: ['application/octet-stream', 'application/x-tar'],
          response: {
            200: { description: 'The file, or a tar of the directory', content: { 'application/octet-stream': { schema: Type.String({ format: 'binary' }) }, 'application/x-tar': { schema: Type.String({ format: 'binary' }) } } },
            ...errorResponses,
          },
        },
      },
      async (req: FileRoute, reply: FastifyReply) => {
        let download;
        try {
          const { caller, sandboxId } = await resolve(req);
          download = await files.download({ sandboxId, path: req.query.path, archive: req.query.archive ?? false }, caller);
        } catch (err) {
          return sendError(reply, err, deps.log);
        }
        const { info, body } = download;
        // The client going away abandons the transfer (the supervisor's worker stops reading).
        reply.raw.once('close', () => {
          if (!reply.raw.writableFinished) body.destroy();
        });
        // Past this point the status is sent: a failure can only cut the body short.
        body.once('error', (err: unknown) => {
          deps.log.warn('file download failed after its body started; the response is aborted', { path: info.path, err });
          reply.raw.destroy();
        });
        const base = path.posix.basename(info.path ?? '') || 'download';
        reply
          .code(200)
          .header('content-type', info.archive ? 'application/x-tar' : 'application/octet-stream')
          .header('content-disposition', `attachment; filename="${(info.archive ? `${base}.tar` : base).replace(/["\\\r\n]/g, '_')}"`)
          .header('x-sandgate-path', encodeURI(info.path ?? ''));
        if (!info.archive && typeof info.size === 'number') reply.header('content-length', String(info.size));
        return reply.send(body);
      },
    );
  });
}
