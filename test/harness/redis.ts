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
  /** Stops the server (SIGTERM: it writes its append-only file) and starts it again on the same port and data. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

export interface RedisOptions {
  /** Append-only persistence, so a restart keeps every key. */
  persistent?: boolean;
}

async function waitForPing(url: string): Promise<void> {
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
}

export async function startRedis(opts: RedisOptions = {}): Promise<TestRedis> {
  const port = await freePort();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sg-redis-'));
  const args = [
    '--port', String(port),
    '--bind', '127.0.0.1',
    '--dir', dir,
    '--save', '',
    '--appendonly', opts.persistent ? 'yes' : 'no',
    '--appendfsync', 'everysec',
    '--daemonize', 'no',
  ];
  let proc: ChildProcess = spawn('redis-server', args, { stdio: 'ignore' });
  const url = `redis://127.0.0.1:${port}`;
  const clients: Redis[] = [];
  await waitForPing(url);
  const exit = (p: ChildProcess, sig: NodeJS.Signals) =>
    new Promise<void>((resolve) => {
      if (p.exitCode !== null || p.signalCode !== null) return resolve();
      p.once('exit', () => resolve());
      p.kill(sig);
    });
  return {
    url,
    port,
    client() {
      const c = new Redis(url);
      c.on('error', () => undefined);
      clients.push(c);
      return c;
    },
    async restart() {
      await exit(proc, 'SIGTERM');
      proc = spawn('redis-server', args, { stdio: 'ignore' });
      await waitForPing(url);
    },
    async stop() {
      for (const c of clients) c.disconnect();
      await exit(proc, 'SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
