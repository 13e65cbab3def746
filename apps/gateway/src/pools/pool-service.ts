// Warm pools at the gateway: the admin calls (SetPool, ListPools, DeletePool), the claim a create
// makes (SandboxService), and the refill the pool-refill job runs. The rules are libs/core's
// pools.ts; the atomic steps are libs/store's (PoolStore.createMember, PoolStore.claim).
//
// A member is an ordinary sandbox record in the pool's workspace, launched with its main process
// deferred (SANDGATE_DEFER_MAIN): it gets Ready like any sandbox, and serves nothing until a
// claim moves it, in one script, into the caller's workspace under the caller's name. The
// claiming replica then has its supervisor start the claim's command (start_main); if that
// replica dies first, the supervisor's next hello or the reconcile sweep sends it (`mainpending`).
import { randomInt, randomUUID } from 'node:crypto';
import type { CreateSandboxRequest, Pool, Sandbox, SetPoolRequest } from '@sandgate/protocols';
import {
  Code,
  GatewayError,
  POOL_ANNOTATION,
  Phase,
  RESTART_POLICY_NEVER,
  checkClaimMatchesPool,
  checkPolicy,
  createMatchesPoolTemplate,
  generateName,
  invalid,
  onDeleteRequested,
  parseResources,
  poolMayStartMembers,
  poolMemberName,
  poolWorkspace,
  POOL_RETRY_FIRST_MS,
  POOL_RETRY_LONGEST_MS,
  readyCondition,
  validatePoolSettings,
  type PoolDefinition,
  type Principal,
} from '@sandgate/core';
import { MemberCreateResult, type PoolStore, type ReplicationGuard, type StoredSandbox } from '@sandgate/store';
import type { JobScheduler } from '@sandgate/jobs';
import type { Logger, Metrics } from '@sandgate/telemetry';
import { newCredential } from '../sessions/credentials.ts';
import { memberLaunch, type LifecycleService } from '../sandboxes/lifecycle-service.ts';

export interface PoolServiceDeps {
  pools: PoolStore;
  lifecycle: LifecycleService;
  scheduler: Pick<JobScheduler, 'poolRefill' | 'deleteSandbox'>;
  /** Starts a claimed member's main process wherever its session is (the ExecRouter). */
  startMain: (sandboxId: string) => Promise<boolean>;
  defaultImage: string;
  /** Confirms a claim reached enough Redis replicas before the caller hears of it (absent in a worker). */
  replication?: ReplicationGuard;
  log: Logger;
  metrics: Metrics;
}

/**
 * How long after a claim the pool's refill starts. Measured on a 2-core host (BENCHMARKS.md
 * "Warm pools"): with the refill at once, a claimed sandbox's first execs took 13–24 ms against
 * 10–14 ms for a cold sandbox's.
 */
const REFILL_AFTER_CLAIM_MS = 1_000;

/** Members tried per claim before the create falls back to a cold start. */
const CLAIM_ATTEMPTS = 4;

type CreateRequest = CreateSandboxRequest & { spec: NonNullable<CreateSandboxRequest['spec']> };

export class PoolService {
  private readonly deps: PoolServiceDeps;

  constructor(deps: PoolServiceDeps) {
    this.deps = deps;
    deps.metrics.inc('sandgate_pool_claims_total', 0, { result: 'claimed' });
    deps.metrics.inc('sandgate_pool_claims_total', 0, { result: 'empty' });
    deps.metrics.inc('sandgate_pool_member_failures_total', 0);
    deps.metrics.inc('sandgate_pool_members_lost_total', 0);
  }

  // ---- admin calls --------------------------------------------------------------------------

  async set(req: SetPoolRequest, caller: Principal): Promise<Pool> {
    requireAdmin(caller, 'SetPool');
    const { name, size } = validatePoolSettings(req.name, req.size);
    const resources = req.resources && req.resources.byteLength > 0 ? Buffer.from(req.resources) : undefined;
    const limits = parseResources(resources); // INVALID_ARGUMENT naming template.resources when malformed
    if (limits.diskBytes !== undefined) throw invalid('resources.limits.ephemeral-storage is not supported for a pool');
    const policy = req.policy && req.policy.byteLength > 0 ? checkPolicy(req.policy, 'policy').bytes : undefined;
    const pool = await this.deps.pools.set(name, size, {
      image: req.image ?? '',
      resources: resources ? resources.toString('base64') : '',
      policy: policy ? Buffer.from(policy).toString('base64') : '',
    }, req.auto_match === true);
    await this.deps.scheduler.poolRefill(name);
    this.deps.log.info('pool set', { pool: name, size, generation: pool.generation, autoMatch: pool.autoMatch });
    return this.toWire(pool, await this.deps.pools.members(name));
  }

  async list(caller: Principal): Promise<{ pools: Pool[] }> {
    requireAdmin(caller, 'ListPools');
    const pools = await this.deps.pools.list();
    return { pools: await Promise.all(pools.map(async (p) => this.toWire(p, await this.deps.pools.members(p.name)))) };
  }

  async delete(name: string | undefined, caller: Principal): Promise<{ deleted: boolean }> {
    requireAdmin(caller, 'DeletePool');
    if (!name) throw invalid('name is required: the pool to delete');
    if (!(await this.deps.pools.delete(name))) throw new GatewayError(Code.NOT_FOUND, `pool '${name}' not found`);
    // Its members go with the refill job, which finds the pool gone (and the sweep's, if this one is lost).
    await this.deps.scheduler.poolRefill(name);
    this.deps.log.info('pool deleted', { pool: name });
    return { deleted: true };
  }

  private toWire(pool: PoolDefinition, members: StoredSandbox[]): Pool {
    const current = members.filter((m) => m.pool?.generation === pool.generation);
    const ready = current.filter((m) => m.sandbox.status?.phase === Phase.READY).length;
    const starting = current.filter((m) => m.sandbox.status?.phase === Phase.PROVISIONING).length;
    return {
      name: pool.name,
      size: pool.size,
      image: pool.template.image || this.deps.defaultImage,
      resources: pool.template.resources ? Buffer.from(pool.template.resources, 'base64') : undefined,
      policy: pool.template.policy ? Buffer.from(pool.template.policy, 'base64') : undefined,
      generation: pool.generation,
      ready,
      starting,
      created_at_ms: pool.createdAtMs,
      consecutive_failures: pool.failures,
      retry_at_ms: pool.retryAtMs,
      last_error: pool.lastError,
      auto_match: pool.autoMatch,
    };
  }

  // ---- claims -------------------------------------------------------------------------------

  /** The pool a create asks for (POOL_ANNOTATION), checked against the request; null: none asked. */
  async requested(request: CreateRequest): Promise<PoolDefinition | null> {
    const name = request.annotations?.[POOL_ANNOTATION];
    if (name === undefined) return null;
    const pool = name ? await this.deps.pools.get(name) : null;
    if (!pool) throw new GatewayError(Code.NOT_FOUND, `pool '${name}' not found (annotation ${POOL_ANNOTATION})`);
    checkClaimMatchesPool(request.spec, pool, this.deps.defaultImage);
    return pool;
  }

  /**
   * The auto-match pools a create that names no pool may claim from: those whose template is
   * exactly what it asks for (createMatchesPoolTemplate), by name. Empty for a create naming a pool.
   */
  async matching(request: CreateRequest): Promise<PoolDefinition[]> {
    if (request.annotations?.[POOL_ANNOTATION] !== undefined) return [];
    const pools = await this.deps.pools.list();
    return pools.filter((p) => p.autoMatch && p.size > 0 && createMatchesPoolTemplate(request.spec, p, this.deps.defaultImage));
  }

  /**
   * Fills what the request left unset with the pool's template, for a create the pool could not
   * serve warm: the sandbox is the same one a claim would have given.
   */
  withPoolTemplate(request: CreateRequest, pool: PoolDefinition): void {
    const spec = request.spec;
    spec.template = spec.template ?? { labels: {}, annotations: {}, environment: {} };
    if (!spec.template.image) spec.template.image = pool.template.image || this.deps.defaultImage;
    if (!spec.template.resources?.byteLength && pool.template.resources) spec.template.resources = Buffer.from(pool.template.resources, 'base64');
    if (!spec.policy?.byteLength && pool.template.policy) spec.policy = Buffer.from(pool.template.policy, 'base64');
  }

  /**
   * Claims a Ready member of `pool` for `request` in `workspace`: the member becomes the caller's
   * sandbox and its main process is started with the request's command and environment. Null
   * when no member could be claimed (the pool is empty or busy): the caller creates cold.
   * Throws create's errors (name taken, workspace missing, quota).
   */
  async claim(request: CreateRequest, pool: PoolDefinition, workspace: string, maxPerWorkspace: number): Promise<Sandbox | null> {
    const members = (await this.deps.pools.members(pool.name)).filter(
      (m) => m.pool?.generation === pool.generation && m.sandbox.status?.phase === Phase.READY,
    );
    // Any member will do; a random order keeps concurrent claims from all racing for the first.
    for (let i = members.length - 1; i > 0; i--) {
      const j = randomInt(i + 1);
      [members[i], members[j]] = [members[j]!, members[i]!];
    }
    let claimed: Sandbox | null = null;
    for (const member of members.slice(0, CLAIM_ATTEMPTS)) {
      const name = request.name || generateName((n) => randomInt(n));
      const sandbox = claimedSandbox(member, request, name, workspace);
      try {
        if (await this.deps.pools.claim(member, sandbox, { workspace, name, maxPerWorkspace })) {
          claimed = sandbox;
          break;
        }
      } catch (err) {
        // A generated name that collided: the next member gets another one.
        if (!(err instanceof GatewayError && err.code === Code.ALREADY_EXISTS) || request.name) throw err;
      }
    }
    // Claimed or not, the pool may be short now. Not at once: a member's boot takes a core for
    // ~200 ms, and the claimant's first commands, on the same host, would wait behind it.
    await this.deps.scheduler.poolRefill(pool.name, REFILL_AFTER_CLAIM_MS);
    if (!claimed) {
      this.deps.metrics.inc('sandgate_pool_claims_total', 1, { result: 'empty' });
      return null;
    }
    const id = claimed.metadata!.id!;
    this.deps.metrics.inc('sandgate_pool_claims_total', 1, { result: 'claimed' });
    // Before the answer: an acknowledged claim must outlive a Redis failover. If that cannot be
    // confirmed the caller hears UNAVAILABLE, so the sandbox goes (as a failed cold create's
    // does): a retry with the same name must not find it taken by a sandbox it was never given.
    try {
      await this.deps.replication?.confirm('the create');
    } catch (err) {
      await this.deps.scheduler.deleteSandbox(id).catch(() => undefined);
      await this.deps.lifecycle.finishDelete(id).catch((e: unknown) => this.deps.log.warn('could not delete a claim the caller was refused; the delete job will', { sandboxId: id, err: e }));
      throw err;
    }
    // The main process and the variables execs see: in place before the caller can run anything.
    // Not confirmed (the supervisor away at this moment): its next hello or the sweep starts it.
    try {
      if (!(await this.deps.startMain(id))) this.deps.log.warn('claimed pool member has no live session: its main process starts at its next hello', { sandboxId: id });
    } catch (err) {
      this.deps.log.warn('start_main after a claim failed: its next hello or the reconcile sweep sends it again', { sandboxId: id, err });
    }
    this.deps.lifecycle.note(id, `sandbox claimed from pool '${pool.name}'`);
    this.deps.log.info('sandbox claimed from pool', { sandboxId: id, name: claimed.metadata!.name, pool: pool.name });
    return claimed;
  }

  // ---- refill (the pool-refill job) ---------------------------------------------------------

  /** Every pool with a definition or members to retire (the sweep refills each). */
  names(): Promise<string[]> {
    return this.deps.pools.names();
  }

  /**
   * Brings the pool to its size: members of an older generation, failed ones and any beyond the
   * size are deleted; missing ones are started. A pool that is gone loses every member, then its
   * name. Idempotent, and safe to run on two workers at once (reserve-pool-member-4 never
   * overfills; deletes are idempotent).
   */
  async refill(name: string): Promise<unknown> {
    const { pools } = this.deps;
    const pool = await pools.get(name);
    const { members, lost } = await pools.membership(name);
    if (lost.length > 0) {
      const dropped = await pools.dropLost(name, lost);
      this.deps.metrics.inc('sandgate_pool_members_lost_total', dropped);
      if (dropped > 0) this.deps.log.warn('pool members without a record (lost in a Redis failover) taken out of the pool; their compute goes as an orphan', { pool: name, dropped });
    }
    const keep: StoredSandbox[] = [];
    const retire: StoredSandbox[] = [];
    const failed: StoredSandbox[] = [];
    for (const m of members) {
      const phase = m.sandbox.status?.phase;
      const current = pool !== null && m.pool?.generation === pool.generation;
      const usable = current && (phase === Phase.READY || phase === Phase.PROVISIONING);
      (usable ? keep : retire).push(m);
      if (current && phase === Phase.ERROR) failed.push(m);
    }
    // Beyond the size: the ones still starting go first.
    keep.sort((a, b) => Number(b.sandbox.status?.phase === Phase.READY) - Number(a.sandbox.status?.phase === Phase.READY));
    if (pool) retire.push(...keep.splice(pool.size));
    let retired = 0;
    let failedRetired = 0;
    for (const m of retire) {
      const outcome = await this.retire(m);
      if (!outcome) continue;
      retired++;
      if (outcome === 'first' && failed.includes(m)) failedRetired++;
    }
    // A failed member is counted by the refill that moved it to Deleting: two refills side by
    // side both read it in Error, and only one of them makes that move.
    this.deps.metrics.inc('sandgate_pool_member_failures_total', failedRetired);
    if (!pool) {
      if (await pools.forget(name)) this.deps.log.info('pool gone and its members retired', { pool: name });
      return { pool: name, retired, gone: true };
    }
    if (failed.length > 0) {
      await this.noteFailure(pool, failed.length, failed.map(readyMessage).find(Boolean) ?? 'a member of the pool failed');
    } else if (pool.failures > 0 && keep.some((m) => m.sandbox.status?.phase === Phase.READY)) {
      if (await pools.clearFailures(name, pool.generation)) this.deps.log.info('pool members start again', { pool: name, failures: pool.failures });
    }
    const latest = failed.length > 0 ? await pools.get(name) : pool;
    if (!latest || !poolMayStartMembers(latest, Date.now())) {
      // Backing off: the sweep's refill (every 10 s) tries again once retryAtMs has passed.
      return { pool: name, retired, backingOffUntilMs: latest?.retryAtMs ?? 0 };
    }
    let started = 0;
    const launchErrors: string[] = [];
    const missing = pool.size - keep.length;
    const launches: Promise<void>[] = [];
    for (let i = 0; i < missing; i++) {
      launches.push(
        this.startMember(pool).then((outcome) => {
          if (outcome === true) started++;
          else if (outcome !== false) launchErrors.push(outcome.error);
        }),
      );
    }
    await Promise.all(launches);
    if (launchErrors.length > 0) {
      // Launches of this refill's own: counted here, whoever records the round.
      this.deps.metrics.inc('sandgate_pool_member_failures_total', launchErrors.length);
      await this.noteFailure(pool, launchErrors.length, launchErrors[0]!);
    }
    if (started || retired) this.deps.log.info('pool refilled', { pool: name, started, retired, size: pool.size });
    return { pool: name, started, retired, failed: failed.length + launchErrors.length };
  }

  /**
   * `count` members of the pool's current template could not start: back off (POOL_RETRY_FIRST_MS,
   * doubling). `pool` as this refill read it before launching: its failure count fences the round.
   */
  private async noteFailure(pool: PoolDefinition, count: number, error: string): Promise<void> {
    const delayMs = await this.deps.pools.noteFailure(pool.name, pool.generation, pool.failures, error, POOL_RETRY_FIRST_MS, POOL_RETRY_LONGEST_MS);
    // The pool moved to another template (or went) meanwhile, or a refill beside this one
    // recorded this round's failure already.
    if (delayMs === null) return;
    this.deps.log.warn('pool members cannot start: backing off', { pool: pool.name, generation: pool.generation, failures: pool.failures + 1, members: count, delayMs, error });
  }

  /**
   * Deletes a member, unless a claim took it since it was read: the move to Deleting is a
   * compare-and-swap that sees whether it is still a member, and a claim of a record that moved
   * on fails (claim-record-2 checks the version). So a claimant's sandbox is never retired.
   */
  private async retire(member: StoredSandbox): Promise<false | 'first' | 'again'> {
    const id = member.sandbox.metadata!.id!;
    let stillMember = false;
    let first = false;
    const rec = await this.deps.lifecycle.transition(id, (s, cur) => {
      stillMember = cur.pool !== null;
      const deleting = stillMember ? onDeleteRequested(s, new Date()) : null;
      first = deleting !== null;
      return stillMember ? (deleting ?? s) : null;
    });
    if (!rec || !stillMember) return false;
    await this.deps.lifecycle.finishDelete(id);
    // 'first': this call moved it to Deleting; 'again': another had (its delete is finished here too).
    return first ? 'first' : 'again';
  }

  /**
   * One new member: its record (unless the pool filled or changed meanwhile), then its compute.
   * True when started, false when not needed, `{error}` when its launch failed.
   */
  private async startMember(pool: PoolDefinition): Promise<boolean | { error: string }> {
    const now = Date.now();
    const id = randomUUID();
    const name = poolMemberName(pool.name, id);
    const template = pool.template;
    const member: Sandbox = {
      metadata: { id, name, created_at_ms: now, labels: {}, annotations: {}, resource_version: 0, workspace: poolWorkspace(pool.name) },
      spec: {
        // What an empty start_main runs; a claim always names its command.
        ...memberLaunch(),
        environment: {},
        providers: [],
        restart_policy: RESTART_POLICY_NEVER,
        template: {
          image: template.image || this.deps.defaultImage,
          resources: template.resources ? Buffer.from(template.resources, 'base64') : undefined,
          labels: {},
          annotations: {},
          environment: {},
        },
        policy: template.policy ? Buffer.from(template.policy, 'base64') : undefined,
      },
      status: {
        sandbox_name: name,
        phase: Phase.PROVISIONING,
        conditions: [readyCondition('False', 'Provisioning', 'Warm-pool member starting', new Date(now))],
      },
    };
    const credential = newCredential();
    const created = await this.deps.pools.createMember(member, credential.hash, pool.name, pool.generation);
    if (created !== MemberCreateResult.created) return false;
    try {
      await this.deps.lifecycle.launchFirstRun(member, credential.secret, now, true);
      this.deps.lifecycle.watchLaunch(id, now);
      return true;
    } catch (err) {
      // The record goes too (a member nobody can claim); the next refill starts another.
      this.deps.log.warn('starting a pool member failed', { pool: pool.name, sandboxId: id, err });
      await this.deps.lifecycle.finishDelete(id).catch(() => this.deps.scheduler.deleteSandbox(id));
      return { error: err instanceof Error ? err.message : String(err) };
    }
  }
}

/** Why a member is where it is: its Ready condition's message ('' when it has none). */
function readyMessage(member: StoredSandbox): string {
  return member.sandbox.status?.conditions?.find((c) => c.type === 'Ready')?.message ?? '';
}

/**
 * The member as the claimant's sandbox: the request's name, labels, annotations and spec (with
 * the pool's image, resources and policy, which it was launched with), created now; the status
 * (Ready, its supervisor's instance) is the member's.
 */
function claimedSandbox(member: StoredSandbox, request: CreateRequest, name: string, workspace: string): Sandbox {
  const launched = member.sandbox.spec!;
  const spec = request.spec;
  return {
    metadata: {
      id: member.sandbox.metadata!.id!,
      name,
      created_at_ms: Date.now(),
      labels: request.labels,
      annotations: request.annotations,
      resource_version: member.resourceVersion + 1,
      workspace,
    },
    spec: {
      ...spec,
      template: {
        ...(spec.template ?? { labels: {}, annotations: {}, environment: {} }),
        image: launched.template?.image,
        resources: launched.template?.resources,
      },
      policy: launched.policy,
      log_level: launched.log_level,
    },
    status: { ...member.sandbox.status!, sandbox_name: name },
  };
}

function requireAdmin(caller: Principal, call: string): void {
  if (!caller.admin) throw new GatewayError(Code.PERMISSION_DENIED, `${call} requires a gateway admin (an admin token or the OIDC admin role)`);
}
