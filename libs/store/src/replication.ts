// Acknowledged writes that survive a failover. Redis replicates asynchronously: a primary that
// dies right after acknowledging a write can take it along, and the replica promoted in its place
// never saw it. A write a client is told succeeded (a create, delete, stop, start, token, an
// ownership claim) is therefore confirmed with WAIT before the answer goes out: at least
// `minReplicas` replicas have everything this connection wrote so far (WAIT counts per
// connection, and the write went first on the same one), or the caller gets UNAVAILABLE and may
// retry. 0 (one Redis, no replicas: `sandgate up`) turns the check off.
//
// WAIT blocks the connection it runs on until enough replicas answer or the timeout passes; with
// healthy replicas that is one round trip to them, and only when fewer than `minReplicas` are
// reachable does it hold the connection for `timeoutMs`.
import { Cluster } from 'ioredis';
import type { RedisClient } from './client.ts';
import { Code, GatewayError } from '@sandgate/core';

export interface ReplicationPolicy {
  /** Replicas that must have a write before it is acknowledged; 0: no check. */
  minReplicas: number;
  /** How long to wait for them. */
  timeoutMs: number;
}

export class ReplicationGuard {
  private readonly redis: RedisClient;
  readonly policy: ReplicationPolicy;

  constructor(redis: RedisClient, policy: ReplicationPolicy) {
    this.redis = redis;
    this.policy = policy;
  }

  /** Resolves once `minReplicas` replicas hold every write made so far on this connection; else UNAVAILABLE naming `what`. */
  async confirm(what: string): Promise<void> {
    const { minReplicas, timeoutMs } = this.policy;
    if (minReplicas <= 0) return;
    // On a cluster each primary took its share of the writes over a connection of its own: WAIT
    // on every one, and the least counts. WAIT counts per connection, so a primary whose replicas
    // hold all this client wrote to it answers at once.
    const connections = this.redis instanceof Cluster ? this.redis.nodes('master') : [this.redis];
    // No primary known (the cluster client between two views of the layout): nothing confirmed.
    const answers = connections.length > 0 ? await Promise.all(connections.map((c) => c.call('WAIT', minReplicas, timeoutMs))) : [0];
    const acknowledged = Math.min(...answers.map(Number));
    if (acknowledged < minReplicas) {
      throw new GatewayError(
        Code.UNAVAILABLE,
        `${what} reached ${acknowledged} of the ${minReplicas} Redis replica(s) required (SANDGATE_REDIS_MIN_REPLICAS) within ${timeoutMs} ms, ` +
          'so a failover could lose it; retry when the replicas are back',
      );
    }
  }
}
