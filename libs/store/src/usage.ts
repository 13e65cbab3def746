// Per-sandbox CPU and memory as the owner replica last read them from its compute driver. The
// owner publishes (one pipelined round trip for all its sandboxes per interval); any replica
// reads, so `sandgate sandbox get` answers through whichever replica it reached. Expiring: a
// sandbox nobody owns any more stops having figures instead of keeping stale ones.
import type { Redis } from 'ioredis';
import { keys } from './keys.ts';

export interface SandboxUsageSample {
  sandboxId: string;
  cpuSeconds: number;
  memoryBytes: number;
  /** When the driver was read (ms since the epoch). */
  atMs: number;
  replica: string;
}

export class SandboxUsageStore {
  private readonly redis: Redis;
  constructor(redis: Redis) {
    this.redis = redis;
  }

  async publish(samples: SandboxUsageSample[], ttlMs: number): Promise<void> {
    if (samples.length === 0) return;
    const pipeline = this.redis.pipeline();
    for (const s of samples) {
      const key = keys.usage(s.sandboxId);
      pipeline.hset(key, 'cpu', String(s.cpuSeconds), 'mem', String(s.memoryBytes), 'at', String(s.atMs), 'replica', s.replica);
      pipeline.pexpire(key, ttlMs);
    }
    await pipeline.exec();
  }

  async get(sandboxId: string): Promise<SandboxUsageSample | null> {
    const h = await this.redis.hgetall(keys.usage(sandboxId));
    if (!h.at) return null;
    return { sandboxId, cpuSeconds: Number(h.cpu), memoryBytes: Number(h.mem), atMs: Number(h.at), replica: h.replica ?? '' };
  }
}
