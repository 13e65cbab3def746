// A redis-server for one test file: started before the file's tests, stopped after them.
import { afterAll, beforeAll } from 'vitest';
import { startRedis, type RedisOptions, type TestRedis } from './redis.ts';

/** Registers the file's hooks; `onStart` receives the running server (to open clients on it). */
export function redisForFile(onStart: (server: TestRedis) => void, opts: RedisOptions = {}): void {
  let server: TestRedis | undefined;
  beforeAll(async () => {
    server = await startRedis(opts);
    onStart(server);
  });
  afterAll(async () => server?.stop());
}
