// Replica liveness: each replica keeps an expiring key with the addresses its peers use.
import type { RedisClient } from './client.ts';
import { keysFor, type KeySchema } from './keys.ts';

export interface ReplicaInfo {
  replicaId: string;
  peerAddress: string;
  grpcAddress: string;
  pid: number;
  startedAtMs: number;
}

export class ReplicaRegistry {
  private readonly redis: RedisClient;
  private readonly keys: KeySchema;
  readonly ttlMs: number;
  constructor(redis: RedisClient, ttlMs: number) {
    this.redis = redis;
    this.keys = keysFor(redis);
    this.ttlMs = ttlMs;
  }

  async heartbeat(info: ReplicaInfo): Promise<void> {
    await this.redis.set(this.keys.replica(info.replicaId), JSON.stringify(info), 'PX', this.ttlMs);
  }

  /** Deregister: only our own key (a restarted replica with the same id re-registers at once). */
  async remove(replicaId: string): Promise<void> {
    await this.redis.del(this.keys.replica(replicaId));
  }

  async get(replicaId: string): Promise<ReplicaInfo | null> {
    const raw = await this.redis.get(this.keys.replica(replicaId));
    return raw ? (JSON.parse(raw) as ReplicaInfo) : null;
  }
}
