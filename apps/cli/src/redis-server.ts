// A private redis-server for `sandgate up`: found on PATH, started on a free loopback port with
// its data in <stateDir>/redis, and considered up once it answers PING.
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, mkdirSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';

export const REDIS_NOT_FOUND = 'redis-server not found on PATH: install it (apt-get install redis-server) or pass --redis URL';

export interface PrivateRedis {
  url: string;
  port: number;
  /** SIGTERM, then wait for it to exit (SIGKILL after `graceMs`). */
  stop(graceMs?: number): Promise<void>;
  /** Resolves when the process exits, with its exit code or signal. */
  readonly exited: Promise<string>;
}

/** The first executable `name` in PATH, or undefined. */
export function findOnPath(name: string, pathVar: string | undefined): string | undefined {
  for (const dir of (pathVar ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** redis-server's arguments for a private instance. */
export function redisServerArgs(port: number, dir: string): string[] {
  return [
    '--port', String(port),
    '--dir', dir,
    '--save', '60', '1',
    '--appendonly', 'yes',
    '--daemonize', 'no',
    '--bind', '127.0.0.1',
    '--protected-mode', 'yes',
  ];
}

export function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** One PING over a raw socket: true when the server answers +PONG. */
export function pingRedis(port: number, host = '127.0.0.1', timeoutMs = 1000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host });
    let reply = '';
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('error', () => done(false));
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk: Buffer) => {
      reply += chunk.toString('latin1');
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
  });
}

/** Starts redis-server (retrying on a port race) and waits until it answers PING. */
export async function startPrivateRedis(stateDir: string, env: Readonly<Record<string, string | undefined>>, timeoutMs = 15_000): Promise<PrivateRedis> {
  const binary = findOnPath('redis-server', env.PATH);
  if (!binary) throw new Error(REDIS_NOT_FOUND);
  const dir = path.join(stateDir, 'redis');
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  let lastError: Error | undefined;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freeLoopbackPort();
    try {
      return await startOn(binary, port, dir, timeoutMs);
    } catch (err) {
      lastError = err as Error;
    }
  }
  throw lastError ?? new Error('redis-server did not start');
}

async function startOn(binary: string, port: number, dir: string, timeoutMs: number): Promise<PrivateRedis> {
  // Its own process group: a terminal's Ctrl-C reaches only us, and we stop Redis after the replica.
  const proc: ChildProcess = spawn(binary, redisServerArgs(port, dir), { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let tail = '';
  const collect = (chunk: Buffer) => {
    tail = (tail + chunk.toString()).slice(-4000);
  };
  proc.stdout!.on('data', collect);
  proc.stderr!.on('data', collect);
  const exited = new Promise<string>((resolve) => {
    proc.once('exit', (code, signal) => resolve(signal ? `signal ${signal}` : `code ${code}`));
    proc.once('error', (err) => resolve(`error ${err.message}`));
  });
  let exitedWith: string | undefined;
  void exited.then((why) => (exitedWith = why));
  // Never leave it behind if we exit without stopping it.
  const killOnExit = () => proc.kill('SIGTERM');
  process.once('exit', killOnExit);

  const deadline = Date.now() + timeoutMs;
  while (!(await pingRedis(port))) {
    if (exitedWith !== undefined) {
      process.off('exit', killOnExit);
      throw new Error(`redis-server exited (${exitedWith}) before answering PING: ${tail.trim().split('\n').slice(-3).join(' | ')}`);
    }
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      process.off('exit', killOnExit);
      throw new Error(`redis-server on port ${port} did not answer PING within ${timeoutMs / 1000}s`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    exited,
    async stop(graceMs = 10_000) {
      process.off('exit', killOnExit);
      if (exitedWith !== undefined) return;
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}
