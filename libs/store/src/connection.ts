// Redis connections for the apps, so that connection policy lives with the rest of Redis.
import { readFileSync } from 'node:fs';
import { parseRedisAddress } from '@sandgate/core';
import { Cluster, Redis, type Command } from 'ioredis';
import type { RedisClient } from './client.ts';

/**
 * - `commands`: request/response traffic; a command fails after two reconnect attempts, so
 *   callers see UNAVAILABLE instead of hanging while Redis is away.
 * - `jobs-worker`: a BullMQ worker's blocking connection, which must retry forever (BullMQ
 *   refuses any other setting).
 */
export type RedisPurpose = 'commands' | 'jobs-worker';

export interface RedisConnectionOptions {
  lazyConnect?: boolean;
  /** Shown by CLIENT LIST, so an operator (or a test) can tell connections apart. */
  connectionName?: string;
  /**
   * PEM CA(s) that sign a `rediss://` server's certificate (`--redis-ca`); empty: the system's CAs.
   * Refused with a `redis://` URL, where it would silently mean nothing.
   */
  tlsCa?: string;
  /**
   * A command-line tool's connection (`token`, `up`'s credential step): it gives up when the
   * Sentinels cannot be reached (after SENTINEL_ROUNDS_BEFORE_GIVING_UP rounds over all of them)
   * and its connect() rejects, instead of retrying forever as a replica's must. One server needs
   * nothing: its first refused connect already rejects.
   */
  oneShot?: boolean;
}

/** Rounds over every listed Sentinel a one-shot connection tries before it gives up. */
export const SENTINEL_ROUNDS_BEFORE_GIVING_UP = 3;

/** The TLS part of every connection: `rediss://` already turns TLS on; a CA only narrows whom it trusts. */
export function redisTlsOptions(url: string, tlsCa: string | undefined): { tls?: { ca: string } } {
  if (!tlsCa) return {};
  if (!url.startsWith('rediss://')) throw new Error('a Redis CA (--redis-ca / SANDGATE_REDIS_CA) needs a rediss:// Redis URL');
  return { tls: { ca: tlsCa } };
}

/**
 * A connection to the Redis `url` names (parseRedisAddress: one server, or the primary behind
 * Sentinels). Credentials go with the URL: ioredis sends AUTH user password.
 *
 * Sentinel mode: ioredis asks the Sentinels for the primary on every (re)connect, watches their
 * +switch-master announcements (failoverDetector) so a failover moves the connection at once, and
 * a READONLY reply (a demoted primary, e.g. one that was frozen through the failover and came back
 * as a replica) reconnects and resends the command to the new primary. Lua scripts need nothing
 * more: LuaScript.run falls back to EVAL when the new primary has not seen a script.
 */
export function createRedisConnection(url: string, purpose: RedisPurpose, opts: RedisConnectionOptions = {}): RedisClient {
  const common = {
    maxRetriesPerRequest: purpose === 'jobs-worker' ? null : 2,
    lazyConnect: opts.lazyConnect ?? false,
    ...(opts.connectionName ? { connectionName: opts.connectionName } : {}),
  };
  const address = parseRedisAddress(url);
  if (address.mode === 'single') return new Redis(url, { ...common, ...redisTlsOptions(url, opts.tlsCa) });
  if (address.mode === 'cluster') return createRedisClusterConnection(url, purpose, opts);
  if (opts.tlsCa) throw new Error('a Redis CA (--redis-ca / SANDGATE_REDIS_CA) needs a rediss:// Redis URL (TLS to Sentinels is not supported)');
  const sentinelConnection = new Redis({
    ...common,
    sentinels: address.sentinels,
    name: address.masterName,
    db: address.db,
    ...(address.username ? { username: address.username } : {}),
    ...(address.password ? { password: address.password } : {}),
    ...(address.sentinelUsername ? { sentinelUsername: address.sentinelUsername } : {}),
    ...(address.sentinelPassword ? { sentinelPassword: address.sentinelPassword } : {}),
    failoverDetector: true,
    reconnectOnError: (err: Error) => (err.message.startsWith('READONLY') ? 2 : false),
    // null: ioredis stops ("All sentinels are unreachable") and the connect rejects.
    ...(opts.oneShot ? { sentinelRetryStrategy: (round: number) => (round >= SENTINEL_ROUNDS_BEFORE_GIVING_UP ? null : 200 * round) } : {}),
  });
  return opts.oneShot ? sentinelConnection : restartedUnlessClosed(sentinelConnection);
}

/**
 * A client of the Redis Cluster a `redis+cluster://` address names: it learns the slot layout
 * from any seed node, sends each command to the primary of its key's slot, and follows MOVED and
 * ASK redirections (a failover or a resharding) by itself. Every node takes the address'
 * credentials. Commands that name no key (PING, WAIT, SCAN) go to one node: callers that mean
 * "every primary" ask `nodes('master')`.
 */
export function createRedisClusterConnection(url: string, purpose: RedisPurpose, opts: RedisConnectionOptions = {}): Cluster {
  const address = parseRedisAddress(url);
  if (address.mode !== 'cluster') throw new Error('createRedisClusterConnection needs a redis+cluster:// address');
  if (opts.tlsCa) throw new Error('a Redis CA (--redis-ca / SANDGATE_REDIS_CA) needs a rediss:// Redis URL (TLS to a cluster is not supported)');
  return new Cluster(address.nodes, {
    lazyConnect: opts.lazyConnect ?? false,
    // A one-shot tool gives up when no seed answers; a replica keeps trying.
    clusterRetryStrategy: (attempt: number) => (opts.oneShot && attempt > SENTINEL_ROUNDS_BEFORE_GIVING_UP ? null : Math.min(100 * attempt, 2000)),
    // A slot whose primary just died is answered MOVED to that dead node until its replica takes
    // over (the node timeout, then an election): 16 redirections 100 ms apart ride out most of
    // it instead of failing within milliseconds (the caller then gets UNAVAILABLE).
    retryDelayOnMoved: 100,
    redisOptions: {
      maxRetriesPerRequest: purpose === 'jobs-worker' ? null : 2,
      ...(opts.connectionName ? { connectionName: opts.connectionName } : {}),
      ...(address.username ? { username: address.username } : {}),
      ...(address.password ? { password: address.password } : {}),
    },
  });
}

/**
 * ioredis (6.0) ends a Sentinel connection for good when the failover detector's disconnect lands
 * while the connection is still asking the Sentinels where the primary is: the connect attempt
 * rejects ("Connection is closed.") and the client goes to `end` instead of retrying. The chaos
 * suite caught a replica's job queue connection dead that way after a failover (nothing could be
 * enqueued any more). So a connection that ends without having been closed on purpose is
 * connected again, and so are its duplicates (BullMQ's blocking connections).
 */
function restartedUnlessClosed(redis: Redis): Redis {
  let closedOnPurpose = false;
  const target = redis as unknown as {
    disconnect(reconnect?: boolean): void;
    quit(...args: unknown[]): Promise<'OK'>;
    duplicate(...args: unknown[]): Redis;
  };
  const disconnect = target.disconnect.bind(redis);
  const quit = target.quit.bind(redis);
  const duplicate = target.duplicate.bind(redis);
  target.disconnect = (reconnect = false) => {
    if (!reconnect) closedOnPurpose = true;
    disconnect(reconnect);
  };
  target.quit = (...args) => {
    closedOnPurpose = true;
    return quit(...args);
  };
  target.duplicate = (...args) => restartedUnlessClosed(duplicate(...args));
  redis.on('end', () => {
    if (closedOnPurpose) return;
    setTimeout(() => {
      if (!closedOnPurpose && redis.status === 'end') redis.connect().catch(() => undefined); // retried at the next 'end'
    }, 100).unref();
  });
  return redis;
}

/** The PEM file `--redis-ca` names ('' for none), read once at start; a bad path says which option to fix. */
export function loadRedisCa(file: string): string {
  if (!file) return '';
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    throw new Error(`cannot read the Redis CA (--redis-ca / SANDGATE_REDIS_CA) ${file}: ${(err as Error).message}`);
  }
}

/**
 * Times every command a connection sends, reply included (db.client.operation.duration): a
 * wrapper on this one client's sendCommand, so it costs a clock read and a promise callback per
 * command. Pipelined and MULTI commands pass through it one by one. Not for a blocking
 * connection (a BullMQ worker's waits would read as slow commands).
 */
export function timeRedisCommands(redis: RedisClient, record: (operation: string, seconds: number) => void): void {
  // Pipelines call it with a third argument (the node), hence the rest parameter.
  type Send = (command: Command, ...rest: unknown[]) => unknown;
  const send = redis.sendCommand.bind(redis) as Send;
  (redis as unknown as { sendCommand: Send }).sendCommand = (command, ...rest) => {
    const started = performance.now();
    const done = () => record(command.name.toUpperCase(), (performance.now() - started) / 1000);
    const sent = send(command, ...rest);
    command.promise.then(done, done);
    return sent;
  };
}
