import { configDefaults, defineConfig } from 'vitest/config';

/**
 * End-to-end files whose time goes to waiting, not to this machine's two cores, so they run in
 * the second lane (E2E_SIDE_LANE, after the unit tests) beside the rest of the e2e suite
 * (scripts/test-lanes.sh), which keeps CI inside its time. They wait on Redis failovers and WAIT
 * timeouts, drain and exec deadlines, job schedules, Prometheus scrapes and span export. None asserts a duration tighter than what it
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
];

/**
 * End-to-end files run a second time against a Sentinel-managed Redis (a primary, a replica,
 * three Sentinels; SANDGATE_TEST_REDIS=sentinel in test/harness/redis.ts, and the replicas wait
 * for the replica on every acknowledged write): the ones whose subject is the state replicas share
 * (ownership and relays, access rules, tokens, workspaces, forwards, the REST API). In the second
 * lane, after `e2e-side`, inside the time the main lane takes anyway: lifecycle.test.ts (200 s in
 * this mode) does not fit there and runs in Sentinel mode only with the whole suite
 * (`SANDGATE_TEST_REDIS=sentinel bash scripts/test-e2e.sh`; BENCHMARKS.md has the run).
 */
const E2E_SENTINEL = [
  'test/e2e/exec-relay.test.ts',
  'test/e2e/auth.test.ts',
  'test/e2e/workspaces.test.ts',
  'test/e2e/http-api.test.ts',
  'test/e2e/forward.test.ts',
  'test/e2e/sdk-connect.test.ts',
];

/**
 * The second lane's e2e files: the waiting ones, and the shared-state files in their ordinary
 * (single Redis) run too, which balances the two lanes (each ~16 minutes in CI).
 */
const E2E_SIDE_LANE = [...E2E_WAITING, ...E2E_SENTINEL];

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
          name: 'e2e',
          include: ['test/**/*.test.ts'],
          exclude: [...configDefaults.exclude, 'test/repo/**', ...E2E_SIDE_LANE],
          // Multi-process tests share two cores: one file at a time keeps them honest.
          fileParallelism: false,
          testTimeout: 120_000,
          hookTimeout: 60_000,
        },
      },
      {
        test: {
          name: 'e2e-sentinel',
          include: E2E_SENTINEL,
          env: { SANDGATE_TEST_REDIS: 'sentinel' },
          fileParallelism: false,
          testTimeout: 120_000,
          hookTimeout: 60_000,
        },
      },
      {
        test: {
          // Run beside `e2e` (scripts/test-lanes.sh): one file at a time here too.
          name: 'e2e-side',
          include: E2E_SIDE_LANE,
          fileParallelism: false,
          testTimeout: 120_000,
          hookTimeout: 60_000,
        },
      },
    ],
  },
});
