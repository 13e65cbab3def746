import { configDefaults, defineConfig } from 'vitest/config';

/**
 * End-to-end files whose time goes to waiting, not to this machine's two cores, so they run in
 * the second lane (`e2e-side`, after the unit tests) beside the rest of the e2e suite
 * (scripts/test-lanes.sh), which keeps CI inside its time. They wait on Redis failovers and WAIT
 * timeouts, Redis restarts, drain and exec deadlines, job schedules (pool refills, the sweep), Prometheus scrapes and span export. None asserts a duration tighter than what it
 * waits for. (The docker driver's files were tried here too: with them beside it, the main
 * lane's exec-kill set-up, three replicas and a sandbox, once took over its 60 s.)
 */
const E2E_WAITING = [
  'test/e2e/redis-sentinel.test.ts',
  'test/e2e/redis-wait.test.ts',
  'test/e2e/drain-deadline.test.ts',
  'test/e2e/exec-backstop.test.ts',
  'test/e2e/worker.test.ts',
  'test/e2e/prometheus.test.ts',
  'test/e2e/metrics.test.ts',
  'test/e2e/tracing.test.ts',
  'test/e2e/balancer-redis-restart.test.ts',
  'test/e2e/balancer-dead-replica.test.ts',
  'test/e2e/redis-partition.test.ts',
  'test/e2e/pools.test.ts',
];

/**
 * End-to-end files about the state replicas share (ownership and relays, access rules, tokens,
 * workspaces, forwards, the REST API). `npm test` runs them against a Sentinel-managed Redis
 * (`e2e-sentinel`: a primary, a replica, three Sentinels; SANDGATE_TEST_REDIS=sentinel in
 * test/harness/redis.ts, and the replicas wait for the replica on every acknowledged write), in
 * the second lane after `e2e-side`, and against a Redis Cluster (`e2e-cluster`: three primaries
 * with a replica each, SANDGATE_TEST_REDIS=cluster, the replicas waiting for a replica too) after
 * `e2e` in the first lane: the harder modes, and the single server's code paths run in every
 * other e2e file. `e2e-shared` is the same files in whatever mode SANDGATE_TEST_REDIS
 * says (a single server by default): `scripts/test-e2e.sh`, the whole suite in one mode, runs it.
 * lifecycle.test.ts (200 s in Sentinel mode) does not fit in the lane and runs in Sentinel mode
 * only with the whole suite (`SANDGATE_TEST_REDIS=sentinel bash scripts/test-e2e.sh`, and
 * `SANDGATE_TEST_REDIS=cluster` for a cluster; BENCHMARKS.md has the runs).
 */
const E2E_SHARED_STATE = [
  'test/e2e/exec-relay.test.ts',
  'test/e2e/auth.test.ts',
  'test/e2e/workspaces.test.ts',
  'test/e2e/http-api.test.ts',
  'test/e2e/forward.test.ts',
  'test/e2e/sdk-connect.test.ts',
];

/**
 * The short fuzz run (load-tests/fuzz.ts --short: hostile input at every door of two replicas),
 * as one test at the end of the second lane, which ends well before the first one.
 */
const FUZZ_SHORT = ['test/fuzz/**/*.test.ts'];

const e2eProject = (name: string, include: string[], env?: Record<string, string>) => ({
  test: {
    name,
    include,
    ...(env ? { env } : {}),
    // Multi-process tests share two cores: one file at a time keeps them honest.
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 60_000,
  },
});

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'unit',
          // test/repo: checks of the repository itself (package manifests, imports), fast like unit tests.
          include: ['libs/*/test/**/*.test.ts', 'apps/*/test/**/*.test.ts', 'test/repo/**/*.test.ts'],
          testTimeout: 30_000,
          hookTimeout: 30_000,
        },
      },
      {
        test: {
          ...e2eProject('e2e', ['test/**/*.test.ts']).test,
          exclude: [...configDefaults.exclude, 'test/repo/**', ...FUZZ_SHORT, ...E2E_WAITING, ...E2E_SHARED_STATE],
        },
      },
      // Run beside `e2e` (scripts/test-lanes.sh): one file at a time here too.
      e2eProject('e2e-side', E2E_WAITING),
      e2eProject('e2e-shared', E2E_SHARED_STATE),
      e2eProject('e2e-sentinel', E2E_SHARED_STATE, { SANDGATE_TEST_REDIS: 'sentinel' }),
      e2eProject('e2e-cluster', E2E_SHARED_STATE, { SANDGATE_TEST_REDIS: 'cluster' }),
      e2eProject('fuzz', FUZZ_SHORT),
    ],
  },
});
