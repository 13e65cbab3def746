// A private redis-server per test file, on a free port, so tests can kill and restart it.
// Locked like `sandgate up`'s by default: no one can log in as `default` and an ACL user with a random
// password is the only way in, so every test's Redis URL carries credentials (and replicas derive
// their peer secret from it, as in production).
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Cluster, Redis } from 'ioredis';
import type { RedisClient } from '@sandgate/store';
import { freePort } from './ports.ts';
import { waitFor } from './wait.ts';

export interface TestRedis {
  /** With the credentials (and `rediss://` when TLS is on). */
  url: string;
  port: number;
  /** The ACL user and its password; '' for both with `auth: false`. */
  user: string;
  password: string;
  /** A client of it: a Cluster client in cluster mode (use keysFor() for its keys' names). */
  client(): RedisClient;
  /** Stops the server (SIGTERM: it writes its append-only file) and starts it again on the same port and data. */
  restart(): Promise<void>;
  /** `kill -9` of the server, keeping its data directory: restart() brings it back. */
  kill(): Promise<void>;
  /** SIGSTOP: the server keeps its connections but answers nothing (a hung Redis); thaw() resumes it. */
  freeze(): void;
  thaw(): void;
  stop(): Promise<void>;
}

export interface RedisOptions {
  /** Append-only persistence, so a restart keeps every key. */
  persistent?: boolean;
  /** false: no password (the `default` user on), for a test that needs an open Redis. Default true. */
  auth?: boolean;
  /** TLS only (no plaintext port), with this server certificate: the URL is `rediss://`; `ca` is what the harness' clients trust. */
  tls?: { cert: string; key: string; ca: string };
}

/** The ACL user replicas use (as `sandgate up` names it). */
export const TEST_REDIS_USER = 'sandgate';

async function waitForPing(url: string, tlsCa?: string): Promise<void> {
  await waitFor('redis-server to answer PING', async () => {
    const r = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, ...(tlsCa ? { tls: { ca: tlsCa } } : {}) });
    r.on('error', () => undefined); // refused until the server is up: that is what we poll for
    try {
      await r.connect();
      return (await r.ping()) === 'PONG';
    } finally {
      r.disconnect();
    }
  });
}

/**
 * Which Redis startRedis() gives, for the whole test process: `single` (default) is one
 * redis-server; `sentinel` (SANDGATE_TEST_REDIS=sentinel, the `e2e-sentinel` project) is a
 * Sentinel-managed group (redis-sentinel.ts: a primary, a replica, three Sentinels) whose
 * `redis+sentinel://` URL the replicas get; `cluster` (SANDGATE_TEST_REDIS=cluster, the
 * `e2e-cluster` project) is a Redis Cluster of three primaries with a replica each
 * (redis-cluster.ts), `redis+cluster://`. So the same tests run against the deployments issue 17
 * is about. Anything else fails the run: a typo must not silently test the default.
 */
export type TestRedisMode = 'single' | 'sentinel' | 'cluster';
export function testRedisMode(): TestRedisMode {
  const mode = process.env.SANDGATE_TEST_REDIS ?? 'single';
  if (mode !== 'single' && mode !== 'sentinel' && mode !== 'cluster') throw new Error(`SANDGATE_TEST_REDIS=${mode}: use single, sentinel or cluster`);
  return mode;
}

/** URLs of the Sentinel groups and clusters startRedis() made in those modes. */
const replicatedModeUrls = new Set<string>();

/**
 * What a replica or worker on `redisUrl` gets because of the Redis mode: on a Sentinel group or a
 * cluster startRedis() made, the writes a client is told succeeded wait for a replica
 * (SANDGATE_REDIS_MIN_REPLICAS=1), as a production deployment on them runs. Nothing for any other
 * Redis, a group a test made itself included: such a test sets what it means to test.
 */
export function testRedisReplicaEnv(redisUrl: string): Record<string, string> {
  return replicatedModeUrls.has(redisUrl) ? { SANDGATE_REDIS_MIN_REPLICAS: '1' } : {};
}

export async function startRedis(opts: RedisOptions = {}): Promise<TestRedis> {
  if (testRedisMode() === 'sentinel') return startSentinelRedis(opts);
  if (testRedisMode() === 'cluster') return startClusterRedis(opts);
  const tlsCa = opts.tls?.ca;
  const port = await freePort();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sg-redis-'));
  const auth = opts.auth ?? true;
  const user = auth ? TEST_REDIS_USER : '';
  const password = auth ? randomBytes(18).toString('base64url') : '';
  const tlsArgs: string[] = [];
  if (opts.tls) {
    writeFileSync(path.join(dir, 'server.crt'), opts.tls.cert);
    writeFileSync(path.join(dir, 'server.key'), opts.tls.key, { mode: 0o600 });
    tlsArgs.push('--port', '0', '--tls-port', String(port), '--tls-cert-file', path.join(dir, 'server.crt'), '--tls-key-file', path.join(dir, 'server.key'), '--tls-auth-clients', 'no');
  }
  const args = [
    ...(opts.tls ? tlsArgs : ['--port', String(port)]),
    '--bind', '127.0.0.1',
    '--dir', dir,
    '--save', '',
    '--appendonly', opts.persistent ? 'yes' : 'no',
    '--appendfsync', 'everysec',
    '--daemonize', 'no',
    // A connection without the password can do nothing, not even PING. `default` keeps a random
    // password nobody knows instead of being `off`: Redis 7.0 replays the append-only file as that
    // user and, were it off, would drop every MULTI/EXEC (multi-key Lua script) on a restart
    // (apps/cli/src/redis-server.ts says more).
    ...(auth ? ['--user', 'default', 'on', `>${randomBytes(24).toString('hex')}`, '~*', '&*', '+@all', '--user', user, 'on', `>${password}`, '~*', '&*', '+@all'] : []),
  ];
  let proc: ChildProcess = spawn('redis-server', args, { stdio: 'ignore' });
  const url = `${opts.tls ? 'rediss' : 'redis'}://${auth ? `${user}:${password}@` : ''}127.0.0.1:${port}`;
  const clients: Redis[] = [];
  await waitForPing(url, tlsCa);
  const exit = (p: ChildProcess, sig: NodeJS.Signals) =>
    new Promise<void>((resolve) => {
      if (p.exitCode !== null || p.signalCode !== null) return resolve();
      p.once('exit', () => resolve());
      p.kill(sig);
    });
  return {
    url,
    port,
    user,
    password,
    client() {
      const c = new Redis(url, tlsCa ? { tls: { ca: tlsCa } } : {});
      c.on('error', () => undefined);
      clients.push(c);
      return c;
    },
    async restart() {
      await exit(proc, 'SIGTERM');
      proc = spawn('redis-server', args, { stdio: 'ignore' });
      await waitForPing(url, tlsCa);
    },
    async kill() {
      await exit(proc, 'SIGKILL');
    },
    freeze() {
      proc.kill('SIGSTOP');
    },
    thaw() {
      proc.kill('SIGCONT');
    },
    async stop() {
      for (const c of clients) c.disconnect();
      proc.kill('SIGCONT');
      await exit(proc, 'SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * startRedis() in Sentinel mode. What happens to the one server of a single Redis happens to every
 * data node at once (killed, restarted with its data in its role, frozen, thawed; the Sentinels
 * stay): the whole of Redis is gone or hung, as a test of a dead or hung Redis means. TLS and an
 * open Redis are refused loudly.
 */
async function startSentinelRedis(opts: RedisOptions): Promise<TestRedis> {
  if (opts.tls) throw new Error('startRedis({ tls }) has no Sentinel-mode equivalent (SANDGATE_TEST_REDIS=sentinel): run this file in single mode');
  if (opts.auth === false) throw new Error('startRedis({ auth: false }) has no Sentinel-mode equivalent: the group always has a password');
  // Imported here: redis-sentinel.ts imports this module's TEST_REDIS_USER.
  const { startSentinelGroup } = await import('./redis-sentinel.ts');
  // Sentinels slower to call the primary down than the failover tests' (5 s, not 1 s): these
  // files test a deployment on Sentinel, not a failover, and a loaded CI machine must not start one.
  const group = await startSentinelGroup({ replicas: 1, downAfterMs: 5_000, persistent: opts.persistent });
  replicatedModeUrls.add(group.url);
  return {
    url: group.url,
    // The initial primary: what a test that attacks Redis from a sandbox tries to reach.
    port: group.dataPorts[0]!,
    user: TEST_REDIS_USER,
    password: group.password,
    client: () => group.client(),
    async restart() {
      await group.stopData('SIGTERM');
      await group.restartData();
    },
    kill: () => group.stopData('SIGKILL'),
    freeze: () => {
      for (const port of group.dataPorts) group.signal(port, 'SIGSTOP');
    },
    thaw: () => {
      for (const port of group.dataPorts) group.signal(port, 'SIGCONT');
    },
    stop: async () => {
      replicatedModeUrls.delete(group.url);
      await group.stop();
    },
  };
}

/**
 * startRedis() in cluster mode. What happens to the one server of a single Redis happens to every
 * node at once (killed, restarted with its data, frozen, thawed): the whole of Redis is gone or
 * hung, as a test of a dead or hung Redis means. TLS and an open Redis are refused loudly.
 */
async function startClusterRedis(opts: RedisOptions): Promise<TestRedis> {
  if (opts.tls) throw new Error('startRedis({ tls }) has no cluster-mode equivalent (SANDGATE_TEST_REDIS=cluster): run this file in single mode');
  if (opts.auth === false) throw new Error('startRedis({ auth: false }) has no cluster-mode equivalent: the cluster always has a password');
  const { startRedisCluster } = await import('./redis-cluster.ts');
  const cluster = await startRedisCluster({ persistent: opts.persistent });
  replicatedModeUrls.add(cluster.url);
  const everyNode = [...cluster.primaryPorts, ...cluster.replicaPorts];
  return {
    url: cluster.url,
    // The first primary: what a test that attacks Redis from a sandbox tries to reach.
    port: cluster.primaryPorts[0]!,
    user: TEST_REDIS_USER,
    password: cluster.password,
    client: () => cluster.client(),
    async restart() {
      await cluster.stopAll('SIGTERM');
      await cluster.restartAll();
    },
    kill: () => cluster.stopAll('SIGKILL'),
    freeze: () => {
      for (const port of everyNode) cluster.signal(port, 'SIGSTOP');
    },
    thaw: () => {
      for (const port of everyNode) cluster.signal(port, 'SIGCONT');
    },
    stop: async () => {
      replicatedModeUrls.delete(cluster.url);
      await cluster.stop();
    },
  };
}

/**
 * A command sent to every server of a test Redis: the one server, or every node of a cluster,
 * replicas included (what each node keeps for itself, as its ACL users, is not replicated).
 */
export async function onEveryNode(r: RedisClient, command: string, ...args: (string | number)[]): Promise<void> {
  if (!(r instanceof Cluster)) {
    await r.call(command, ...args);
    return;
  }
  await r.ping(); // the client knows the nodes once it has the slots
  await Promise.all(r.nodes('all').map((node) => node.call(command, ...args)));
}

/** Every key of a test Redis (matching `match`), in batches: on a cluster, every primary's (SCAN is one node's). */
export async function* scanAllKeys(r: RedisClient, match = '*'): AsyncGenerator<string[]> {
  const nodes = r instanceof Cluster ? r.nodes('master') : [r];
  for (const node of nodes) for await (const batch of node.scanStream({ count: 500, match })) yield batch as string[];
}

/**
 * Ends a group of redis-server processes for good (thawed first, so a frozen one dies too), after
 * closing the clients made of them, and removes their data directory.
 */
export async function killRedisNodes(procs: Iterable<ChildProcess>, clients: Iterable<{ disconnect(): void }>, dir: string): Promise<void> {
  for (const c of clients) c.disconnect();
  await endRedisNodes(procs, 'SIGKILL');
  rmSync(dir, { recursive: true, force: true });
}

/**
 * Sends `sig` to every live redis-server of `procs` (thawed first, so a frozen one acts on it)
 * and returns once all have exited: SIGKILL a crash, SIGTERM a shutdown that writes the append-only file.
 */
export async function endRedisNodes(procs: Iterable<ChildProcess>, sig: 'SIGKILL' | 'SIGTERM'): Promise<void> {
  await Promise.all(
    [...procs].map(
      (p) =>
        new Promise<void>((resolve) => {
          if (p.exitCode !== null || p.signalCode !== null) return resolve();
          p.once('exit', () => resolve());
          p.kill('SIGCONT');
          p.kill(sig);
        }),
    ),
  );
}
