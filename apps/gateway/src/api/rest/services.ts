// /v1 routes: exposed services' management (ExposeService, GetService, ListServices, DeleteService
// over HTTP) and signed public links, through the same ServiceEndpointService as gRPC. The
// sandbox's unnamed endpoint is the service `-` in paths (a name no service can have).
// The services themselves are served on their own hosts by services/service-proxy.ts.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import type { RestDeps } from './index.ts';
import { authenticate, callerOf } from './common.ts';
import { sendError } from './errors.ts';
import { invalid, type Principal } from '@sandgate/core';
import type { ServiceEndpointResponse as ServiceEndpointResponseMessage } from '@sandgate/protocols';

/** The path segment naming a sandbox's unnamed endpoint. */
export const UNNAMED_SERVICE = '-';

const ErrorBody = Type.Object({
  error: Type.Object({ code: Type.String(), grpc_code: Type.Integer(), message: Type.String() }),
});

const ObjectMeta = Type.Object({
  id: Type.Optional(Type.String()),
  name: Type.Optional(Type.String()),
  created_at_ms: Type.Optional(Type.Integer()),
  labels: Type.Record(Type.String(), Type.String()),
  annotations: Type.Record(Type.String(), Type.String()),
  resource_version: Type.Optional(Type.Integer()),
  workspace: Type.Optional(Type.String()),
  deletion_timestamp_ms: Type.Optional(Type.Integer()),
});

const ServiceEndpointResponse = Type.Object(
  {
    endpoint: Type.Object({
      metadata: ObjectMeta,
      sandbox_id: Type.String(),
      sandbox_name: Type.String(),
      service_name: Type.String({ description: "'' for the sandbox's unnamed endpoint" }),
      target_port: Type.Integer(),
      domain: Type.Boolean(),
    }),
    url: Type.String({ description: 'where the service answers (bearer token of a caller of its workspace, or a signed link)' }),
  },
  { $id: 'ServiceEndpointResponse' },
);

const SandboxParams = Type.Object({ name: Type.String({ description: 'sandbox name' }) });
const ServiceParams = Type.Object({
  name: Type.String({ description: 'sandbox name' }),
  service: Type.String({ description: `service name, or '${UNNAMED_SERVICE}' for the sandbox's unnamed endpoint` }),
});
const WorkspaceQuery = Type.Object({ workspace: Type.Optional(Type.String({ description: "the sandbox's workspace (default: the caller's own)" })) });
const PageQuery = Type.Object({
  workspace: Type.Optional(Type.String({ description: "the workspace (default: the caller's own)" })),
  limit: Type.Optional(Type.Integer({ minimum: 0, description: '0 means 100; capped at 1000' })),
  offset: Type.Optional(Type.Integer({ minimum: 0 })),
});
const ExposeBody = Type.Object({ target_port: Type.Integer({ description: 'port inside the sandbox (127.0.0.1), 1–65535' }) }, { additionalProperties: false });
const LinkBody = Type.Object(
  { expires_in_seconds: Type.Optional(Type.Integer({ minimum: 0, description: 'lifetime of the link; 0 or absent: one hour; at most 604800 (7 days)' })) },
  { additionalProperties: false },
);
const LinkResponse = Type.Object({
  url: Type.String({ description: 'the service URL with its signature; opens the service without a token until it expires' }),
  expires_at_ms: Type.Integer(),
});
const ListResponse = Type.Object({ services: Type.Array(ServiceEndpointResponse) });
const DeleteResponse = Type.Object({ deleted: Type.Boolean({ description: 'false: there was no such endpoint' }) });

const errors = { 400: ErrorBody, 401: ErrorBody, 403: ErrorBody, 404: ErrorBody, 409: ErrorBody, 412: ErrorBody, 500: ErrorBody, 503: ErrorBody };
const TAGS = ['services'];

const serviceOf = (raw: string) => (raw === UNNAMED_SERVICE ? '' : raw);

/** A ServiceEndpointResponse with every field present (decoded protos leave defaults out). */
function endpointBody(r: ServiceEndpointResponseMessage): Static<typeof ServiceEndpointResponse> {
  const e = r.endpoint ?? {};
  const m = e.metadata;
  return {
    endpoint: {
      metadata: {
        id: m?.id ?? '',
        name: m?.name ?? '',
        created_at_ms: m?.created_at_ms ?? 0,
        labels: m?.labels ?? {},
        annotations: m?.annotations ?? {},
        resource_version: m?.resource_version ?? 0,
        workspace: m?.workspace ?? '',
        deletion_timestamp_ms: m?.deletion_timestamp_ms ?? 0,
      },
      sandbox_id: e.sandbox_id ?? '',
      sandbox_name: e.sandbox_name ?? '',
      service_name: e.service_name ?? '',
      target_port: e.target_port ?? 0,
      domain: e.domain ?? true,
    },
    url: r.url ?? '',
  };
}

/** Runs `fn` with the caller (the route's `authenticate` hook established it), answers its result or the one error shape. */
function handle<Req extends FastifyRequest>(deps: RestDeps, fn: (req: Req, caller: Principal) => Promise<unknown>) {
  return async (req: Req, reply: FastifyReply) => {
    try {
      const caller = callerOf(req);
      // Schema failures (a missing or unknown field, a wrong type) in the one error shape, after
      // authentication as every other failure.
      if (req.validationError) throw invalid(req.validationError.message);
      return reply.send(await fn(req, caller));
    } catch (err) {
      return sendError(reply, err, deps.log);
    }
  };
}

export function serviceRoutes(parent: FastifyInstance, deps: RestDeps): void {
  // A scope of their own whose every request is authenticated before its body is parsed: an
  // unauthenticated request gets 401, never a verdict on its body.
  void parent.register(async (app) => {
    app.addHook('onRequest', authenticate(deps.authenticator));
    serviceRoutesIn(app, deps);
  });
}

function serviceRoutesIn(app: FastifyInstance, deps: RestDeps): void {
  const { services } = deps;
  type ServiceReq = FastifyRequest<{ Params: Static<typeof ServiceParams>; Querystring: Static<typeof WorkspaceQuery> }>;

  app.put(
    '/sandboxes/:name/services/:service',
    {
      attachValidation: true,
      schema: {
        tags: TAGS,
        summary: 'Expose a port of the sandbox as a service (ExposeService); exposing again replaces the port',
        operationId: 'exposeService',
        params: ServiceParams,
        querystring: WorkspaceQuery,
        body: ExposeBody,
        response: { 200: ServiceEndpointResponse, ...errors },
      },
    },
    handle(deps, (req: FastifyRequest<{ Params: Static<typeof ServiceParams>; Querystring: Static<typeof WorkspaceQuery>; Body: Static<typeof ExposeBody> }>, caller) =>
      services
        .expose({ sandbox: req.params.name, service: serviceOf(req.params.service), target_port: req.body.target_port, domain: true, workspace: req.query.workspace }, caller)
        .then(endpointBody),
    ),
  );

  app.get(
    '/sandboxes/:name/services',
    {
      attachValidation: true,
      schema: {
        tags: TAGS,
        summary: "The sandbox's exposed services, oldest first (ListServices with a sandbox filter)",
        operationId: 'listSandboxServices',
        params: SandboxParams,
        querystring: PageQuery,
        response: { 200: ListResponse, ...errors },
      },
    },
    handle(deps, (req: FastifyRequest<{ Params: Static<typeof SandboxParams>; Querystring: Static<typeof PageQuery> }>, caller) =>
      services
        .list({ sandbox: req.params.name, workspace: req.query.workspace, limit: req.query.limit, offset: req.query.offset }, caller)
        .then((res) => ({ services: res.services.map(endpointBody) })),
    ),
  );

  app.get(
    '/services',
    {
      attachValidation: true,
      schema: {
        tags: TAGS,
        summary: "A workspace's exposed services, oldest first (ListServices)",
        operationId: 'listServices',
        querystring: Type.Object({
          ...PageQuery.properties,
          all_workspaces: Type.Optional(Type.Boolean({ description: 'every workspace (gateway admins only; not with workspace)' })),
        }),
        response: { 200: ListResponse, ...errors },
      },
    },
    handle(deps, (req: FastifyRequest<{ Querystring: Static<typeof PageQuery> & { all_workspaces?: boolean } }>, caller) =>
      services
        .list({ workspace: req.query.workspace, limit: req.query.limit, offset: req.query.offset, all_workspaces: req.query.all_workspaces }, caller)
        .then((res) => ({ services: res.services.map(endpointBody) })),
    ),
  );

  app.get(
    '/sandboxes/:name/services/:service',
    {
      attachValidation: true,
      schema: {
        tags: TAGS,
        summary: 'One exposed service and its URL (GetService)',
        operationId: 'getService',
        params: ServiceParams,
        querystring: WorkspaceQuery,
        response: { 200: ServiceEndpointResponse, ...errors },
      },
    },
    handle(deps, (req: ServiceReq, caller) => services.get({ sandbox: req.params.name, service: serviceOf(req.params.service), workspace: req.query.workspace }, caller).then(endpointBody)),
  );

  app.delete(
    '/sandboxes/:name/services/:service',
    {
      attachValidation: true,
      schema: {
        tags: TAGS,
        summary: 'Stop exposing a service (DeleteService); deleted=false if there was none',
        operationId: 'deleteService',
        params: ServiceParams,
        querystring: WorkspaceQuery,
        response: { 200: DeleteResponse, ...errors },
      },
    },
    handle(deps, (req: ServiceReq, caller) =>
      services.delete({ sandbox: req.params.name, service: serviceOf(req.params.service), workspace: req.query.workspace }, caller).then((res) => ({ deleted: res.deleted ?? false })),
    ),
  );

  app.post(
    '/sandboxes/:name/services/:service/links',
    {
      attachValidation: true,
      schema: {
        tags: TAGS,
        summary: 'A signed public link to the service: opens it without a token until it expires (anyone holding the link can)',
        operationId: 'createServiceLink',
        params: ServiceParams,
        querystring: WorkspaceQuery,
        body: Type.Optional(LinkBody),
        response: { 200: LinkResponse, ...errors },
      },
    },
    handle(deps, (req: FastifyRequest<{ Params: Static<typeof ServiceParams>; Querystring: Static<typeof WorkspaceQuery>; Body: Static<typeof LinkBody> | undefined }>, caller) =>
      services.createLink(
        { sandbox: req.params.name, service: serviceOf(req.params.service), workspace: req.query.workspace, expires_in_seconds: req.body?.expires_in_seconds },
        caller,
      ),
    ),
  );
}
