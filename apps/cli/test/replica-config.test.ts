import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CONFIG_DEFAULTS } from '@sandgate/gateway';
import { DebugBreakError } from '@sandgate/core';
import { UsageError } from '../src/args.ts';
import { resolveReplicaConfig, resolveUpConfig, type HostFacts } from '../src/replica-config.ts';

const facts: HostFacts = { hostname: 'box', pid: 42, homedir: '/home/u', randomHex: () => 'beef' };

const ENV_ALL = {
  SANDGATE_HOST: '10.0.0.5',
  SANDGATE_GRPC_PORT: '9000',
  SANDGATE_HTTP_PORT: '9001',
  SANDGATE_PEER_PORT: '9002',
  SANDGATE_REDIS_URL: 'redis://env:6379',
  SANDGATE_REPLICA_ID: 'env-id',
  SANDGATE_DRIVER: 'docker',
  SANDGATE_STATE_DIR: '/env/state',
  SANDGATE_SUPERVISOR_ENDPOINT: 'lb:9000',
  SANDGATE_ADVERTISE_HOST: 'env.example',
  SANDGATE_WORKERS: '0',
};

const FLAGS_ALL = [
  '--host', '0.0.0.0',
  '--grpc-port', '7000',
  '--http-port', '7001',
  '--peer-port', '7002',
  '--redis', 'redis://flag:6379',
  '--replica-id', 'flag-id',
  '--driver', 'local',
  '--state-dir', '/flag/state',
  '--supervisor-endpoint', 'a:1,b:2',
  '--advertise-host', 'flag.example',
  '--no-workers',
];

describe('resolveReplicaConfig', () => {
  it('uses the defaults when nothing is given', () => {
    expect(resolveReplicaConfig([], {}, facts)).toEqual({
      host: CONFIG_DEFAULTS.host,
      grpcPort: CONFIG_DEFAULTS.grpcPort,
      httpPort: CONFIG_DEFAULTS.httpPort,
      peerPort: CONFIG_DEFAULTS.peerPort,
      redisUrl: CONFIG_DEFAULTS.redisUrl,
      replicaId: 'box-42-beef',
      driver: 'local',
      stateDir: path.join('/home/u', '.local', 'state', 'sandgate'),
      supervisorEndpoint: '',
      advertiseHost: CONFIG_DEFAULTS.host,
      heartbeatIntervalMs: CONFIG_DEFAULTS.heartbeatIntervalMs,
      heartbeatMisses: CONFIG_DEFAULTS.heartbeatMisses,
      drainTimeoutMs: 10_000,
      supervisorCompileCache: true,
      ownerTtlMs: CONFIG_DEFAULTS.ownerTtlMs,
      maxExecsPerSandbox: CONFIG_DEFAULTS.maxExecsPerSandbox,
      provisionTimeoutMs: CONFIG_DEFAULTS.provisionTimeoutMs,
      sshSessionTtlSeconds: 86_400,
      sshMaxConnectionsPerToken: 3,
      sshMaxConnectionsPerSandbox: 20,
      dockerImage: '',
      dockerNetnsSpares: 2,
      localDiskSpares: 4,
      peerSecret: '',
      tlsCert: '',
      tlsKey: '',
      tlsCa: '',
      clientCa: '',
      auth: true,
      oidcIssuer: '',
      oidcAudience: '',
      oidcJwksUrl: '',
      oidcWorkspaceClaim: 'workspace',
      oidcRoleClaim: 'roles',
      oidcAdminRole: 'admin',
      maxSandboxesPerWorkspace: 0,
      maxExecsPerWorkspace: 0,
      serviceDomain: 'openshell.localhost',
      servicePublicScheme: '',
      servicePublicPort: 0,
      redisCa: '',
      redisMinReplicas: 0,
      redisWaitTimeoutMs: 1000,
      orphanGraceMs: 60_000,
      pendingGraceMs: 60_000,
      logLevel: 'info',
      debugBreaks: new Set(),
      // No OTEL_* variables: /metrics only, no OTLP push.
      otlpMetrics: null,
      workers: true,
    });
  });

  it('takes the OTLP metrics export from the standard OTEL_* variables, off with OTEL_SDK_DISABLED', () => {
    const env = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_METRIC_EXPORT_INTERVAL: '1000' };
    expect(resolveReplicaConfig([], env, facts).otlpMetrics).toEqual({ url: 'http://127.0.0.1:4318/v1/metrics', protocol: 'http/json', intervalMs: 1000 });
    expect(resolveReplicaConfig([], { ...env, OTEL_SDK_DISABLED: 'true' }, facts).otlpMetrics).toBeNull();
  });

  it('reads the tuning knobs from the environment only', () => {
    expect(
      resolveReplicaConfig([], { SANDGATE_OWNER_TTL_MS: '1500', SANDGATE_MAX_EXECS_PER_SANDBOX: '8', SANDGATE_PROVISION_DEADLINE_SECONDS: '5' }, facts),
    ).toMatchObject({ ownerTtlMs: 1500, maxExecsPerSandbox: 8, provisionTimeoutMs: 5000 });
    expect(() => resolveReplicaConfig([], { SANDGATE_OWNER_TTL_MS: 'soon' }, facts)).toThrow(/SANDGATE_OWNER_TTL_MS must be a positive integer/);
  });

  it('takes the provisioning deadline from SANDGATE_PROVISION_DEADLINE_SECONDS, else its alias SANDGATE_PROVISION_TIMEOUT', () => {
    expect(resolveReplicaConfig([], { SANDGATE_PROVISION_TIMEOUT: '9' }, facts).provisionTimeoutMs).toBe(9000);
    expect(resolveReplicaConfig([], { SANDGATE_PROVISION_TIMEOUT: '9', SANDGATE_PROVISION_DEADLINE_SECONDS: '4' }, facts).provisionTimeoutMs).toBe(4000);
    expect(() => resolveReplicaConfig([], { SANDGATE_PROVISION_TIMEOUT: '0' }, facts)).toThrow(/SANDGATE_PROVISION_TIMEOUT must be between 1/);
  });

  it('reads the environment-only options: SSH limits, docker image, peer secret, log level', () => {
    expect(
      resolveReplicaConfig(
        [],
        {
          SANDGATE_SSH_SESSION_TTL_SECONDS: '0',
          SANDGATE_SSH_MAX_CONNECTIONS_PER_TOKEN: '5',
          SANDGATE_SSH_MAX_CONNECTIONS_PER_SANDBOX: '50',
          SANDGATE_DOCKER_IMAGE: 'debian:12',
          SANDGATE_PEER_SECRET: 's3cret',
          SANDGATE_LOG_LEVEL: 'ERROR',
        },
        facts,
      ),
    ).toMatchObject({
      sshSessionTtlSeconds: 0,
      sshMaxConnectionsPerToken: 5,
      sshMaxConnectionsPerSandbox: 50,
      dockerImage: 'debian:12',
      peerSecret: 's3cret',
      logLevel: 'error',
    });
    expect(resolveReplicaConfig([], { SANDGATE_DOCKER_NETNS_SPARES: '0' }, facts).dockerNetnsSpares).toBe(0);
    expect(resolveReplicaConfig([], { SANDGATE_DOCKER_NETNS_SPARES: '64' }, facts).dockerNetnsSpares).toBe(64);
    expect(() => resolveReplicaConfig([], { SANDGATE_DOCKER_NETNS_SPARES: '65' }, facts)).toThrow(/SANDGATE_DOCKER_NETNS_SPARES must be between 0 and 64, got '65'/);
    expect(() => resolveReplicaConfig([], { SANDGATE_DOCKER_NETNS_SPARES: 'two' }, facts)).toThrow(/SANDGATE_DOCKER_NETNS_SPARES must be a whole number from 0 to 64/);
    expect(resolveReplicaConfig([], {}, facts).localDiskSpares).toBe(4);
    expect(resolveReplicaConfig([], { SANDGATE_LOCAL_DISK_SPARES: '0' }, facts).localDiskSpares).toBe(0);
    expect(() => resolveReplicaConfig([], { SANDGATE_LOCAL_DISK_SPARES: '65' }, facts)).toThrow(/SANDGATE_LOCAL_DISK_SPARES must be between 0 and 64, got '65'/);
    expect(resolveReplicaConfig([], { SANDGATE_SSH_SESSION_TTL_SECONDS: '60' }, facts).sshSessionTtlSeconds).toBe(60);
    expect(() => resolveReplicaConfig([], { SANDGATE_SSH_SESSION_TTL_SECONDS: '-1' }, facts)).toThrow(/SANDGATE_SSH_SESSION_TTL_SECONDS must be a whole number/);
    expect(() => resolveReplicaConfig([], { SANDGATE_SSH_SESSION_TTL_SECONDS: '1.5' }, facts)).toThrow(/whole number/);
    expect(() => resolveReplicaConfig([], { SANDGATE_LOG_LEVEL: 'loud' }, facts)).toThrow(/SANDGATE_LOG_LEVEL must be one of debug, info, warn, error/);
  });

  it('takes a Sentinel or a cluster address and refuses what it cannot serve, naming the flag or variable', () => {
    const sentinel = 'redis+sentinel://sandgate:pw@10.0.0.1:26379,10.0.0.2:26379/mymaster';
    expect(resolveReplicaConfig(['--redis', sentinel], {}, facts).redisUrl).toBe(sentinel);
    expect(() => resolveReplicaConfig(['--redis', 'redis+sentinel://10.0.0.1:26379'], {}, facts)).toThrow(/--redis: redis\+sentinel:\/\/ names no master/);
    expect(resolveReplicaConfig([], { SANDGATE_REDIS_URL: 'redis+cluster://a:1,b:2' }, facts).redisUrl).toBe('redis+cluster://a:1,b:2');
    expect(() => resolveReplicaConfig([], { SANDGATE_REDIS_URL: 'redis+cluster://a:1/0' }, facts)).toThrow(/SANDGATE_REDIS_URL: redis\+cluster:\/\/ takes no path/);
    expect(() => resolveReplicaConfig([], { SANDGATE_REDIS_URL: 'localhost:6379' }, facts)).toThrow(/SANDGATE_REDIS_URL: .*unknown scheme/);
    expect(resolveReplicaConfig([], { SANDGATE_SUPERVISOR_COMPILE_CACHE: '0' }, facts).supervisorCompileCache).toBe(false);
    expect(resolveReplicaConfig([], { SANDGATE_DRAIN_TIMEOUT_MS: '2500' }, facts).drainTimeoutMs).toBe(2500);
    expect(() => resolveReplicaConfig([], { SANDGATE_DRAIN_TIMEOUT_MS: '0' }, facts)).toThrow(/SANDGATE_DRAIN_TIMEOUT_MS must be between 1/);
  });

  it('exposes debug faults only with SANDGATE_DEBUG_UNSAFE=1', () => {
    const env = { SANDGATE_DEBUG_BREAK: 'fencing,jobs' };
    expect(() => resolveReplicaConfig([], env, facts)).toThrow(DebugBreakError);
    expect([...resolveReplicaConfig([], { ...env, SANDGATE_DEBUG_UNSAFE: '1' }, facts).debugBreaks]).toEqual(['fencing', 'jobs']);
    expect([...resolveReplicaConfig([], { SANDGATE_DEBUG_DISABLE_FENCING: '1', SANDGATE_DEBUG_UNSAFE: '1' }, facts).debugBreaks]).toEqual(['fencing']);
  });

  it('takes every value from the environment over the defaults', () => {
    expect(resolveReplicaConfig([], ENV_ALL, facts)).toMatchObject({
      host: '10.0.0.5',
      grpcPort: 9000,
      httpPort: 9001,
      peerPort: 9002,
      redisUrl: 'redis://env:6379',
      replicaId: 'env-id',
      driver: 'docker',
      stateDir: '/env/state',
      supervisorEndpoint: 'lb:9000',
      advertiseHost: 'env.example',
      workers: false,
    });
  });

  it('lets every flag win over the environment', () => {
    expect(resolveReplicaConfig(FLAGS_ALL, { ...ENV_ALL, SANDGATE_WORKERS: '1' }, facts)).toMatchObject({
      host: '0.0.0.0',
      grpcPort: 7000,
      httpPort: 7001,
      peerPort: 7002,
      redisUrl: 'redis://flag:6379',
      replicaId: 'flag-id',
      driver: 'local',
      stateDir: '/flag/state',
      supervisorEndpoint: 'a:1,b:2',
      advertiseHost: 'flag.example',
      workers: false,
    });
  });

  it('mixes sources field by field', () => {
    const config = resolveReplicaConfig(['--grpc-port', '0'], { SANDGATE_GRPC_PORT: '9000', SANDGATE_HTTP_PORT: '9001' }, facts);
    expect(config.grpcPort).toBe(0);
    expect(config.httpPort).toBe(9001);
    expect(config.peerPort).toBe(CONFIG_DEFAULTS.peerPort);
  });

  it('defaults advertiseHost to the effective host', () => {
    expect(resolveReplicaConfig(['--host', '10.1.2.3'], {}, facts).advertiseHost).toBe('10.1.2.3');
    expect(resolveReplicaConfig([], { SANDGATE_HOST: '10.9.9.9' }, facts).advertiseHost).toBe('10.9.9.9');
  });

  it('treats empty environment variables as unset', () => {
    expect(resolveReplicaConfig([], { SANDGATE_GRPC_PORT: '', SANDGATE_REPLICA_ID: '' }, facts)).toMatchObject({
      grpcPort: CONFIG_DEFAULTS.grpcPort,
      replicaId: 'box-42-beef',
    });
  });

  it('reads SANDGATE_WORKERS as 0/1', () => {
    expect(resolveReplicaConfig([], { SANDGATE_WORKERS: '1' }, facts).workers).toBe(true);
    expect(resolveReplicaConfig([], { SANDGATE_WORKERS: '0' }, facts).workers).toBe(false);
    expect(() => resolveReplicaConfig([], { SANDGATE_WORKERS: 'maybe' }, facts)).toThrow(/SANDGATE_WORKERS must be 0 or 1/);
  });

  it('resolves a relative state dir to an absolute path', () => {
    expect(resolveReplicaConfig(['--state-dir', 'rel/dir'], {}, facts).stateDir).toBe(path.resolve('rel/dir'));
  });

  it.each([
    [['--grpc-port', 'abc'], {}, /--grpc-port must be an integer/],
    [[], { SANDGATE_HTTP_PORT: '70000' }, /SANDGATE_HTTP_PORT must be between 0 and 65535/],
    [['--driver', 'k8s'], {}, /--driver must be one of local, docker/],
    [[], { SANDGATE_DRIVER: 'k8s' }, /SANDGATE_DRIVER must be one of/],
    [['--replica-id', 'a b'], {}, /whitespace/],
    [['--host', ''], {}, /--host must not be empty/],
    [['--bogus'], {}, /Unknown option '--bogus'/],
    [['extra'], {}, /unexpected argument 'extra'/],
  ])('rejects %j %j', (argv, env, message) => {
    expect(() => resolveReplicaConfig(argv as string[], env as Record<string, string>, facts)).toThrow(UsageError);
    expect(() => resolveReplicaConfig(argv as string[], env as Record<string, string>, facts)).toThrow(message);
  });
});

describe('resolveUpConfig', () => {
  it('runs a private Redis unless a URL is given by flag or environment', () => {
    expect(resolveUpConfig([], {}, facts).privateRedis).toBe(true);
    expect(resolveUpConfig(['--redis', 'redis://r:1'], {}, facts)).toMatchObject({ privateRedis: false, config: { redisUrl: 'redis://r:1' } });
    expect(resolveUpConfig([], { SANDGATE_REDIS_URL: 'redis://e:1' }, facts)).toMatchObject({ privateRedis: false, config: { redisUrl: 'redis://e:1' } });
  });

  it('always runs workers and honours its flags over the environment', () => {
    const { config } = resolveUpConfig(['--grpc-port', '7000', '--state-dir', '/s'], { SANDGATE_WORKERS: '0', SANDGATE_GRPC_PORT: '9000', SANDGATE_HTTP_PORT: '9001' }, facts);
    expect(config).toMatchObject({ workers: true, grpcPort: 7000, httpPort: 9001, stateDir: '/s', driver: 'local' });
  });

  it('picks a driver only when neither --driver nor SANDGATE_DRIVER names one', () => {
    expect(resolveUpConfig([], {}, facts).pickDriver).toBe(true);
    expect(resolveUpConfig([], { SANDGATE_DRIVER: '' }, facts).pickDriver).toBe(true);
    expect(resolveUpConfig(['--driver', 'local'], {}, facts).pickDriver).toBe(false);
    expect(resolveUpConfig([], { SANDGATE_DRIVER: 'docker' }, facts)).toMatchObject({ pickDriver: false, config: { driver: 'docker' } });
  });

  it('does not accept gateway-only flags', () => {
    expect(() => resolveUpConfig(['--peer-port', '1'], {}, facts)).toThrow(/Unknown option '--peer-port'/);
  });
});
