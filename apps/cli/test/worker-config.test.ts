// `sandgate worker` options: the replicas' flags and variables, a required supervisor endpoint,
// and clear usage errors for bad input.
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { UsageError } from '../src/args.ts';
import { resolveWorkerConfig } from '../src/commands/worker.ts';
import type { HostFacts } from '../src/replica-config.ts';

const facts: HostFacts = { hostname: 'box', pid: 42, homedir: '/home/u', randomHex: () => 'beef' };
const LB = { SANDGATE_SUPERVISOR_ENDPOINT: 'lb:8080' };

describe('resolveWorkerConfig', () => {
  it('takes the replicas’ variables, with flags winning', () => {
    const env = { ...LB, SANDGATE_REDIS_URL: 'redis://env:6379', SANDGATE_DRIVER: 'docker', SANDGATE_STATE_DIR: '/var/sg', SANDGATE_PEER_SECRET: 's3' };
    const fromEnv = resolveWorkerConfig([], env, facts);
    expect(fromEnv).toMatchObject({
      workerId: 'worker-box-42-beef',
      redisUrl: 'redis://env:6379',
      driver: 'docker',
      stateDir: '/var/sg',
      supervisorEndpoint: 'lb:8080',
      peerSecret: 's3',
      jobsEnabled: true,
    });
    const fromFlags = resolveWorkerConfig(
      ['--redis', 'redis://flag:1', '--driver', 'local', '--state-dir', 'rel', '--supervisor-endpoint', 'a:1,b:2', '--worker-id', 'w9'],
      env,
      facts,
    );
    expect(fromFlags).toMatchObject({ workerId: 'w9', redisUrl: 'redis://flag:1', driver: 'local', stateDir: path.resolve('rel'), supervisorEndpoint: 'a:1,b:2' });
  });

  it('requires a supervisor endpoint, since restarted supervisors dial it', () => {
    expect(() => resolveWorkerConfig([], {}, facts)).toThrow(/--supervisor-endpoint .* is required/);
  });

  it.each([
    [['--driver', 'nope'], /--driver must be one of local, docker/],
    [['--worker-id', 'a b'], /must be non-empty without whitespace/],
    [['--grpc-port', '1'], /Unknown option '--grpc-port'/],
    [['extra'], /unexpected argument 'extra'/],
  ])('%j is a usage error', (argv, message) => {
    expect(() => resolveWorkerConfig(argv, LB, facts)).toThrow(UsageError);
    expect(() => resolveWorkerConfig(argv, LB, facts)).toThrow(message);
  });

  it('honours the jobs debug fault only with SANDGATE_DEBUG_UNSAFE=1', () => {
    expect(() => resolveWorkerConfig([], { ...LB, SANDGATE_DEBUG_BREAK: 'jobs' }, facts)).toThrow(/SANDGATE_DEBUG_UNSAFE=1/);
    expect(resolveWorkerConfig([], { ...LB, SANDGATE_DEBUG_BREAK: 'jobs', SANDGATE_DEBUG_UNSAFE: '1' }, facts).jobsEnabled).toBe(false);
  });
});
