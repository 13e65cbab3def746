// A Redis Sentinel group per test: one primary, its replicas and three Sentinels (Debian's
// redis-server, run in sentinel mode as redis-sentinel is), each on a free port, so a test can
// kill the primary and watch a real failover. Locked like the single test Redis: the data nodes
// take only the `sandgate` ACL user with a random password (the replicas and the Sentinels log in
// as it too), and the Sentinels have a password of their own.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { freePorts } from './ports.ts';
import { endRedisNodes, killRedisNodes, TEST_REDIS_USER } from './redis.ts';
import { waitFor } from './wait.ts';

export const SENTINEL_MASTER = 'sgmaster';
const REPLICATION_USER = 'replication';

export interface SentinelGroup {
  /** `redis+sentinel://sandgate:PASSWORD@127.0.0.1:P1,…/sgmaster?sentinelPassword=…`: what the replicas get. */
  url: string;
  password: string;
  /** Every data node's port (the first is the initial primary). */
  dataPorts: number[];
  sentinelPorts: number[];
  /** The port the Sentinels name as the primary now. */
  primaryPort(): Promise<number>;
  /** A plain client of one data node (not following failovers). */
  node(port: number): Redis;
  /** A client of whichever node the Sentinels name the primary (following failovers, as replicas do). */
  client(): Redis;
  /** Waits until every live replica has everything the primary has written. */
  waitReplicated(): Promise<void>;
  /**
   * Cuts the replicas off the primary (their replication login switched off, their links killed):
   * writes then reach the primary alone. restoreReplication() lets them back in.
   */
  cutReplication(): Promise<void>;
  restoreReplication(): Promise<void>;
  /** Starts the (dead) data node on `port` again, empty, as a replica of the primary on `primary`. */
  restartNode(port: number, primary: number): Promise<void>;
  /** Sends a signal to the data node on `port` (SIGKILL: it is gone for good; SIGSTOP/SIGCONT: frozen, thawed). */
  signal(port: number, sig: NodeJS.Signals): void;
  /**
   * Waits until the failover away from `fromPort` has settled: every answering Sentinel names the
   * same other primary, it answers as a primary, and every other live data node replicates from it.
   */
  waitFailover(fromPort: number, timeoutMs?: number): Promise<number>;
  /** Waits until the data node on `port` replicates from `primary` with its link up (an old primary demoted). */
  waitReplicating(port: number, primary: number, timeoutMs?: number): Promise<void>;
  /**
   * Every data node down at once (the Sentinels stay): each gets `sig` (SIGKILL: crashed; SIGTERM:
   * shut down, writing its append-only file), and this returns once all have exited.
   */
  stopData(sig: 'SIGKILL' | 'SIGTERM'): Promise<void>;
  /**
   * Every data node started again in the role it had (its data kept with `persistent`); returns
   * once the primary has every replica online again.
   */
  restartData(): Promise<void>;
  stop(): Promise<void>;
}

export interface SentinelGroupOptions {
  /** Replicas of the primary (default 2). */
  replicas?: number;
  /** Sentinel down-after-milliseconds (default 1000). */
  downAfterMs?: number;
  /** Sentinel failover-timeout (default 4000). */
  failoverTimeoutMs?: number;
  /** Append-only persistence (fsync every second) on every data node, so restartData() keeps the keys. */
  persistent?: boolean;
}

export async function startSentinelGroup(opts: SentinelGroupOptions = {}): Promise<SentinelGroup> {
  const replicaCount = opts.replicas ?? 2;
  const ports = await freePorts(replicaCount + 1 + 3);
  const dataPorts = ports.slice(0, replicaCount + 1);
  const sentinelPorts = ports.slice(replicaCount + 1);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sg-sentinel-'));
  const password = randomBytes(18).toString('base64url');
  // Replicas log in to their primary as a user of their own, so a test can cut replication alone.
  const replicationPassword = randomBytes(18).toString('base64url');
  const sentinelPassword = randomBytes(18).toString('base64url');
  const procs = new Map<number, ChildProcess>();
  const clients: Redis[] = [];

  // One directory per node for good: restartData() finds a node's append-only file there (without
  // `persistent` nothing is written, so a node restarted by restartNode() still comes back empty).
  const dataDirs = new Map(dataPorts.map((port) => [port, mkdtempSync(path.join(dir, `data-${port}-`))]));
  const dataArgs = (port: number, primary: number | null) => [
    '--port', String(port),
    '--bind', '127.0.0.1',
    '--dir', dataDirs.get(port)!,
    '--save', '',
    '--appendonly', opts.persistent ? 'yes' : 'no',
    '--appendfsync', 'everysec',
    '--daemonize', 'no',
    // Redis 7 delays a full sync 5 s (diskless, waiting for more replicas to join): a test's
    // replica would be 5 s behind from the start, and a WAIT on it fail meanwhile.
    '--repl-diskless-sync-delay', '0',
    '--user', 'default', 'on', `>${randomBytes(24).toString('hex')}`, '~*', '&*', '+@all',
    '--user', TEST_REDIS_USER, 'on', `>${password}`, '~*', '&*', '+@all',
    '--user', REPLICATION_USER, 'on', `>${replicationPassword}`, '~*', '&*', '+@all',
    // Every node may become a replica after a failover, so every node knows how to log in to a primary.
    '--masteruser', REPLICATION_USER,
    '--masterauth', replicationPassword,
    ...(primary === null ? [] : ['--replicaof', '127.0.0.1', String(primary)]),
  ];
  for (const [i, port] of dataPorts.entries()) {
    procs.set(port, spawn('redis-server', dataArgs(port, i === 0 ? null : dataPorts[0]!), { stdio: 'ignore' }));
  }
  const node = (port: number): Redis => {
    const c = new Redis({ host: '127.0.0.1', port, username: TEST_REDIS_USER, password, maxRetriesPerRequest: 1, retryStrategy: () => null, lazyConnect: false });
    c.on('error', () => undefined);
    clients.push(c);
    return c;
  };
  const answers = (port: number) =>
    waitFor(`redis-server :${port} to answer`, async () => {
      const c = node(port);
      try {
        return (await c.ping()) === 'PONG';
      } catch {
        return false;
      } finally {
        c.disconnect();
      }
    });
  for (const port of dataPorts) await answers(port);

  for (const port of sentinelPorts) {
    const conf = path.join(dir, `sentinel-${port}.conf`);
    // Sentinel rewrites its file as it learns the group, so it is a file of its own.
    writeFileSync(
      conf,
      [
        `port ${port}`,
        'bind 127.0.0.1',
        `dir ${dir}`,
        `requirepass ${sentinelPassword}`,
        `sentinel monitor ${SENTINEL_MASTER} 127.0.0.1 ${dataPorts[0]} 2`,
        `sentinel auth-user ${SENTINEL_MASTER} ${TEST_REDIS_USER}`,
        `sentinel auth-pass ${SENTINEL_MASTER} ${password}`,
        `sentinel sentinel-pass ${sentinelPassword}`,
        `sentinel down-after-milliseconds ${SENTINEL_MASTER} ${opts.downAfterMs ?? 1000}`,
        `sentinel failover-timeout ${SENTINEL_MASTER} ${opts.failoverTimeoutMs ?? 4000}`,
        `sentinel parallel-syncs ${SENTINEL_MASTER} 1`,
        '',
      ].join('\n'),
    );
    procs.set(port, spawn('redis-server', [conf, '--sentinel'], { stdio: 'ignore' }));
  }
  const sentinel = (port: number): Redis => {
    // Retries: a Sentinel may not listen yet when its client is made.
    const c = new Redis({ host: '127.0.0.1', port, password: sentinelPassword, maxRetriesPerRequest: 1, retryStrategy: () => 100 });
    c.on('error', () => undefined);
    clients.push(c);
    return c;
  };
  const sentinels = sentinelPorts.map(sentinel);

  const primaryPort = async (): Promise<number> => {
    for (const s of sentinels) {
      try {
        const addr = (await s.call('SENTINEL', 'get-master-addr-by-name', SENTINEL_MASTER)) as [string, string] | null;
        if (addr) return Number(addr[1]);
      } catch {
        // this Sentinel is not up yet: ask the next
      }
    }
    throw new Error('no Sentinel names a primary');
  };
  const killAll = () => killRedisNodes(procs.values(), clients, dir);
  let primaryAtStop: number | undefined;
  // Up when every replica is in sync (online: a WAIT counts it) and every Sentinel knows the
  // others and the replicas (so a failover can be agreed on).
  await waitFor(
    'the replicas to be in sync, the Sentinels to know each other and the replicas',
    async () => {
      const primary = node(dataPorts[0]!);
      try {
        const info = (await primary.info('replication')) as string;
        if ([...info.matchAll(/^slave\d+:.*state=online/gm)].length < replicaCount) return false;
      } catch {
        return false;
      } finally {
        primary.disconnect();
      }
      for (const s of sentinels) {
        try {
          const master = (await s.call('SENTINEL', 'master', SENTINEL_MASTER)) as string[];
          const field = (name: string) => Number(master[master.indexOf(name) + 1]);
          if (field('num-other-sentinels') < 2 || field('num-slaves') < replicaCount) return false;
        } catch {
          return false;
        }
      }
      return true;
    },
    30_000,
    200,
  ).catch(async (err: unknown) => {
    await killAll();
    throw err;
  });

  const alive = (port: number): boolean => {
    const p = procs.get(port);
    return p !== undefined && p.exitCode === null && p.signalCode === null;
  };
  /** Is the data node on `port` a replica of `primary` with its replication link up? */
  const replicatesFrom = async (port: number, primary: number): Promise<boolean> => {
    const c = node(port);
    try {
      const info = (await c.info('replication')) as string;
      return /^role:slave\r?$/m.test(info) && new RegExp(`^master_port:${primary}\\r?$`, 'm').test(info) && /^master_link_status:up\r?$/m.test(info);
    } catch {
      return false;
    } finally {
      c.disconnect();
    }
  };
  const isPrimary = async (port: number): Promise<boolean> => {
    const c = node(port);
    try {
      return ((await c.call('ROLE')) as [string])[0] === 'master';
    } catch {
      return false;
    } finally {
      c.disconnect();
    }
  };

  return {
    url: `redis+sentinel://${TEST_REDIS_USER}:${password}@${sentinelPorts.map((p) => `127.0.0.1:${p}`).join(',')}/${SENTINEL_MASTER}?sentinelPassword=${sentinelPassword}`,
    password,
    dataPorts,
    sentinelPorts,
    primaryPort,
    node,
    client() {
      const c = new Redis({
        sentinels: sentinelPorts.map((port) => ({ host: '127.0.0.1', port })),
        name: SENTINEL_MASTER,
        sentinelPassword,
        username: TEST_REDIS_USER,
        password,
      });
      c.on('error', () => undefined);
      clients.push(c);
      return c;
    },
    async waitReplicated() {
      // Each look asks the Sentinels for the primary again, on a fresh client: these clients do
      // not reconnect (retryStrategy null), and right after a failover the node may drop its
      // clients (CI, once: "Connection is closed" on every look for 15 s).
      const look = async (): Promise<string> => {
        const p = node(await primaryPort());
        try {
          return (await p.info('replication')) as string;
        } finally {
          p.disconnect();
        }
      };
      let offset: number | undefined;
      await waitFor('the replicas to catch up with the primary', async () => {
        const info = await look();
        offset ??= Number(/master_repl_offset:(\d+)/.exec(info)?.[1]);
        // Online too: a replica still loading its full resync lists an offset but acknowledges no WAIT.
        const replicas = [...info.matchAll(/^slave\d+:.*state=(\w+).*offset=(\d+)/gm)].map((m) => ({ state: m[1], offset: Number(m[2]) }));
        return replicas.length > 0 && replicas.every((r) => r.state === 'online' && r.offset >= offset!);
      });
    },
    async cutReplication() {
      const p = node(await primaryPort());
      try {
        await p.call('ACL', 'SETUSER', REPLICATION_USER, 'off');
        await p.call('CLIENT', 'KILL', 'USER', REPLICATION_USER);
      } finally {
        p.disconnect();
      }
    },
    async restoreReplication() {
      for (const port of dataPorts) {
        const c = node(port);
        await c.call('ACL', 'SETUSER', REPLICATION_USER, 'on').catch(() => undefined); // a dead node: nothing to restore
        c.disconnect();
      }
    },
    signal(port, sig) {
      procs.get(port)?.kill(sig);
    },
    async restartNode(port, primary) {
      const old = procs.get(port);
      if (old && old.exitCode === null && old.signalCode === null) throw new Error(`redis-server :${port} is still running`);
      procs.set(port, spawn('redis-server', dataArgs(port, primary), { stdio: 'ignore' }));
      await answers(port);
    },
    async waitFailover(fromPort, timeoutMs = 30_000) {
      // Settled, not merely begun: a Sentinel may name a promoted replica while another still
      // names the old primary, or a failover that timed out may be followed by a second one that
      // promotes the other replica (CI saw a record missing from the node the first answer named).
      // So every Sentinel that answers names the same new primary, it answers as a primary, and
      // every other live data node replicates from it with its link up.
      let now = fromPort;
      await waitFor(
        `the Sentinels to agree on a primary in place of :${fromPort}, its replicas following it`,
        async () => {
          const named = (await Promise.all(sentinels.map((s) => s.call('SENTINEL', 'get-master-addr-by-name', SENTINEL_MASTER).then((a) => (a ? Number((a as [string, string])[1]) : null), () => undefined)))).filter((p) => p !== undefined);
          const candidate = named[0];
          if (named.length < 2 || candidate === null || candidate === undefined || candidate === fromPort || !named.every((p) => p === candidate)) return false;
          if (!(await isPrimary(candidate))) return false;
          for (const port of dataPorts) {
            if (port === candidate || port === fromPort || !alive(port)) continue;
            if (!(await replicatesFrom(port, candidate))) return false;
          }
          now = candidate;
          return true;
        },
        timeoutMs,
        100,
      );
      return now;
    },
    async waitReplicating(port, primary, timeoutMs = 30_000) {
      await waitFor(`redis-server :${port} to replicate from :${primary}`, () => replicatesFrom(port, primary), timeoutMs, 100);
    },
    async stopData(sig) {
      // Remembered for restartData(): the Sentinels' word may be unreachable once the nodes are gone.
      primaryAtStop = await primaryPort();
      await endRedisNodes(dataPorts.flatMap((port) => procs.get(port) ?? []), sig);
    },
    async restartData() {
      const primary = primaryAtStop ?? (await primaryPort());
      for (const port of dataPorts) {
        if (alive(port)) throw new Error(`redis-server :${port} is still running`);
        procs.set(port, spawn('redis-server', dataArgs(port, port === primary ? null : primary), { stdio: 'ignore' }));
      }
      for (const port of dataPorts) await answers(port);
      await waitFor(`every replica of :${primary} online again`, async () => {
        for (const port of dataPorts) if (port !== primary && !(await replicatesFrom(port, primary))) return false;
        return true;
      }, 30_000, 100);
    },
    stop: killAll,
  };
}
