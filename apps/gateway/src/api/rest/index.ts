// sandgate's HTTP API under /v1, on the replica's HTTP port: the same services, access rule,
// authentication and relay-to-owner as gRPC (every route calls the service a gRPC method calls;
// nothing is implemented twice). Schemas are declared once per route (TypeBox) and served as
// OpenAPI 3.1 at /openapi.json, with interactive docs at /docs.
import type { FastifyInstance } from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import websocket from '@fastify/websocket';
import type { Logger, Metrics } from '@sandgate/telemetry';
import type { SandboxStore } from '@sandgate/store';
import type { Authenticator } from '../../auth/authenticator.ts';
import type { SandboxService } from '../../sandboxes/sandbox-service.ts';
import type { ExecService } from '../../exec/exec-service.ts';
import type { LifecycleService } from '../../sandboxes/lifecycle-service.ts';
import type { WatchService } from '../../sandboxes/watch-service.ts';
import type { SshService } from '../../ssh/ssh-service.ts';
import type { ExecRouter } from '../../relay/exec-router.ts';
import type { WorkspaceAccess } from '../access.ts';
import type { ServiceEndpointService } from '../../services/service-endpoints.ts';
import type { FileService } from '../../files/file-service.ts';
import { GATEWAY_VERSION } from '../openshell-service.ts';
import { sandboxRoutes } from './sandboxes.ts';
import { execRoutes } from './exec.ts';
import { eventRoutes } from './events.ts';
import { execWsRoutes } from './exec-ws.ts';
import { fileRoutes } from './files.ts';
import { serviceRoutes } from './services.ts';
import { poolRoutes } from './pools.ts';
import type { PoolService } from '../../pools/pool-service.ts';
import { installErrorHandling } from './errors.ts';

export interface RestDeps {
  authenticator: Authenticator;
  sandboxes: SandboxService;
  exec: ExecService;
  lifecycle: LifecycleService;
  watch: WatchService;
  ssh: SshService;
  router: ExecRouter;
  store: SandboxStore;
  workspaces: WorkspaceAccess;
  /** Exposed services' records and signed links (helper D). */
  services: ServiceEndpointService;
  log: Logger;
  metrics: Metrics;
  /** File transfers (the same instance as the gRPC calls'); absent: fileRoutes makes one. */
  files?: FileService;
  /** Warm pools (the same instance as the gRPC calls'). */
  pools: PoolService;
}

/** Registers /openapi.json, /docs and every /v1 route on `app` (await before listen). */
export async function registerRest(app: FastifyInstance, deps: RestDeps): Promise<void> {
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'sandgate HTTP API', version: GATEWAY_VERSION, description: 'Sandboxes, exec, logs, files, exposed services and warm pools over HTTP. Every call takes `Authorization: Bearer <token>`.' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }],
    },
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });
  await app.register(websocket, { options: { maxPayload: 16 * 1024 * 1024 } });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  await app.register(
    async (v1) => {
      // Every failure under /v1 (validation, unknown routes included) in the one error shape.
      installErrorHandling(v1, deps.log);
      sandboxRoutes(v1, deps);
      execRoutes(v1, deps);
      eventRoutes(v1, deps);
      execWsRoutes(v1, deps);
      fileRoutes(v1, deps);
      serviceRoutes(v1, deps);
      poolRoutes(v1, deps);
    },
    { prefix: '/v1' },
  );
}
