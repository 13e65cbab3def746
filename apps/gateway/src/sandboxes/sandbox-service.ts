// Sandbox records: create, get, list, delete. Records live in Redis; compute is the driver's.
import { randomInt, randomUUID } from 'node:crypto';
import type {
  CreateSandboxRequest,
  DeleteSandboxRequest,
  DeleteSandboxResponse,
  GetSandboxRequest,
  ListSandboxesRequest,
  ListSandboxesResponse,
  Sandbox,
  SandboxResponse,
} from '@sandgate/protocols';
import {
  Code,
  GatewayError,
  Phase,
  generateName,
  invalid,
  isPoolWorkspace,
  matchesSelector,
  normaliseListLimit,
  notFound,
  requestedWorkspace,
  type Principal,
  parseLabelSelector,
  readyCondition,
  requireName,
  validateCreate,
} from '@sandgate/core';
import type { ReplicationGuard, SandboxStore } from '@sandgate/store';
import type { ComputeDriver } from '@sandgate/compute';
import type { Logger, Metrics } from '@sandgate/telemetry';
import { newCredential } from '../sessions/credentials.ts';
import type { LifecycleService } from './lifecycle-service.ts';
import type { WorkspaceAccess } from '../api/access.ts';
import type { PoolService } from '../pools/pool-service.ts';
import { isRedisUnavailable } from '../api/grpc-errors.ts';

export interface SandboxServiceDeps {
  store: SandboxStore;
  driver: ComputeDriver;
  defaultImage: string;
  /** What supervisors dial. */
  supervisorEndpoint: () => string;
  lifecycle: LifecycleService;
  /** Workspace scoping of every call (access.ts). */
  workspaces: WorkspaceAccess;
  /** Sandboxes per workspace (`--max-sandboxes-per-workspace`); 0 = no limit. */
  maxSandboxesPerWorkspace: number;
  /** Confirms the create reached enough Redis replicas before the caller hears of it. */
  replication: ReplicationGuard;
  /** Warm pools: a create naming one (POOL_ANNOTATION) claims a started member. */
  pools: PoolService;
  log: Logger;
  metrics: Metrics;
}

export class SandboxService {
  private readonly deps: SandboxServiceDeps;

  constructor(deps: SandboxServiceDeps) {
    this.deps = deps;
  }

  async create(req: CreateSandboxRequest, caller: Principal): Promise<SandboxResponse> {
    const { request, limits } = validateCreate(req);
    const { store, driver, log } = this.deps;
    // Membership before existence (upstream's order, §2.4): a non-member cannot probe which
    // workspaces exist. Existence, TERMINATING and the quota are checked atomically by the store.
    const workspace = await this.deps.workspaces.requireMember(caller, req.workspace);
    if (limits.diskBytes !== undefined && !driver.enforcesDiskLimit) {
      throw invalid(`spec.template.resources.limits.ephemeral-storage is not supported by the ${driver.name} driver (it cannot cap a sandbox's disk)`);
    }
    // A create from a warm pool: a Ready member, claimed; with none ready, a cold create of the
    // pool's template (the same sandbox, later). A create naming no pool may still be served by
    // an auto-match pool of exactly its template.
    const pool = await this.deps.pools.requested(request);
    for (const candidate of pool ? [pool] : await this.deps.pools.matching(request)) {
      const claimed = await this.deps.pools.claim(request, candidate, workspace, this.deps.maxSandboxesPerWorkspace);
      if (claimed) {
        this.deps.metrics.inc('sandgate_sandboxes_created_total');
        return { sandbox: claimed };
      }
    }
    if (pool) this.deps.pools.withPoolTemplate(request, pool);
    const spec = request.spec;
    spec.template = spec.template ?? { labels: {}, annotations: {}, environment: {} };
    if (!spec.template.image) spec.template.image = this.deps.defaultImage;
    const credential = newCredential();
    const now = Date.now();

    // A generated name may collide (about 90k adjective-noun pairs): one retry with a fresh name,
    // then ALREADY_EXISTS as upstream answers (it never retries). A user's name collides only once.
    let sandbox: Sandbox | undefined;
    for (let attempt = 0; attempt < 2 && !sandbox; attempt++) {
      const name = request.name || generateName((n) => randomInt(n));
      const candidate: Sandbox = {
        metadata: {
          id: randomUUID(),
          name,
          created_at_ms: now,
          labels: request.labels,
          annotations: request.annotations,
          resource_version: 0,
          workspace,
        },
        spec,
        status: {
          sandbox_name: name,
          phase: Phase.PROVISIONING,
          conditions: [readyCondition('False', 'Provisioning', 'Waiting for the sandbox supervisor to connect', new Date(now))],
        },
      };
      try {
        await store.create(candidate, credential.hash, { maxPerWorkspace: this.deps.maxSandboxesPerWorkspace });
        sandbox = candidate;
      } catch (err) {
        if (!(err instanceof GatewayError && err.code === Code.ALREADY_EXISTS) || request.name || attempt === 1) throw err;
      }
    }
    if (!sandbox) throw new GatewayError(Code.INTERNAL, 'create sandbox failed: could not generate a unique name');
    const id = sandbox.metadata!.id!;

    try {
      const updated = await this.deps.lifecycle.launchFirstRun(sandbox, credential.secret, now);
      // Before the answer: an acknowledged create must outlive a Redis failover (else undone below).
      await this.deps.replication.confirm('the create');
      this.deps.lifecycle.note(id, `sandbox created (driver ${driver.name})`);
      this.deps.lifecycle.watchLaunch(id, now);
      this.deps.metrics.inc('sandgate_sandboxes_created_total');
      log.info('sandbox created', { sandboxId: id, name: sandbox.metadata!.name, driver: driver.name });
      return { sandbox: updated?.sandbox ?? sandbox };
    } catch (err) {
      log.error('create failed after the record was written', { sandboxId: id, err });
      // Undo what can be undone. If Redis is what failed, the record may stay: the provision
      // deadline (already durable) or the reconcile sweep ends it; the compute goes either way.
      await store.remove(id, workspace, sandbox.metadata!.name!).catch((e: unknown) => log.warn('could not remove the record of a failed create', { sandboxId: id, err: e }));
      await driver.delete(id, null).catch(() => undefined);
      // Redis unreachable (restarting, failing over) or its replicas behind is not the request's fault: retriable.
      if (err instanceof GatewayError && err.code === Code.UNAVAILABLE) throw err;
      if (isRedisUnavailable(err)) throw new GatewayError(Code.UNAVAILABLE, 'create sandbox failed: the gateway cannot reach its Redis right now; retry');
      throw new GatewayError(Code.INTERNAL, `create sandbox failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  async get(req: GetSandboxRequest, caller: Principal): Promise<SandboxResponse> {
    const name = requireName(req.name);
    const rec = await this.deps.workspaces.visible(caller, await this.deps.store.getByName(requestedWorkspace(caller, req.workspace), name));
    return { sandbox: rec.sandbox };
  }

  async list(req: ListSandboxesRequest, caller: Principal): Promise<ListSandboxesResponse> {
    if (req.all_workspaces && req.workspace) throw invalid('all_workspaces and workspace are mutually exclusive');
    if (req.all_workspaces && !caller.admin) throw new GatewayError(Code.PERMISSION_DENIED, 'all_workspaces requires a gateway admin');
    const selector = parseLabelSelector(req.label_selector);
    const workspace = req.all_workspaces ? '' : await this.deps.workspaces.requireMember(caller, req.workspace);
    const limit = normaliseListLimit(req.limit);
    const offset = req.offset ?? 0;
    const all = await this.deps.store.list();
    const matching = all
      .map((r) => r.sandbox)
      // Warm-pool members are no one's sandboxes until claimed (ListPools counts them).
      .filter((sb) => (req.all_workspaces ? !isPoolWorkspace(sb.metadata!.workspace ?? '') : sb.metadata!.workspace === workspace))
      .filter((sb) => matchesSelector(sb.metadata!.labels ?? {}, selector));
    return { sandboxes: matching.slice(offset, offset + limit) };
  }

  async delete(req: DeleteSandboxRequest, caller: Principal): Promise<DeleteSandboxResponse> {
    const name = requireName(req.name);
    const workspace = requestedWorkspace(caller, req.workspace);
    if (!(await this.deps.workspaces.mayUse(caller, workspace))) throw notFound();
    const deleted = await this.deps.lifecycle.delete(name, workspace);
    return { deleted };
  }
}
