// Atomic Lua scripts, run by SHA with a fallback to EVAL when Redis has not seen them yet
// (after a restart, for example).
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';

export class LuaScript {
  readonly sha: string;
  readonly source: string;
  readonly numberOfKeys: number;
  constructor(source: string, numberOfKeys: number) {
    this.source = source;
    this.numberOfKeys = numberOfKeys;
    this.sha = createHash('sha1').update(source).digest('hex');
  }

  async run(redis: Redis, keys: string[], args: (string | number | Buffer)[]): Promise<unknown> {
    // numberOfKeys -1: a script over a variable number of keys (e.g. one pair per session).
    if (this.numberOfKeys >= 0 && keys.length !== this.numberOfKeys) throw new Error(`script expects ${this.numberOfKeys} keys, got ${keys.length}`);
    try {
      return await redis.evalsha(this.sha, keys.length, ...keys, ...args);
    } catch (err) {
      if (err instanceof Error && err.message.startsWith('NOSCRIPT')) {
        return await redis.eval(this.source, keys.length, ...keys, ...args);
      }
      throw err;
    }
  }
}
