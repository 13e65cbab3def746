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
  matchesSelector,
  normaliseListLimit,
  normaliseWorkspace,
  notFound,
  parseLabelSelector,
  readyCondition,
  requireName,
  validateCreate,
} from '@sandgate/core';
import type { SandboxStore } from '@sandgate/store';
import type { ComputeDriver } from '@sandgate/compute';
import type { Logger, Metrics } from '@sandgate/telemetry';
import { newCredential } from '../sessions/credentials.ts';
import type { LifecycleService } from './lifecycle-service.ts';

export interface SandboxServiceDeps {
  store: SandboxStore;
  driver: ComputeDriver;
  defaultImage: string;
  /** What supervisors dial. */
  supervisorEndpoint: () => string;
  lifecycle: LifecycleService;
  log: Logger;
  metrics: Metrics;
}

export class SandboxService {
  private readonly deps: SandboxServiceDeps;

  constructor(deps: SandboxServiceDeps) {
    this.deps = deps;
  }

  async create(req: CreateSandboxRequest): Promise<SandboxResponse> {
    const { request, workspace, limits } = validateCreate(req);
    const { store, driver, log } = this.deps;
    if (limits.diskBytes !== undefined && !driver.enforcesDiskLimit) {
      throw invalid(`spec.template.resources.limits.ephemeral-storage is not supported by the ${driver.name} driver (it cannot cap a sandbox's disk)`);
    }
    const spec = request.spec;
    spec.template = spec.template ?? { labels: {}, annotations: {}, environment: {} };
    if (!spec.template.image) spec.template.image = this.deps.defaultImage;
    const credential = newCredential();
    const now = Date.now();

    // A generated name may collide; retry a few times. A user's name collides only once.
    let sandbox: Sandbox | undefined;
    for (let attempt = 0; attempt < 5 && !sandbox; attempt++) {
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
        await store.create(candidate, credential.hash);
        sandbox = candidate;
      } catch (err) {
        if (!(err instanceof GatewayError && err.code === Code.ALREADY_EXISTS) || request.name) throw err;
      }
    }
    if (!sandbox) throw new GatewayError(Code.INTERNAL, 'create sandbox failed: could not generate a unique name');
    const id = sandbox.metadata!.id!;

    try {
      // The deadline is durable before any compute exists: a crash from here on still ends in
      // Ready or Error, never a sandbox stuck in Provisioning.
      await this.deps.lifecycle.scheduleProvisionDeadline(id, now);
      const handle = await driver.create(this.deps.lifecycle.launchSpec(sandbox, credential.secret));
      const updated = await store.mutate(id, (cur) => ({
        sandbox: cur.sandbox,
        extra: { compute: JSON.stringify(handle), runstart: String(now) },
      }));
      this.deps.lifecycle.note(id, `sandbox created (driver ${driver.name})`);
      this.deps.lifecycle.watchLaunch(id);
      this.deps.metrics.inc('sandgate_sandboxes_created_total');
      log.info('sandbox created', { sandboxId: id, name: sandbox.metadata!.name, driver: driver.name });
      return { sandbox: updated?.sandbox ?? sandbox };
    } catch (err) {
      log.error('driver create failed', { sandboxId: id, err });
      await store.remove(id, workspace, sandbox.metadata!.name!);
      await driver.delete(id, null).catch(() => undefined);
      throw new GatewayError(Code.INTERNAL, `create sandbox failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  async get(req: GetSandboxRequest): Promise<SandboxResponse> {
    const name = requireName(req.name);
    const rec = await this.deps.store.getByName(normaliseWorkspace(req.workspace), name);
    if (!rec) throw notFound();
    return { sandbox: rec.sandbox };
  }

  async list(req: ListSandboxesRequest): Promise<ListSandboxesResponse> {
    if (req.all_workspaces && req.workspace) throw invalid('all_workspaces and workspace are mutually exclusive');
    const selector = parseLabelSelector(req.label_selector);
    const workspace = normaliseWorkspace(req.workspace);
    const limit = normaliseListLimit(req.limit);
    const offset = req.offset ?? 0;
    const all = await this.deps.store.list();
    const matching = all
      .map((r) => r.sandbox)
      .filter((sb) => req.all_workspaces || sb.metadata!.workspace === workspace)
      .filter((sb) => matchesSelector(sb.metadata!.labels ?? {}, selector));
    return { sandboxes: matching.slice(offset, offset + limit) };
  }

  async delete(req: DeleteSandboxRequest): Promise<DeleteSandboxResponse> {
    const deleted = await this.deps.lifecycle.delete(requireName(req.name), normaliseWorkspace(req.workspace));
    return { deleted };
  }
}
