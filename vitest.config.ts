import { configDefaults, defineConfig } from 'vitest/config';

/**
 * End-to-end files that spend their time waiting, not computing: on Redis failovers and WAIT
 * timeouts, drain and exec deadlines, job schedules, Prometheus scrapes, span export. They run as
 * a second lane beside the rest of the e2e suite (scripts/test-e2e.sh), which keeps CI inside its
 * time; none of them asserts a duration tighter than what it waits for.
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
          exclude: [...configDefaults.exclude, 'test/repo/**', ...E2E_WAITING],
          // Multi-process tests share two cores: one file at a time keeps them honest.
          fileParallelism: false,
          testTimeout: 120_000,
          hookTimeout: 60_000,
        },
      },
      {
        test: {
          // Run beside `e2e` (scripts/test-e2e.sh): one file at a time here too.
          name: 'e2e-waiting',
          include: E2E_WAITING,
          fileParallelism: false,
          testTimeout: 120_000,
          hookTimeout: 60_000,
        },
      },
    ],
  },
});
