// A replica's configuration. Every field has a CLI flag and a SANDGATE_* environment variable
// (see apps/cli): the flag names are a public contract.
import type { DebugBreak } from '@sandgate/core';

export interface ReplicaConfig {
  /** Address the gRPC, HTTP and peer listeners bind to. */
  host: string;
  /** Public gRPC port: the OpenShell API and the supervisor protocol. 0 = pick a free port. */
  grpcPort: number;
  /** HTTP port: /healthz, /readyz, /metrics. 0 = pick a free port. */
  httpPort: number;
  /** Replica-to-replica relay port. 0 = pick a free port. */
  peerPort: number;
  redisUrl: string;
  /** Stable id of this replica; defaults to host-pid-random. */
  replicaId: string;
  driver: 'local' | 'docker';
  /** Where the local driver keeps sandbox directories and logs. */
  stateDir: string;
  /**
   * What supervisors dial (comma-separated host:port list): normally the load balancer's address.
   * Defaults to this replica's own gRPC address.
   */
  supervisorEndpoint: string;
  /** Address peers use to reach this replica's peer port; defaults to host:peerPort. */
  advertiseHost: string;
  /** Supervisor heartbeat interval; a session is closed after `heartbeatMisses` silent intervals. */
  heartbeatIntervalMs: number;
  heartbeatMisses: number;
  /** Lifetime of the ownership and liveness keys in Redis; renewed at a third of it. */
  ownerTtlMs: number;
  /** Run the BullMQ workers in this process. */
  workers: boolean;
  /** Concurrent execs per sandbox; the next one fails with RESOURCE_EXHAUSTED. */
  maxExecsPerSandbox: number;
  /** A sandbox whose supervisor has not connected by then becomes Error (ProvisioningTimeout). */
  provisionTimeoutMs: number;
  /** Lifetime of CreateSshSession tokens; 0 = never expire. Default: SANDGATE_SSH_SESSION_TTL_SECONDS, else 24 h. */
  sshSessionTtlSeconds?: number;
  /** Concurrent ForwardTcp connections per SSH session token (default 3). */
  sshMaxConnectionsPerToken?: number;
  /** Concurrent ForwardTcp connections per sandbox, across replicas (default 20). */
  sshMaxConnectionsPerSandbox?: number;
  /** Debug faults (SANDGATE_DEBUG_BREAK + SANDGATE_DEBUG_UNSAFE=1): negative chaos runs only. */
  debugBreaks?: ReadonlySet<DebugBreak>;
}

export const CONFIG_DEFAULTS = {
  host: '127.0.0.1',
  grpcPort: 8080,
  httpPort: 8081,
  peerPort: 8082,
  redisUrl: 'redis://127.0.0.1:6379',
  driver: 'local',
  heartbeatIntervalMs: 2000,
  heartbeatMisses: 3,
  ownerTtlMs: 6000,
  workers: true,
  maxExecsPerSandbox: 64,
  provisionTimeoutMs: 300_000,
} as const;

export interface RunningReplica {
  readonly replicaId: string;
  /** host:port of the public gRPC listener. */
  readonly grpcAddress: string;
  /** http://host:port of the HTTP listener. */
  readonly httpUrl: string;
  readonly peerAddress: string;
  /** Graceful stop: releases ownership of every session at once, then closes listeners. */
  close(): Promise<void>;
}
