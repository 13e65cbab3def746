// /v1/pools: warm pools over HTTP (SetPool, ListPools, DeletePool), through the same PoolService
// as gRPC (gateway admins only). A create claims from a pool with `pool` in its body (the
// annotation sandgate.dev/pool, as gRPC clients send it).
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { decodeStruct, encodeStruct, type Pool } from '@sandgate/protocols';
import type { RestDeps } from './index.ts';
import { authenticate, callerOf, ERROR_RESPONSES } from './common.ts';

const tags = ['pools'];

const Resources = Type.Object(
  {
    cpu: Type.Optional(Type.String({ description: 'e.g. 500m or 2' })),
    memory: Type.Optional(Type.String({ description: 'e.g. 256Mi' })),
  },
  { additionalProperties: false },
);

const PoolJson = Type.Object(
  {
    name: Type.String(),
    size: Type.Integer(),
    image: Type.String(),
    resources: Type.Optional(Resources),
    generation: Type.Integer({ description: 'grows with every change of the template (image, resources, policy)' }),
    ready: Type.Integer({ description: 'members Ready to be claimed now' }),
    starting: Type.Integer({ description: 'members still starting' }),
    created_at_ms: Type.Integer(),
    consecutive_failures: Type.Integer({ description: "members of this template that could not start, in a row (0 while they start fine)" }),
    retry_at_ms: Type.Integer({ description: 'while failing: no member is started before this time (ms since the epoch); 0 otherwise' }),
    last_error: Type.String({ description: 'while failing: why the last member could not start' }),
    auto_match: Type.Boolean({ description: 'creates that name no pool but ask for exactly this template claim from it too' }),
  },
  { $id: 'Pool' },
);

const SetPoolBody = Type.Object(
  {
    size: Type.Integer({ minimum: 0, description: 'members kept started (0 to 64)' }),
    image: Type.Optional(Type.String({ description: "default: the gateway's default image" })),
    resources: Type.Optional(Resources),
    auto_match: Type.Optional(Type.Boolean({ description: 'also serve creates that name no pool but ask for exactly this template (image, resources; no policy); default false' })),
  },
  { additionalProperties: false, title: 'SetPool' },
);

const PoolParams = Type.Object({ name: Type.String({ description: 'The pool name', minLength: 1 }) }, { additionalProperties: false });

function poolJson(pool: Pool): Static<typeof PoolJson> {
  const limits = pool.resources?.byteLength ? (decodeStruct(pool.resources).limits as Record<string, string> | undefined) : undefined;
  return {
    name: pool.name,
    size: pool.size,
    image: pool.image,
    ...(limits ? { resources: { ...(limits.cpu ? { cpu: String(limits.cpu) } : {}), ...(limits.memory ? { memory: String(limits.memory) } : {}) } } : {}),
    generation: Number(pool.generation),
    ready: pool.ready,
    starting: pool.starting,
    created_at_ms: Number(pool.created_at_ms),
    consecutive_failures: pool.consecutive_failures ?? 0,
    retry_at_ms: Number(pool.retry_at_ms ?? 0),
    last_error: pool.last_error ?? '',
    auto_match: pool.auto_match ?? false,
  };
}

export function poolRoutes(app: FastifyInstance, deps: RestDeps): void {
  const onRequest = authenticate(deps.authenticator);
  const responses = (ok: object) => ({ 200: ok, ...ERROR_RESPONSES });

  app.get('/pools', { onRequest, schema: { tags, operationId: 'listPools', summary: 'List warm pools (ListPools; gateway admins)', response: responses(Type.Object({ pools: Type.Array(PoolJson) })) } }, async (req) => {
    const res = await deps.pools.list(callerOf(req));
    return { pools: res.pools.map(poolJson) };
  });

  app.put<{ Params: Static<typeof PoolParams>; Body: Static<typeof SetPoolBody> }>(
    '/pools/:name',
    { onRequest, schema: { tags, operationId: 'setPool', summary: 'Create or replace a warm pool (SetPool; gateway admins)', params: PoolParams, body: SetPoolBody, response: responses(PoolJson) } },
    async (req) => {
      const limits: Record<string, string> = { ...(req.body.resources ?? {}) };
      const pool = await deps.pools.set(
        {
          name: req.params.name,
          size: req.body.size,
          image: req.body.image,
          resources: Object.keys(limits).length ? encodeStruct({ limits }) : undefined,
          auto_match: req.body.auto_match ?? false,
        },
        callerOf(req),
      );
      return poolJson(pool);
    },
  );

  app.delete<{ Params: Static<typeof PoolParams> }>(
    '/pools/:name',
    { onRequest, schema: { tags, operationId: 'deletePool', summary: 'Delete a warm pool and its unclaimed members (DeletePool; gateway admins)', params: PoolParams, response: responses(Type.Object({ deleted: Type.Boolean() })) } },
    async (req) => deps.pools.delete(req.params.name, callerOf(req)),
  );
}
