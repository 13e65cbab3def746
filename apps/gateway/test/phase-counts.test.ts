// sandgate_sandboxes{phase} on a real Redis: a replica takes the reconcile sweep's published count
// (one count for the cluster) while it is current, and counts by a scan of its own when it is not.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { Phase } from '@sandgate/core';
import { SandboxPhase } from '@sandgate/protocols';
import { PhaseCounts, SandboxStore, SandboxUsageStore, keysFor, type RedisClient } from '@sandgate/store';
import { createLogger, Metrics } from '@sandgate/telemetry';
import { startRedis, type TestRedis } from '@sandgate/test-harness/redis';
import { SandboxMetrics } from '../src/sandboxes/sandbox-metrics.ts';
import type { WorkspaceAccess } from '../src/api/access.ts';

let server: TestRedis;
let redis: RedisClient;
let metrics: Metrics;
let sandboxMetrics: SandboxMetrics;

const gauge = async (phase: string) => {
  const m = new RegExp(`^sandgate_sandboxes\\{phase="${phase}"\\} (\\d+)$`, 'm').exec(await metrics.render());
  return m ? Number(m[1]) : null;
};

beforeAll(async () => {
  server = await startRedis();
  redis = server.client();
  const store = new SandboxStore(redis);
  for (let i = 0; i < 2; i++) {
    const id = randomUUID();
    await store.create(
      {
        metadata: { id, name: `phase-${i}`, created_at_ms: Date.now(), labels: {}, annotations: {}, resource_version: 0, workspace: 'default' },
        spec: { command: ['true'], environment: {}, providers: [] },
        status: { sandbox_name: `phase-${i}`, phase: SandboxPhase.PROVISIONING, conditions: [] },
      },
      'credential-hash',
    );
  }
  metrics = new Metrics();
  sandboxMetrics = new SandboxMetrics({
    replicaId: 'r-test',
    store,
    phaseCounts: new PhaseCounts(redis),
    usage: new SandboxUsageStore(redis),
    driver: {},
    owned: () => [],
    workspaces: {} as WorkspaceAccess,
    metrics,
    log: createLogger({ component: 'test' }, 'error'),
  });
});

afterAll(async () => {
  redis?.disconnect();
  await server?.stop();
});

describe('sandgate_sandboxes: one count for the cluster', () => {
  it('counts by a scan of its own while nothing is published', async () => {
    await sandboxMetrics.countPhases();
    expect(await gauge('Provisioning')).toBe(2);
    expect(await gauge('Ready')).toBe(0);
  });

  it("takes the sweep's published count instead of scanning, every phase reported", async () => {
    await new PhaseCounts(redis).publish(new Map([[Phase.READY, 7]]), Date.now(), 60_000);
    await sandboxMetrics.countPhases();
    expect(await gauge('Ready')).toBe(7);
    expect(await gauge('Provisioning')).toBe(0);
  });

  it('scans again once the published count expired (sweeps stopped)', async () => {
    await new PhaseCounts(redis).publish(new Map([[Phase.READY, 7]]), Date.now(), 300);
    expect(await redis.pttl(keysFor(redis).phaseCounts())).toBeGreaterThan(0);
    await new Promise((r) => setTimeout(r, 500));
    expect(await new PhaseCounts(redis).read()).toBeNull();
    await sandboxMetrics.countPhases();
    expect(await gauge('Provisioning')).toBe(2);
    expect(await gauge('Ready')).toBe(0);
  });

  it('replaces a count whole: a phase that emptied reads 0, not its old count', async () => {
    const counts = new PhaseCounts(redis);
    await counts.publish(new Map([[Phase.READY, 3], [Phase.ERROR, 1]]), Date.now(), 60_000);
    await counts.publish(new Map([[Phase.READY, 4]]), Date.now(), 60_000);
    expect(await counts.read()).toEqual(new Map([[Phase.READY, 4]]));
  });
});
