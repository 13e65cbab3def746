// A private redis-server per test file, on a free port, so tests can kill and restart it.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { freePort } from './ports.ts';
import { waitFor } from './wait.ts';

export interface TestRedis {
  url: string;
  port: number;
  client(): Redis;
  stop(): Promise<void>;
}

export async function startRedis(): Promise<TestRedis> {
  const port = await freePort();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sg-redis-'));
  const proc: ChildProcess = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', '--daemonize', 'no'],
    { stdio: 'ignore' },
  );
  const url = `redis://127.0.0.1:${port}`;
  const clients: Redis[] = [];
  await waitFor('redis-server to answer PING', async () => {
    const r = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    r.on('error', () => undefined); // refused until the server is up: that is what we poll for
    try {
      await r.connect();
      return (await r.ping()) === 'PONG';
    } finally {
      r.disconnect();
    }
  });
  return {
    url,
    port,
    client() {
      const c = new Redis(url);
      clients.push(c);
      return c;
    },
    async stop() {
      for (const c of clients) c.disconnect();
      proc.kill('SIGKILL');
      await new Promise((r) => (proc.exitCode !== null ? r(null) : proc.once('exit', r)));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
