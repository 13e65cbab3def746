// A private redis-server for `sandgate up`: found on PATH, started on a free loopback port with
// its data in <stateDir>/redis, locked (nobody can log in as `default`; one ACL user, `sandgate`, whose
// generated password is kept 0600 in <stateDir>/redis-password and reused across starts), and
// considered up once it answers PING as that user. The password reaches redis-server through an
// ACL file (0600), never its command line, and the replica through the URL (which `up` never prints).
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { accessSync, chmodSync, constants, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';

export const REDIS_NOT_FOUND = 'redis-server not found on PATH: install it (apt-get install redis-server) or pass --redis URL';

/** The ACL user the replicas connect as. */
export const PRIVATE_REDIS_USER = 'sandgate';

export interface PrivateRedis {
  /** With the credentials: hand it to the replica, never print it. */
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

/** redis-server's arguments for a private instance; its users come from `aclFile`. */
export function redisServerArgs(port: number, dir: string, aclFile: string): string[] {
  return [
    '--port', String(port),
    '--dir', dir,
    '--save', '60', '1',
    '--appendonly', 'yes',
    '--daemonize', 'no',
    '--bind', '127.0.0.1',
    '--protected-mode', 'yes',
    '--aclfile', aclFile,
  ];
}

/**
 * The ACL file's lines: nobody gets in as `default`; the replicas' user may do everything. Both
 * passwords are stored as SHA-256 (`#…`), so the file holds no password.
 *
 * `default` stays *on* (with a random password no one is ever given) rather than `off`: Redis 7.0
 * replays the append-only file as the default user, and with that user off it refuses every
 * MULTI/EXEC in the file ("NOPERM ACLs rules changed…"), which is how our multi-key Lua scripts
 * are logged. A restart would silently drop every token, record and workspace those scripts wrote.
 */
export function aclFileText(password: string, defaultUserSecret = randomBytes(32).toString('hex')): string {
  const hash = (secret: string) => createHash('sha256').update(secret).digest('hex');
  return `user default on #${hash(defaultUserSecret)} ~* &* +@all\nuser ${PRIVATE_REDIS_USER} on #${hash(password)} ~* &* +@all\n`;
}

/** The state directory's Redis password: generated on first start (0600), the same ever after. */
export function privateRedisPassword(stateDir: string): string {
  const file = path.join(stateDir, 'redis-password');
  try {
    const existing = readFileSync(file, 'utf8').trim();
    // Only what we generate is accepted: anything else could break the ACL line.
    if (/^[A-Za-z0-9_-]{32,}$/.test(existing)) {
      chmodSync(file, 0o600);
      return existing;
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const password = randomBytes(32).toString('base64url');
  writeFileSync(file, `${password}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
  return password;
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

/**
 * One PING over a raw socket: true when the server answers +PONG. With `auth`, an AUTH first, and
 * both must succeed (so "up" also means "our user works").
 */
export function pingRedis(port: number, host = '127.0.0.1', timeoutMs = 1000, auth?: { user: string; password: string }): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host });
    let reply = '';
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('error', () => done(false));
    const request = (auth ? `AUTH ${auth.user} ${auth.password}\r\n` : '') + 'PING\r\n';
    const expected = (auth ? '+OK\r\n' : '') + '+PONG\r\n';
    const lines = auth ? 2 : 1;
    socket.once('connect', () => socket.write(request));
    socket.on('data', (chunk: Buffer) => {
      reply += chunk.toString('latin1');
      if (reply.split('\r\n').length > lines) done(reply === expected);
    });
  });
}

/** Starts redis-server (retrying on a port race) and waits until it answers PING. */
export async function startPrivateRedis(stateDir: string, env: Readonly<Record<string, string | undefined>>, timeoutMs = 15_000): Promise<PrivateRedis> {
  const binary = findOnPath('redis-server', env.PATH);
  if (!binary) throw new Error(REDIS_NOT_FOUND);
  const dir = path.join(stateDir, 'redis');
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const password = privateRedisPassword(stateDir);
  const aclFile = path.join(dir, 'users.acl');
  writeFileSync(aclFile, aclFileText(password), { mode: 0o600 });
  chmodSync(aclFile, 0o600);
  let lastError: Error | undefined;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freeLoopbackPort();
    try {
      return await startOn(binary, port, dir, aclFile, password, timeoutMs);
    } catch (err) {
      lastError = err as Error;
    }
  }
  throw lastError ?? new Error('redis-server did not start');
}

async function startOn(binary: string, port: number, dir: string, aclFile: string, password: string, timeoutMs: number): Promise<PrivateRedis> {
  // Its own process group: a terminal's Ctrl-C reaches only us, and we stop Redis after the replica.
  const proc: ChildProcess = spawn(binary, redisServerArgs(port, dir, aclFile), { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
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
  while (!(await pingRedis(port, '127.0.0.1', 1000, { user: PRIVATE_REDIS_USER, password }))) {
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
    url: `redis://${PRIVATE_REDIS_USER}:${password}@127.0.0.1:${port}`,
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
