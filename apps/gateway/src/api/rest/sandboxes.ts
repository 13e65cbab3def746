// /v1 routes: sandboxes: create / list / get / delete / stop / start. Each is the gRPC method of
// the same name (SandboxService, LifecycleService) behind the same gate, with a JSON face.
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { normaliseListLimit } from '@sandgate/core';
import type { RestDeps } from './index.ts';
import { ERROR_RESPONSES, NameParams, WorkspaceField, authenticate, callerOf } from './common.ts';
import { CreateSandboxBody, SandboxJson, createRequestOf, sandboxJson } from './sandbox-json.ts';

const WorkspaceQuery = Type.Object({ workspace: Type.Optional(WorkspaceField) }, { additionalProperties: false });

const ListQuery = Type.Object(
  {
    workspace: Type.Optional(WorkspaceField),
    label_selector: Type.Optional(Type.String({ description: 'k=v[,k2=v2]: equality only' })),
    limit: Type.Optional(Type.Integer({ minimum: 0, description: 'At most this many (default and cap as ListSandboxes)' })),
    offset: Type.Optional(Type.Integer({ minimum: 0, description: 'Skip this many (paging: next offset = offset + returned count)' })),
    all_workspaces: Type.Optional(Type.Boolean({ description: 'Every workspace (gateway admins only)' })),
  },
  { additionalProperties: false },
);

const SandboxList = Type.Object({
  sandboxes: Type.Array(SandboxJson),
  next_offset: Type.Optional(Type.Integer({ description: 'Present when the page was full: the offset of the next page' })),
});

const tags = ['sandboxes'];

export function sandboxRoutes(app: FastifyInstance, deps: RestDeps): void {
  const onRequest = authenticate(deps.authenticator);
  const responses = (ok: object) => ({ 200: ok, ...ERROR_RESPONSES });

  app.post<{ Body: Static<typeof CreateSandboxBody> }>(
    '/sandboxes',
    {
      onRequest,
      schema: {
        tags,
        operationId: 'createSandbox',
        summary: 'Create a sandbox (CreateSandbox); answers at once, in phase PROVISIONING (READY when claimed from a warm pool)',
        body: CreateSandboxBody,
        response: { ...responses(SandboxJson), 409: ERROR_RESPONSES[400] },
      },
    },
    async (req) => {
      const res = await deps.sandboxes.create(createRequestOf(req.body), callerOf(req));
      return sandboxJson(res.sandbox!);
    },
  );

  app.get<{ Querystring: Static<typeof ListQuery> }>(
    '/sandboxes',
    { onRequest, schema: { tags, operationId: 'listSandboxes', summary: 'List sandboxes (ListSandboxes)', querystring: ListQuery, response: responses(SandboxList) } },
    async (req) => {
      const q = req.query;
      const offset = q.offset ?? 0;
      const res = await deps.sandboxes.list({ workspace: q.workspace, label_selector: q.label_selector, limit: q.limit, offset, all_workspaces: q.all_workspaces }, callerOf(req));
      const sandboxes = res.sandboxes.map(sandboxJson);
      // A full page (of the limit the service applied) may have a next one; a short page is the last.
      return { sandboxes, ...(sandboxes.length > 0 && sandboxes.length === normaliseListLimit(q.limit) ? { next_offset: offset + sandboxes.length } : {}) };
    },
  );

  app.get<{ Params: Static<typeof NameParams>; Querystring: Static<typeof WorkspaceQuery> }>(
    '/sandboxes/:name',
    { onRequest, schema: { tags, operationId: 'getSandbox', summary: 'Get a sandbox (GetSandbox)', params: NameParams, querystring: WorkspaceQuery, response: responses(SandboxJson) } },
    async (req) => sandboxJson((await deps.sandboxes.get({ name: req.params.name, workspace: req.query.workspace }, callerOf(req))).sandbox!),
  );

  app.delete<{ Params: Static<typeof NameParams>; Querystring: Static<typeof WorkspaceQuery> }>(
    '/sandboxes/:name',
    {
      onRequest,
      schema: {
        tags,
        operationId: 'deleteSandbox',
        summary: 'Delete a sandbox (DeleteSandbox): its processes end and its record goes',
        params: NameParams,
        querystring: WorkspaceQuery,
        response: responses(Type.Object({ deleted: Type.Boolean() })),
      },
    },
    async (req) => ({ deleted: (await deps.sandboxes.delete({ name: req.params.name, workspace: req.query.workspace }, callerOf(req))).deleted ?? false }),
  );

  for (const [action, summary] of [
    ['stop', 'Stop a sandbox (StopSandbox): its main process and every exec end; the record stays'],
    ['start', 'Start a stopped or finished sandbox again (StartSandbox)'],
  ] as const) {
    app.post<{ Params: Static<typeof NameParams>; Querystring: Static<typeof WorkspaceQuery> }>(
      `/sandboxes/:name/${action}`,
      { onRequest, schema: { tags, operationId: `${action}Sandbox`, summary, params: NameParams, querystring: WorkspaceQuery, response: responses(SandboxJson) } },
      async (req) => {
        const request = { name: req.params.name, workspace: req.query.workspace };
        const res = action === 'stop' ? await deps.lifecycle.stop(request, callerOf(req)) : await deps.lifecycle.start(request, callerOf(req));
        return sandboxJson(res.sandbox!);
      },
    );
  }
}
