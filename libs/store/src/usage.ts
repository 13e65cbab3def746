// Per-sandbox CPU and memory as the owner replica last read them from its compute driver. The
// owner publishes (all its sandboxes at once per interval, each only while its record exists:
// remove-sandbox-record-n deletes the key with the record); any replica
// reads, so `sandgate sandbox get` answers through whichever replica it reached. Expiring: a
// sandbox nobody owns any more stops having figures instead of keeping stale ones.
import type { RedisClient } from './client.ts';
import { keysFor, type KeySchema } from './keys.ts';
import { luaScript } from './lua.ts';

const PUBLISH = luaScript('publish-usage');

export interface SandboxUsageSample {
  sandboxId: string;
  cpuSeconds: number;
  memoryBytes: number;
  /** When the driver was read (ms since the epoch). */
  atMs: number;
  replica: string;
}

export class SandboxUsageStore {
  private readonly redis: RedisClient;
  private readonly keys: KeySchema;
  constructor(redis: RedisClient) {
    this.redis = redis;
    this.keys = keysFor(redis);
  }

  async publish(samples: SandboxUsageSample[], ttlMs: number): Promise<void> {
    // One script per sample, all sent at once (ioredis writes them without waiting for replies):
    // each writes only while the record exists, so a delete is never followed by a stale sample.
    await Promise.all(
      samples.map((s) =>
        PUBLISH.run(this.redis, [this.keys.sandbox(s.sandboxId), this.keys.usage(s.sandboxId)], [String(s.cpuSeconds), String(s.memoryBytes), String(s.atMs), s.replica, ttlMs]),
      ),
    );
  }

  async get(sandboxId: string): Promise<SandboxUsageSample | null> {
    const h = await this.redis.hgetall(this.keys.usage(sandboxId));
    if (!h.at) return null;
    return { sandboxId, cpuSeconds: Number(h.cpu), memoryBytes: Number(h.mem), atMs: Number(h.at), replica: h.replica ?? '' };
  }
}
