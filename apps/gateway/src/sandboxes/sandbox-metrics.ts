// Figures about sandboxes, read periodically and never per scrape:
// - sandgate_sandboxes{phase}: the fleet's records by phase, read every PHASE_COUNT_EVERY_MS from
//   what the reconcile sweep last counted (PhaseCounts: one count for the cluster, not one paged
//   scan of every record per replica); when no sweep has published lately, the replica counts by
//   a scan of its own. Every replica reports the fleet's figure: dashboards take the max.
// - per-sandbox CPU and memory of the sandboxes this replica owns, from the compute driver
//   (cgroup files, container stats) every USAGE_EVERY_MS: exported as
//   sandgate_sandbox_cpu_seconds_total / sandgate_sandbox_memory_bytes, and published to Redis
//   (SandboxUsageStore) so that GetSandboxUsage (`sandgate sandbox get`) answers on any replica.
import { GatewayError, Code, phaseName, Phase, type Principal } from '@sandgate/core';
import type { ComputeDriver, ComputeHandle } from '@sandgate/compute';
import type { PhaseCounts, SandboxStore, SandboxUsageStore, SandboxUsageSample } from '@sandgate/store';
import type { GetSandboxUsageRequest, SandboxUsage } from '@sandgate/protocols';
import type { Logger, Metrics } from '@sandgate/telemetry';
import type { WorkspaceAccess } from '../api/access.ts';

export const PHASE_COUNT_EVERY_MS = 30_000;
export const USAGE_EVERY_MS = 15_000;
/** A published sample outlives a missed round or two, not an owner that is gone. */
const USAGE_TTL_MS = 3 * USAGE_EVERY_MS;
/** How long a sandbox's name, workspace and compute handle are reused before being read again. */
const FACTS_TTL_MS = 60_000;

export interface SandboxMetricsDeps {
  replicaId: string;
  store: SandboxStore;
  /** The reconcile sweep's published counts. */
  phaseCounts: Pick<PhaseCounts, 'read'>;
  usage: SandboxUsageStore;
  driver: Pick<ComputeDriver, 'usage'>;
  /** Sandboxes whose session this replica holds. */
  owned: () => string[];
  workspaces: WorkspaceAccess;
  metrics: Metrics;
  log: Logger;
}

interface Facts {
  name: string;
  workspace: string;
  handle: ComputeHandle | null;
  readAtMs: number;
}

export class SandboxMetrics {
  private readonly deps: SandboxMetricsDeps;
  private phases: Map<number, number> | null = null;
  private samples: Array<SandboxUsageSample & { name: string; workspace: string }> = [];
  private readonly facts = new Map<string, Facts>();
  private readonly timers: NodeJS.Timeout[] = [];
  private counting = false;
  private sampling = false;

  constructor(deps: SandboxMetricsDeps) {
    this.deps = deps;
    const { metrics } = deps;
    // Every phase, zeros included, once counted: a phase that empties reads 0, not its last count.
    metrics.family('sandgate_sandboxes', 'gauge', () =>
      this.phases ? Object.values(Phase).map((p) => [{ phase: phaseName(p) }, this.phases!.get(p) ?? 0] as const) : [],
    );
    const labelled = () => this.samples.map((s) => ({ s, labels: { sandbox_id: s.sandboxId, sandbox_name: s.name, workspace: s.workspace } }));
    metrics.family('sandgate_sandbox_cpu_seconds_total', 'counter', () => labelled().map(({ s, labels }) => [labels, s.cpuSeconds] as const));
    metrics.family('sandgate_sandbox_memory_bytes', 'gauge', () => labelled().map(({ s, labels }) => [labels, s.memoryBytes] as const));
  }

  /** Counts and samples now, then on their intervals until close(). */
  start(): void {
    void this.countPhases();
    void this.sampleUsage();
    this.timers.push(setInterval(() => void this.countPhases(), PHASE_COUNT_EVERY_MS), setInterval(() => void this.sampleUsage(), USAGE_EVERY_MS));
    for (const t of this.timers) t.unref();
  }

  close(): void {
    for (const t of this.timers) clearInterval(t);
  }

  async countPhases(): Promise<void> {
    if (this.counting) return;
    this.counting = true;
    try {
      const published = await this.deps.phaseCounts.read();
      if (published) {
        this.phases = published;
        return;
      }
      const counts = new Map<number, number>();
      const seen = new Set<string>();
      for await (const page of this.deps.store.pages()) {
        for (const rec of page) {
          const id = rec.sandbox.metadata?.id ?? '';
          if (seen.has(id)) continue; // SSCAN may repeat an id
          seen.add(id);
          const phase = rec.sandbox.status?.phase ?? Phase.UNSPECIFIED;
          counts.set(phase, (counts.get(phase) ?? 0) + 1);
        }
      }
      this.phases = counts;
    } catch (err) {
      this.deps.log.warn('counting sandboxes by phase failed', { err });
    } finally {
      this.counting = false;
    }
  }

  async sampleUsage(): Promise<void> {
    const usage = this.deps.driver.usage?.bind(this.deps.driver);
    if (!usage || this.sampling) return;
    this.sampling = true;
    try {
      const now = Date.now();
      const owned = this.deps.owned();
      const ownedSet = new Set(owned);
      for (const id of this.facts.keys()) if (!ownedSet.has(id)) this.facts.delete(id);
      const next: typeof this.samples = [];
      for (const id of owned) {
        const facts = await this.factsOf(id, now);
        if (!facts) continue;
        const u = await usage(id, facts.handle).catch(() => null);
        if (u) next.push({ sandboxId: id, cpuSeconds: u.cpuSeconds, memoryBytes: u.memoryBytes, atMs: Date.now(), replica: this.deps.replicaId, name: facts.name, workspace: facts.workspace });
      }
      this.samples = next;
      await this.deps.usage.publish(next, USAGE_TTL_MS);
    } catch (err) {
      this.deps.log.warn('sampling sandbox usage failed', { err });
    } finally {
      this.sampling = false;
    }
  }

  private async factsOf(id: string, now: number): Promise<Facts | null> {
    const cached = this.facts.get(id);
    if (cached && now - cached.readAtMs < FACTS_TTL_MS) return cached;
    const rec = await this.deps.store.get(id);
    if (!rec) {
      this.facts.delete(id);
      return null;
    }
    const facts = { name: rec.sandbox.metadata?.name ?? '', workspace: rec.sandbox.metadata?.workspace ?? '', handle: rec.compute, readAtMs: now };
    this.facts.set(id, facts);
    return facts;
  }

  /** sandgate.v1.Sandgate/GetSandboxUsage: what the owner last published, workspace rule applied. */
  async getUsage(req: GetSandboxUsageRequest, caller: Principal): Promise<SandboxUsage> {
    const id = req.sandbox_id ?? '';
    if (!id) throw new GatewayError(Code.INVALID_ARGUMENT, 'sandbox_id is required');
    await this.deps.workspaces.visible(caller, await this.deps.store.get(id));
    const s = await this.deps.usage.get(id);
    if (!s) return { available: false };
    return { available: true, cpu_seconds: s.cpuSeconds, memory_bytes: s.memoryBytes, sampled_at_ms: s.atMs, replica_id: s.replica };
  }
}
