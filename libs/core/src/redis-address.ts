// Where the replicas' Redis is, parsed from the one `--redis` value (SANDGATE_REDIS_URL). Pure, so
// the configuration can refuse a bad value at start-up, before any Redis module is loaded; the
// store turns the result into connections (libs/store/src/connection.ts).
//
//   redis://[user:password@]host:port[/db]           one server
//   rediss://[user:password@]host:port[/db]          one server over TLS
//   redis+sentinel://[user:password@]h1:p1[,h2:p2…]/master[/db][?sentinelUsername=…&sentinelPassword=…]
//       the primary of `master` as the listed Sentinels name it; user and password are the data
//       nodes' (primary and replicas); the Sentinels' own credentials, if they need any, go in
//       the query. A failover moves every connection to the new primary.
//   redis+cluster://[user:password@]h1:p1[,h2:p2…]
//       a Redis Cluster, found from any of the listed nodes (seeds); every node takes the same
//       credentials (ARCHITECTURE.md, "Redis Cluster").

/** The Sentinel URL scheme (as redis-py, Sidekiq and others spell it). */
export const SENTINEL_SCHEME = 'redis+sentinel:';

export interface HostPort {
  host: string;
  port: number;
}

export type RedisAddress =
  | { mode: 'single'; url: string; password: string }
  | {
      mode: 'cluster';
      /** Seed nodes: any of them tells the client the whole cluster's layout. */
      nodes: HostPort[];
      username: string;
      password: string;
    }
  | {
      mode: 'sentinel';
      sentinels: HostPort[];
      /** The master group name the Sentinels monitor. */
      masterName: string;
      username: string;
      password: string;
      db: number;
      sentinelUsername: string;
      sentinelPassword: string;
    };

export class RedisAddressError extends Error {
  override name = 'RedisAddressError';
}

const SENTINEL_QUERY = new Set(['sentinelUsername', 'sentinelPassword']);
const DEFAULT_SENTINEL_PORT = 26379;
const DEFAULT_REDIS_PORT = 6379;
const FORMS = 'redis://[user:password@]host:port, rediss://…, redis+sentinel://[user:password@]host:port[,host:port…]/master or redis+cluster://[user:password@]host:port[,host:port…]';

/** Parses `--redis`; throws RedisAddressError saying what to fix. */
export function parseRedisAddress(raw: string): RedisAddress {
  const text = raw.trim();
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(text)?.[1]?.toLowerCase();
  if (scheme === 'redis' || scheme === 'rediss') {
    let url: URL;
    try {
      url = new URL(text);
    } catch {
      throw new RedisAddressError(`Redis URL '${redactRedisAddress(text)}' is not a URL (${FORMS})`);
    }
    if (!url.hostname) throw new RedisAddressError(`Redis URL '${redactRedisAddress(text)}' names no host`);
    return { mode: 'single', url: text, password: decode(url.password) };
  }
  if (scheme === 'redis+sentinel') return parseSentinel(text);
  if (scheme === 'redis+cluster') return parseCluster(text);
  throw new RedisAddressError(`Redis address '${redactRedisAddress(text)}' has an unknown scheme: use ${FORMS}`);
}

/** `scheme://[user:password@]h1:p1[,h2:p2…][/path][?query]`, the shape of both multi-host forms. */
function splitMultiHost(text: string, scheme: string) {
  const rest = text.slice(`${scheme}://`.length);
  const queryAt = rest.indexOf('?');
  const beforeQuery = queryAt < 0 ? rest : rest.slice(0, queryAt);
  const query = new URLSearchParams(queryAt < 0 ? '' : rest.slice(queryAt + 1));
  // The userinfo ends at the last '@' before the path (a password may hold '@' only percent-encoded,
  // but be lenient where it is unambiguous).
  const slash = beforeQuery.indexOf('/', beforeQuery.lastIndexOf('@') + 1);
  const authority = slash < 0 ? beforeQuery : beforeQuery.slice(0, slash);
  const pathPart = slash < 0 ? '' : beforeQuery.slice(slash + 1);
  const at = authority.lastIndexOf('@');
  const userinfo = at < 0 ? '' : authority.slice(0, at);
  const hosts = at < 0 ? authority : authority.slice(at + 1);
  const colon = userinfo.indexOf(':');
  const username = decode(colon < 0 ? userinfo : userinfo.slice(0, colon));
  const password = decode(colon < 0 ? '' : userinfo.slice(colon + 1));
  return { query, pathPart, hosts, username, password, hasPath: slash >= 0 };
}

function parseCluster(text: string): RedisAddress {
  const { query, pathPart, hosts, username, password, hasPath } = splitMultiHost(text, 'redis+cluster');
  if (hosts.trim() === '') throw new RedisAddressError('redis+cluster:// names no node: give host:port[,host:port…]');
  const nodes = hosts.split(',').map((entry) => parseHostPort(entry.trim(), 'redis+cluster:// node', DEFAULT_REDIS_PORT));
  // A cluster has one database (0) and no options here: anything more would be silently ignored.
  if (hasPath && pathPart !== '') throw new RedisAddressError(`redis+cluster:// takes no path ('/${pathPart}'): a cluster has database 0 only`);
  for (const key of query.keys()) throw new RedisAddressError(`redis+cluster:// does not know the parameter '${key}'`);
  return { mode: 'cluster', nodes, username, password };
}

function parseSentinel(text: string): RedisAddress {
  const { query, pathPart, hosts, username, password } = splitMultiHost(text, 'redis+sentinel');
  const sentinels = hosts.split(',').map((entry) => parseHostPort(entry.trim(), 'redis+sentinel:// Sentinel', DEFAULT_SENTINEL_PORT));
  if (sentinels.length === 0 || hosts.trim() === '') throw new RedisAddressError('redis+sentinel:// names no Sentinel: give host:port[,host:port…]');

  const [masterName = '', dbText, ...extra] = pathPart.split('/').map(decode);
  if (!masterName) throw new RedisAddressError('redis+sentinel:// names no master: add /MASTER_NAME after the Sentinels (e.g. /mymaster)');
  if (extra.length > 0) throw new RedisAddressError(`redis+sentinel:// path '/${pathPart}' has too many parts: /MASTER_NAME[/DB]`);
  let db = 0;
  if (dbText !== undefined && dbText !== '') {
    if (!/^\d{1,2}$/.test(dbText)) throw new RedisAddressError(`redis+sentinel:// database '${dbText}' must be a number`);
    db = Number(dbText);
  }
  for (const key of query.keys()) {
    if (!SENTINEL_QUERY.has(key)) throw new RedisAddressError(`redis+sentinel:// does not know the parameter '${key}' (known: ${[...SENTINEL_QUERY].join(', ')})`);
  }
  return {
    mode: 'sentinel',
    sentinels,
    masterName,
    username,
    password,
    db,
    sentinelUsername: query.get('sentinelUsername') ?? '',
    sentinelPassword: query.get('sentinelPassword') ?? '',
  };
}

function parseHostPort(entry: string, what: string, defaultPort: number): HostPort {
  const m = /^(\[[0-9a-f:.]+\]|[^:[\]\s/]+)(?::(\d{1,5}))?$/i.exec(entry);
  if (!m) throw new RedisAddressError(`${what} '${entry}' is not host[:port]`);
  const port = m[2] === undefined ? defaultPort : Number(m[2]);
  if (port < 1 || port > 65535) throw new RedisAddressError(`${what} '${entry}' has a port out of range`);
  return { host: m[1]!.replace(/^\[|\]$/g, ''), port };
}

function decode(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw new RedisAddressError(`Redis address part '${part.replace(/./g, '*')}' is badly percent-encoded`);
  }
}

/** The address with every password replaced by `***`, for logs and banners. */
export function redactRedisAddress(raw: string): string {
  return raw
    .replace(/^([a-z][a-z0-9+.-]*:\/\/[^:@/]*:)[^@]*@/i, '$1***@')
    .replace(/([?&]sentinelPassword=)[^&]*/g, '$1***');
}
