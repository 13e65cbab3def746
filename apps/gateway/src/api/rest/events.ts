// /v1 routes: logs and watch as Server-Sent Events. Both are WatchService's (GetSandboxLogs,
// WatchSandbox): the routes resolve the name, then hand WatchService an SSE 'call' (sse.ts).
// Every event carries an id; a client that reconnects with Last-Event-ID resumes right after
// it, without duplicates or gaps (the id is a position in the sandbox's Redis streams).
import { PassThrough } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import type { SandboxLogLine, WatchSandboxRequest } from '@sandgate/protocols';
import type { Principal } from '@sandgate/core';
import type { RestDeps } from './index.ts';
import { ERROR_RESPONSES, NameParams, WorkspaceField, authenticate, callerOf } from './common.ts';
import { sandboxJson } from './sandbox-json.ts';
import { SseWatchCall, decodeEventId, encodeEventId, formatEvent } from './sse.ts';

const LogLineJson = Type.Object(
  {
    timestamp_ms: Type.Integer(),
    level: Type.String(),
    target: Type.String(),
    source: Type.String({ description: 'gateway or sandbox' }),
    message: Type.String(),
  },
  { title: 'LogLine' },
);

const LogsQuery = Type.Object(
  {
    workspace: Type.Optional(WorkspaceField),
    follow: Type.Optional(Type.Boolean({ description: 'Stream as Server-Sent Events: the tail, then new lines as they come (also with Accept: text/event-stream)' })),
    lines: Type.Optional(Type.Integer({ minimum: 1, maximum: 2000, description: 'How many of the last lines (default 2000; 200 when following)' })),
    since_ms: Type.Optional(Type.Integer({ minimum: 0, description: 'Only lines at or after this time (ms since the epoch)' })),
    source: Type.Optional(Type.Array(Type.String(), { description: 'Only these sources (repeat the parameter); "" counts as gateway' })),
    min_level: Type.Optional(Type.String({ description: 'ERROR, WARN, INFO, DEBUG or TRACE' })),
  },
  { additionalProperties: false },
);

const EventsQuery = Type.Object(
  {
    workspace: Type.Optional(WorkspaceField),
    follow_status: Type.Optional(Type.Boolean({ description: 'Send every change of the sandbox (default true)' })),
    follow_logs: Type.Optional(Type.Boolean({ description: 'Send log lines too: the tail, then new ones (default false)' })),
    stop_on_terminal: Type.Optional(Type.Boolean({ description: 'End once the sandbox reaches a terminal phase (default false)' })),
    log_tail_lines: Type.Optional(Type.Integer({ minimum: 1, maximum: 2000, description: 'Lines of the tail with follow_logs (default 200)' })),
    log_since_ms: Type.Optional(Type.Integer({ minimum: 0 })),
    log_source: Type.Optional(Type.Array(Type.String())),
    log_min_level: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
);

const LastEventIdHeader = Type.Object({
  'last-event-id': Type.Optional(Type.String({ description: 'The id of the last event received: the stream resumes right after it' })),
});

const SSE_DESCRIPTION =
  'text/event-stream. Events: `sandbox` (data: a Sandbox), `log` (data: a LogLine), each with an `id:` to send back as Last-Event-ID; ' +
  '`end` (the stream is over: deleted, terminal with stop_on_terminal, or nothing to follow); `error` (data: the error shape). Comment lines every ~15 s keep idle proxies open.';

function logJson(l: SandboxLogLine): Static<typeof LogLineJson> {
  return { timestamp_ms: Number(l.timestamp_ms ?? 0), level: l.level ?? '', target: l.target ?? '', source: l.source ?? '', message: l.message ?? '' };
}

/** The request asks for a stream: `?follow=true`, or an EventSource's Accept header. */
function wantsStream(req: FastifyRequest, follow: boolean | undefined): boolean {
  if (follow !== undefined) return follow;
  return (req.headers.accept ?? '').includes('text/event-stream');
}

/** Opens the SSE answer and runs the watch into it until either side ends it. */
function streamWatch(deps: RestDeps, req: FastifyRequest, reply: FastifyReply, caller: Principal, request: WatchSandboxRequest, kinds: { sandbox: boolean }): FastifyReply {
  const lastEventId = req.headers['last-event-id'];
  const resumeFrom = typeof lastEventId === 'string' && lastEventId !== '' ? decodeEventId(lastEventId) : undefined;
  const out = new PassThrough();
  const call = new SseWatchCall(request, reply.raw, out, (ev) => {
    const id = ev.position ? encodeEventId(ev.position) : undefined;
    if (ev.sandbox) return kinds.sandbox ? formatEvent('sandbox', sandboxJson(ev.sandbox), id) : null;
    if (ev.log) return formatEvent('log', logJson(ev.log), id);
    return null;
  });
  reply
    .header('content-type', 'text/event-stream; charset=utf-8')
    .header('cache-control', 'no-cache')
    // nginx and similar buffer responses unless told not to.
    .header('x-accel-buffering', 'no')
    .send(out);
  void deps.watch.handleWatch(call as never, caller, { positions: true, resumeFrom });
  return reply;
}

const tags = ['events'];
const sseResponse = { description: SSE_DESCRIPTION, content: { 'text/event-stream': { schema: { type: 'string' } } } };

export function eventRoutes(app: FastifyInstance, deps: RestDeps): void {
  const onRequest = authenticate(deps.authenticator);

  app.get<{ Params: Static<typeof NameParams>; Querystring: Static<typeof LogsQuery> }>(
    '/sandboxes/:name/logs',
    {
      onRequest,
      schema: {
        tags,
        operationId: 'getSandboxLogs',
        summary: "A sandbox's log (GetSandboxLogs); with follow=true or Accept: text/event-stream, a stream of lines (Server-Sent Events, resumable with Last-Event-ID)",
        params: NameParams,
        querystring: LogsQuery,
        headers: LastEventIdHeader,
        response: {
          200: {
            description: `JSON (the lines), or with follow ${SSE_DESCRIPTION}`,
            content: {
              'application/json': { schema: Type.Object({ logs: Type.Array(LogLineJson), buffer_total: Type.Integer({ description: 'Lines the buffer holds' }) }) },
              'text/event-stream': { schema: { type: 'string' } },
            },
          },
          ...ERROR_RESPONSES,
        },
      },
    },
    async (req, reply) => {
      const caller = callerOf(req);
      const q = req.query;
      const { sandbox } = await deps.sandboxes.get({ name: req.params.name, workspace: q.workspace }, caller);
      const id = sandbox!.metadata!.id!;
      if (wantsStream(req, q.follow)) {
        const request: WatchSandboxRequest = {
          id,
          follow_logs: true,
          log_tail_lines: q.lines ?? 200,
          log_since_ms: q.since_ms,
          log_sources: q.source ?? [],
          log_min_level: q.min_level,
        };
        return streamWatch(deps, req, reply, caller, request, { sandbox: false });
      }
      const res = await deps.watch.getLogs({ sandbox_id: id, lines: q.lines, since_ms: q.since_ms, sources: q.source ?? [], min_level: q.min_level }, caller);
      return reply.type('application/json').send({ logs: res.logs.map(logJson), buffer_total: res.buffer_total });
    },
  );

  app.get<{ Params: Static<typeof NameParams>; Querystring: Static<typeof EventsQuery> }>(
    '/sandboxes/:name/events',
    {
      onRequest,
      schema: {
        tags,
        operationId: 'watchSandbox',
        summary: "A sandbox's changes and log lines as Server-Sent Events (WatchSandbox), resumable with Last-Event-ID",
        params: NameParams,
        querystring: EventsQuery,
        headers: LastEventIdHeader,
        response: { 200: sseResponse, ...ERROR_RESPONSES },
      },
    },
    async (req, reply) => {
      const caller = callerOf(req);
      const q = req.query;
      const { sandbox } = await deps.sandboxes.get({ name: req.params.name, workspace: q.workspace }, caller);
      const request: WatchSandboxRequest = {
        id: sandbox!.metadata!.id!,
        follow_status: q.follow_status ?? true,
        follow_logs: q.follow_logs ?? false,
        stop_on_terminal: q.stop_on_terminal ?? false,
        log_tail_lines: q.log_tail_lines ?? 200,
        log_since_ms: q.log_since_ms,
        log_sources: q.log_source ?? [],
        log_min_level: q.log_min_level,
      };
      return streamWatch(deps, req, reply, caller, request, { sandbox: true });
    },
  );
}
