// A real Redis Cluster per test: three primaries and one replica each (Debian's redis-server with
// cluster-enabled), on free loopback ports, joined by `redis-cli --cluster create`. Locked like the
// single test Redis: every node takes only the `sandgate` ACL user with a random password (the
// cluster bus and the replicas log in as it too).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Cluster, Redis } from 'ioredis';
import { freePorts } from './ports.ts';
import { endRedisNodes, killRedisNodes, TEST_REDIS_USER } from './redis.ts';
import { waitFor } from './wait.ts';

export interface TestRedisCluster {
  /** `redis+cluster://sandgate:PASSWORD@127.0.0.1:P1,…`: every node as a seed. */
  url: string;
  password: string;
  /** The primaries' ports, then the replicas'. */
  primaryPorts: number[];
  replicaPorts: number[];
  /** A cluster client (following MOVED and failovers), as a replica's would. */
  client(): Cluster;
  /** A plain client of one node. */
  node(port: number): Redis;
  /** Sends a signal to the node on `port` (SIGKILL: gone until restartNode; SIGSTOP/SIGCONT: frozen, thawed). */
  signal(port: number, sig: NodeJS.Signals): void;
  /** Starts the (dead) node on `port` again, empty but with its cluster identity: it rejoins as a replica of whoever took its slots. */
  restartNode(port: number): Promise<void>;
  /** The port of the primary the node on `port` replicates from (null: it is a primary, or unreachable). */
  primaryOfReplica(port: number): Promise<number | null>;
  /** Which nodes are primaries and which replicas now (a failover swaps them), by asking each live one. */
  roles(): Promise<{ primaries: number[]; replicas: number[] }>;
  /** The ports of the nodes that replicate from the primary on `port`. */
  replicasOf(port: number): Promise<number[]>;
  /** The primary serving `key`'s slot, by port, as the cluster says now. */
  primaryOfKey(key: string): Promise<number>;
  /** Waits until the node on `replicaPort` is a primary serving slots and the cluster is whole again (a failover away from a dead or frozen primary). */
  waitPromoted(replicaPort: number, timeoutMs?: number): Promise<void>;
  /** Waits until the node on `port` replicates from `primary` with its link up (an old primary demoted). */
  waitReplicating(port: number, primary: number, timeoutMs?: number): Promise<void>;
  /**
   * The whole cluster down: every node gets `sig` (SIGKILL: crashed; SIGTERM: shut down, writing
   * its append-only file), and this returns once all have exited. restartAll() brings it back.
   */
  stopAll(sig: 'SIGKILL' | 'SIGTERM'): Promise<void>;
  /** Every node started again (its data kept with `persistent`, its identity always): returns once the cluster says ok on every node. */
  restartAll(): Promise<void>;
  stop(): Promise<void>;
}

export interface RedisClusterOptions {
  /** Primaries (default 3: the fewest Redis Cluster accepts). */
  primaries?: number;
  /** Replicas per primary (default 1). */
  replicasPerPrimary?: number;
  /** Append-only persistence (fsync every second) on every node, so restartAll() keeps the keys. */
  persistent?: boolean;
}

export async function startRedisCluster(opts: RedisClusterOptions = {}): Promise<TestRedisCluster> {
  const primaries = opts.primaries ?? 3;
  const replicasPerPrimary = opts.replicasPerPrimary ?? 1;
  const nodes = primaries * (1 + replicasPerPrimary);
  // Each node's cluster bus gets a free port of its own: by default it is the port + 10 000,
  // which may be taken, or past 65 535 (CI saw a node that never answered).
  const allPorts = await freePorts(nodes * 2);
  const ports = allPorts.slice(0, nodes);
  const busPorts = new Map(ports.map((p, i) => [p, allPorts[nodes + i]!]));
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sg-cluster-'));
  const password = randomBytes(18).toString('base64url');
  const procs = new Map<number, ChildProcess>();
  const clients: (Redis | Cluster)[] = [];

  const argsOf = new Map<number, string[]>();
  for (const port of ports) {
    const nodeDir = mkdtempSync(path.join(dir, `node-${port}-`));
    const args = [
      '--port', String(port),
      '--bind', '127.0.0.1',
      '--dir', nodeDir,
      '--cluster-enabled', 'yes',
      '--cluster-port', String(busPorts.get(port)),
      '--cluster-config-file', path.join(nodeDir, 'nodes.conf'),
      '--cluster-node-timeout', '2000',
      // A replica takes over however long its link was down (the chaos suite freezes one on
      // purpose): the default (10 node timeouts) would leave a shard without a primary.
      '--cluster-replica-validity-factor', '0',
      '--save', '',
      '--appendonly', opts.persistent ? 'yes' : 'no',
      '--appendfsync', 'everysec',
      '--daemonize', 'no',
      '--repl-diskless-sync-delay', '0',
      '--user', 'default', 'on', `>${randomBytes(24).toString('hex')}`, '~*', '&*', '+@all',
      '--user', TEST_REDIS_USER, 'on', `>${password}`, '~*', '&*', '+@all',
      // Replicas (and a promoted primary's new replicas) log in to their primary as this user.
      '--masteruser', TEST_REDIS_USER,
      '--masterauth', password,
    ];
    argsOf.set(port, args);
    procs.set(port, spawn('redis-server', args, { stdio: 'ignore' }));
  }
  const node = (port: number): Redis => {
    const c = new Redis({ host: '127.0.0.1', port, username: TEST_REDIS_USER, password, maxRetriesPerRequest: 1, retryStrategy: () => null });
    c.on('error', () => undefined);
    clients.push(c);
    return c;
  };
  for (const port of ports) {
    await waitFor(`redis-server :${port} to answer`, async () => {
      const c = node(port);
      try {
        return (await c.ping()) === 'PONG';
      } catch {
        return false;
      } finally {
        c.disconnect();
      }
    });
  }
  // redis-cli takes the password from the environment, never from its command line.
  const created = spawnSync(
    'redis-cli',
    ['--user', TEST_REDIS_USER, '--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', String(replicasPerPrimary), '--cluster-yes'],
    { env: { ...process.env, REDISCLI_AUTH: password }, encoding: 'utf8', timeout: 60_000 },
  );
  if (created.status !== 0) {
    for (const p of procs.values()) p.kill('SIGKILL');
    throw new Error(`redis-cli --cluster create failed (${created.status}): ${created.stdout}\n${created.stderr}`);
  }
  /** Does `check` hold on every node of `among` (a node that does not answer: no)? */
  const onEvery = async (among: number[], check: (c: Redis) => Promise<boolean>) => {
    for (const port of among) {
      const c = node(port);
      try {
        if (!(await check(c))) return false;
      } catch {
        return false;
      } finally {
        c.disconnect();
      }
    }
    return true;
  };
  const clusterWhole = () => waitFor('every cluster node to say cluster_state:ok', () => onEvery(ports, async (c) => /cluster_state:ok/.test(await c.cluster('INFO'))), 30_000);
  await clusterWhole();
  // Replicas attached, in sync and acknowledging (a replica just linked reports offset 0 for a
  // while), so a WAIT (an acknowledged write) can be met from the start.
  await waitFor(
    'every primary to see its replicas acknowledge',
    () =>
      onEvery(ports.slice(0, primaries), async (c) => {
        const info = await c.info('replication');
        return [...info.matchAll(/slave\d+:[^\r\n]*state=online,offset=(\d+)/g)].filter((m) => Number(m[1]) > 0).length >= replicasPerPrimary;
      }),
    30_000,
  );
  // redis-cli makes the first `primaries` nodes the primaries.
  const primaryPorts = ports.slice(0, primaries);
  const replicaPorts = ports.slice(primaries);
  /** INFO replication of one node, '' when it does not answer. */
  const replicationInfo = async (port: number): Promise<string> => {
    const c = node(port);
    try {
      return await c.info('replication');
    } catch {
      return '';
    } finally {
      c.disconnect();
    }
  };
  const primaryOfReplica = async (port: number): Promise<number | null> => {
    const info = await replicationInfo(port);
    const m = /role:slave[\s\S]*master_port:(\d+)/.exec(info);
    return m ? Number(m[1]) : null;
  };
  return {
    url: `redis+cluster://${TEST_REDIS_USER}:${password}@${ports.map((p) => `127.0.0.1:${p}`).join(',')}`,
    password,
    primaryPorts,
    replicaPorts,
    client() {
      const c = new Cluster(
        primaryPorts.map((port) => ({ host: '127.0.0.1', port })),
        { redisOptions: { username: TEST_REDIS_USER, password } },
      );
      c.on('error', () => undefined);
      clients.push(c);
      return c;
    },
    node,
    signal(port, sig) {
      procs.get(port)?.kill(sig);
    },
    async restartNode(port) {
      const old = procs.get(port);
      if (old && old.exitCode === null && old.signalCode === null) throw new Error(`cluster node :${port} is still running`);
      procs.set(port, spawn('redis-server', argsOf.get(port)!, { stdio: 'ignore' }));
      await waitFor(`cluster node :${port} to answer again`, async () => /role:/.test(await replicationInfo(port)), 30_000);
    },
    primaryOfReplica,
    async roles() {
      const out = { primaries: [] as number[], replicas: [] as number[] };
      for (const port of ports) {
        const info = await replicationInfo(port);
        if (/role:master/.test(info)) out.primaries.push(port);
        else if (/role:slave/.test(info)) out.replicas.push(port);
      }
      return out;
    },
    async replicasOf(port) {
      const info = await replicationInfo(port);
      return [...info.matchAll(/slave\d+:ip=[^,]+,port=(\d+)/g)].map((m) => Number(m[1]));
    },
    async primaryOfKey(key) {
      // Any node that answers (a frozen or dead one does not: each is given 2 s).
      for (const seed of ports) {
        const c = new Redis({ host: '127.0.0.1', port: seed, username: TEST_REDIS_USER, password, maxRetriesPerRequest: 0, retryStrategy: () => null, commandTimeout: 2000 });
        c.on('error', () => undefined);
        try {
          const slot = (await c.cluster('KEYSLOT', key)) as number;
          const range = (await c.cluster('SLOTS')).find(([from, to]) => slot >= from && slot <= to);
          if (range?.[2]) return range[2][1];
        } catch {
          // the next seed
        } finally {
          c.disconnect();
        }
      }
      throw new Error(`no cluster node could say which primary serves ${key}`);
    },
    async waitPromoted(replicaPort, timeoutMs = 60_000) {
      await waitFor(`cluster node :${replicaPort} promoted, the cluster whole`, async () => {
        if (!/role:master/.test(await replicationInfo(replicaPort))) return false;
        const c = node(replicaPort);
        try {
          return /cluster_state:ok/.test(await c.cluster('INFO'));
        } catch {
          return false;
        } finally {
          c.disconnect();
        }
      }, timeoutMs, 200);
    },
    async waitReplicating(port, primary, timeoutMs = 60_000) {
      await waitFor(`cluster node :${port} replicating from :${primary}`, async () => {
        const info = await replicationInfo(port);
        return (await primaryOfReplica(port)) === primary && /master_link_status:up/.test(info);
      }, timeoutMs, 200);
    },
    stopAll: (sig) => endRedisNodes(procs.values(), sig),
    async restartAll() {
      for (const port of ports) procs.set(port, spawn('redis-server', argsOf.get(port)!, { stdio: 'ignore' }));
      await clusterWhole();
    },
    stop: () => killRedisNodes(procs.values(), clients, dir),
  };
}
