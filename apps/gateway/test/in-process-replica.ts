// The configuration of a replica a test starts inside its own process (`startReplica`): the
// defaults, every listener on a free loopback port, the local driver under the test's state dir.
// Each test adds what it is about (workers, auth, quotas, OIDC, a Redis CA).
import { parseReplicaConfig, type ReplicaConfig } from '@sandgate/gateway';

export function inProcessReplicaConfig(
  where: { replicaId: string; redisUrl: string; stateDir: string },
  overrides: Partial<ReplicaConfig> = {},
): ReplicaConfig {
  return {
    ...parseReplicaConfig({}, {}, { hostname: 'test', pid: process.pid, homedir: where.stateDir, randomHex: () => '0000' }),
    host: '127.0.0.1',
    grpcPort: 0,
    httpPort: 0,
    peerPort: 0,
    redisUrl: where.redisUrl,
    replicaId: where.replicaId,
    driver: 'local',
    stateDir: where.stateDir,
    supervisorEndpoint: '',
    advertiseHost: '127.0.0.1',
    ...overrides,
  };
}
