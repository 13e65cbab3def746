// A replica's configuration, parsed once. REPLICA_OPTIONS is the one list of options: each has its
// `sandgate gateway` flag (if any), its SANDGATE_* variable, its default and a one-line
// description. The CLI's flag parser, the environment parser below and README.md's table (checked
// by apps/gateway/test/config.test.ts) are all driven by it; the flag and variable names are a
// public contract. Nothing else in the replica reads process.env.
//
// Only pure imports here: `sandgate gateway`/`up` parse their flags through this module before
// the gateway's Redis, gRPC and driver modules are loaded, and client commands share its helpers.
import path from 'node:path';
import { DEBUG_BREAKS, DEBUG_ENV, DEFAULT_SERVICE_DOMAIN, normaliseServiceDomain, parseDebugBreaks, parseRedisAddress, type DebugBreak } from '@sandgate/core';
import { LOG_LEVELS, otlpMetricsExportFromEnv, type LogLevel, type OtlpMetricsExport } from '@sandgate/telemetry';

export interface ReplicaConfig {
  host: string;
  grpcPort: number;
  httpPort: number;
  peerPort: number;
  redisUrl: string;
  replicaId: string;
  driver: 'local' | 'docker';
  stateDir: string;
  /** Empty: supervisors dial this replica's own gRPC address. */
  supervisorEndpoint: string;
  advertiseHost: string;
  workers: boolean;
  heartbeatIntervalMs: number;
  heartbeatMisses: number;
  /** The most a graceful stop (SIGTERM) may take, whatever Redis does; then what is left is closed. */
  drainTimeoutMs: number;
  /** Local driver: supervisors load their code through a compile cache filled on the host. */
  supervisorCompileCache: boolean;
  ownerTtlMs: number;
  maxExecsPerSandbox: number;
  provisionTimeoutMs: number;
  /** 0 = tokens never expire. */
  sshSessionTtlSeconds: number;
  sshMaxConnectionsPerToken: number;
  sshMaxConnectionsPerSandbox: number;
  /** Empty: the docker driver's default image. */
  dockerImage: string;
  /** Docker driver: network namespaces kept ready for creates (0: none). */
  dockerNetnsSpares: number;
  localDiskSpares: number;
  /** Empty: derived (HKDF-SHA256) from the Redis URL's password; never stored in Redis. */
  peerSecret: string;
  /** PEM files of the public listeners' certificate and key; both empty: plaintext. */
  tlsCert: string;
  tlsKey: string;
  /** PEM file of the CA that signed tlsCert, handed to supervisors; empty: tlsCert itself (self-signed). */
  tlsCa: string;
  /** PEM file of the CA whose client certificates are principals (mTLS); empty: no mTLS. */
  clientCa: string;
  /** Authenticate every public call (false only with an explicit --no-auth). */
  auth: boolean;
  /** OIDC issuer URL; empty: OIDC tokens are not accepted. */
  oidcIssuer: string;
  oidcAudience: string;
  /** Empty: discovered from the issuer's /.well-known/openid-configuration. */
  oidcJwksUrl: string;
  /** Dotted path of the claim naming the caller's workspace. */
  oidcWorkspaceClaim: string;
  /** Dotted path of the claim holding the caller's role(s). */
  oidcRoleClaim: string;
  /** The role value (in oidcRoleClaim) that makes a caller a gateway admin. */
  oidcAdminRole: string;
  /** 0 = no limit. */
  maxSandboxesPerWorkspace: number;
  /** Concurrent execs per workspace, across replicas; 0 = no limit. */
  maxExecsPerWorkspace: number;
  /** Base domain of exposed-service hosts (`<ws>--<sandbox>[--<service>].<domain>`). */
  serviceDomain: string;
  /** Scheme of service URLs; empty: https with --tls-cert, else http. */
  servicePublicScheme: '' | 'http' | 'https';
  /** Port of service URLs (a load balancer's); 0: this replica's own HTTP port. */
  servicePublicPort: number;
  /** PEM file of the CA a `rediss://` Redis presents; empty: the system's CAs. */
  redisCa: string;
  /** Redis replicas that must hold an acknowledged write (WAIT) before the client hears of it; 0: no check. */
  redisMinReplicas: number;
  /** How long an acknowledged write waits for them before UNAVAILABLE. */
  redisWaitTimeoutMs: number;
  /** How long the reconcile sweep keeps compute without a record in quarantine before deleting it. */
  orphanGraceMs: number;
  pendingGraceMs: number;
  logLevel: LogLevel;
  /** Debug faults switched on (only ever non-empty with SANDGATE_DEBUG_UNSAFE=1). */
  debugBreaks: ReadonlySet<DebugBreak>;
  /** OTLP metrics export from the standard OTEL_* variables; null: /metrics only. */
  otlpMetrics: OtlpMetricsExport | null;
}

/** Host facts the computed defaults use, injected so parsing stays pure. */
export interface HostFacts {
  hostname: string;
  pid: number;
  homedir: string;
  /** Four random hex characters for the default replica id. */
  randomHex(): string;
}

/** A value the user gave, and where it came from (`--flag` or the variable), for error messages. */
export interface RawOption {
  value: string;
  what: string;
}

/** A default computed at start; `text` is how the documentation states it. */
export interface ComputedDefault<T> {
  text: string;
  compute(resolved: Partial<ReplicaConfig>, facts: HostFacts): T;
}

export interface OptionSpec<T> {
  /** The `sandgate gateway` flag, without `--`; absent: environment only. */
  flag?: string;
  /** For a boolean flag: the raw value its presence stands for (`--no-workers` = `0`). */
  flagSets?: string;
  /** `sandgate up` takes the flag too. */
  up?: boolean;
  /** `sandgate worker` takes the flag too. */
  worker?: boolean;
  env: string;
  /** Older variable names, still honoured when the canonical one is unset. */
  aliases?: readonly string[];
  /** A raw value run through `parse` like user input, or a computed default. */
  default: string | ComputedDefault<T>;
  description: string;
  parse(raw: string, what: string): T;
}

/** A bad flag or variable value; the message names the flag or the variable. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** A decimal integer within [min, max]; `noun` is what the error says it must be. */
const integer = (min: number, max: number, noun: string) => (raw: string, what: string): number => {
  const text = raw.trim();
  const n = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(n)) throw new ConfigError(`${what} must be ${noun}, got '${raw}'`);
  if (n < min || n > max) throw new ConfigError(`${what} must be between ${min} and ${max}, got '${raw}'`);
  return n;
};
const positiveInt = integer(1, Number.MAX_SAFE_INTEGER, 'a positive integer');
const nonNegativeInt = integer(0, Number.MAX_SAFE_INTEGER, 'a whole number');
const port = integer(0, 65535, 'an integer');

function nonEmpty(raw: string, what: string): string {
  if (raw.trim() === '') throw new ConfigError(`${what} must not be empty`);
  return raw;
}

const anyString = (raw: string): string => raw.trim();

function oneOf<T extends string>(values: readonly T[]) {
  return (raw: string, what: string): T => {
    const v = raw.trim().toLowerCase();
    if (!(values as readonly string[]).includes(v)) throw new ConfigError(`${what} must be one of ${values.join(', ')}, got '${raw}'`);
    return v as T;
  };
}

function zeroOrOne(raw: string, what: string): boolean {
  const v = raw.trim().toLowerCase();
  if (v === '1' || v === 'true') return true;
  if (v === '0' || v === 'false') return false;
  throw new ConfigError(`${what} must be 0 or 1, got '${raw}'`);
}

/** Provisioning deadline: one idea, one canonical name; the client's older name still works. */
export const PROVISION_TIMEOUT_OPTION: OptionSpec<number> = {
  env: 'SANDGATE_PROVISION_DEADLINE_SECONDS',
  aliases: ['SANDGATE_PROVISION_TIMEOUT'],
  default: '300',
  description: 'seconds a sandbox may take to become Ready: the replica then marks it Error (ProvisioningTimeout), and `sandbox create`/`start` stop waiting',
  parse: (raw, what) => positiveInt(raw, what) * 1000,
};

/** `sandgate worker`'s own option; it takes the replica options marked `worker` besides. */
export const WORKER_ID_OPTION: OptionSpec<string> = {
  flag: 'worker-id',
  env: 'SANDGATE_WORKER_ID',
  default: { text: 'worker-hostname-pid-random', compute: (_r, f) => `worker-${f.hostname}-${f.pid}-${f.randomHex()}` },
  description: 'stable id of a standalone worker (`sandgate worker`): names its Redis connections',
  parse: (raw, what) => {
    const id = raw.trim();
    if (id === '' || /\s/.test(id)) throw new ConfigError(`${what}: worker id '${raw}' must be non-empty without whitespace`);
    return id;
  },
};

/**
 * `sandgate worker --metrics-port`: where a worker serves /healthz, /readyz and /metrics (plain
 * HTTP on SANDGATE_HOST's address). None by default: a worker listens on nothing unless asked, but
 * where only workers run jobs (the compose stack) their job metrics are scraped from here.
 */
export const WORKER_METRICS_PORT_OPTION: OptionSpec<number | null> = {
  flag: 'metrics-port',
  env: 'SANDGATE_WORKER_METRICS_PORT',
  default: '',
  description: "port of a standalone worker's /healthz, /readyz and /metrics (0 = a free port; default: none)",
  parse: (raw, what) => (raw.trim() === '' ? null : port(raw, what)),
};

/** The options only `sandgate worker` has (beside the replica options marked `worker`). */
export const WORKER_OPTIONS = { workerId: WORKER_ID_OPTION, metricsPort: WORKER_METRICS_PORT_OPTION } as const;

// otlpMetrics comes from the standard OTEL_* variables (parseReplicaConfig), not a sandgate option.
type Specs = { [K in Exclude<keyof ReplicaConfig, 'otlpMetrics'>]: OptionSpec<ReplicaConfig[K]> };

/** Every replica option, in the order they are resolved (advertiseHost follows host). */
export const REPLICA_OPTIONS: Specs = {
  host: { flag: 'host', env: 'SANDGATE_HOST', default: '127.0.0.1', description: 'address the gRPC, HTTP and peer listeners bind to', parse: nonEmpty },
  grpcPort: {
    flag: 'grpc-port',
    up: true,
    env: 'SANDGATE_GRPC_PORT',
    default: '8080',
    description: 'public gRPC port: the OpenShell API and the supervisor protocol (0 = a free port)',
    parse: port,
  },
  httpPort: { flag: 'http-port', up: true, env: 'SANDGATE_HTTP_PORT', default: '8081', description: 'HTTP port: /healthz, /readyz, /metrics (0 = a free port)', parse: port },
  peerPort: { flag: 'peer-port', env: 'SANDGATE_PEER_PORT', default: '8082', description: 'replica-to-replica relay port (0 = a free port)', parse: port },
  redisUrl: {
    flag: 'redis',
    up: true,
    worker: true,
    env: 'SANDGATE_REDIS_URL',
    default: 'redis://127.0.0.1:6379',
    description: 'the Redis every replica shares: redis://, rediss://, redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER or redis+cluster://HOST:PORT[,HOST:PORT…] (`up` without it runs a private redis-server)',
    parse: (raw, what) => {
      const url = nonEmpty(raw, what);
      try {
        parseRedisAddress(url);
      } catch (err) {
        throw new ConfigError(`${what}: ${(err as Error).message}`);
      }
      return url;
    },
  },
  replicaId: {
    flag: 'replica-id',
    env: 'SANDGATE_REPLICA_ID',
    default: { text: 'hostname-pid-random', compute: (_r, f) => `${f.hostname}-${f.pid}-${f.randomHex()}` },
    description: 'stable id of this replica',
    parse: (raw, what) => {
      const id = nonEmpty(raw, what);
      if (/\s/.test(id)) throw new ConfigError(`replica id '${id}' must not contain whitespace`);
      return id;
    },
  },
  driver: {
    flag: 'driver',
    up: true,
    worker: true,
    env: 'SANDGATE_DRIVER',
    default: 'local',
    description: 'compute driver: local (bubblewrap) or docker (`up` picks what the machine has)',
    parse: oneOf(['local', 'docker'] as const),
  },
  stateDir: {
    flag: 'state-dir',
    up: true,
    worker: true,
    env: 'SANDGATE_STATE_DIR',
    default: { text: '~/.local/state/sandgate', compute: (_r, f) => path.join(f.homedir, '.local', 'state', 'sandgate') },
    description: 'where the local driver keeps sandbox directories and logs',
    parse: (raw, what) => path.resolve(nonEmpty(raw, what)),
  },
  supervisorEndpoint: {
    flag: 'supervisor-endpoint',
    worker: true,
    env: 'SANDGATE_SUPERVISOR_ENDPOINT',
    default: { text: "this replica's gRPC address", compute: () => '' },
    description: 'what supervisors dial (host:port list, normally the load balancer)',
    parse: anyString,
  },
  advertiseHost: {
    flag: 'advertise-host',
    env: 'SANDGATE_ADVERTISE_HOST',
    default: { text: 'the host', compute: (r) => r.host! },
    description: "address peers use to reach this replica's peer port",
    parse: nonEmpty,
  },
  workers: {
    flag: 'no-workers',
    flagSets: '0',
    env: 'SANDGATE_WORKERS',
    default: '1',
    description: 'run the BullMQ job workers in this process, 0 or 1 (`up` always does)',
    parse: zeroOrOne,
  },
  heartbeatIntervalMs: {
    env: 'SANDGATE_HEARTBEAT_INTERVAL_MS',
    default: '2000',
    description: 'supervisor heartbeat interval',
    parse: positiveInt,
  },
  heartbeatMisses: {
    env: 'SANDGATE_HEARTBEAT_MISSES',
    default: '3',
    description: 'silent heartbeat intervals after which a supervisor session is closed',
    parse: positiveInt,
  },
  drainTimeoutMs: {
    env: 'SANDGATE_DRAIN_TIMEOUT_MS',
    default: '10000',
    description: 'the most a graceful stop (SIGTERM) takes: past it, connections are closed and the sessions\' keys left to expire, even with Redis unreachable',
    parse: positiveInt,
  },
  supervisorCompileCache: {
    worker: true,
    env: 'SANDGATE_SUPERVISOR_COMPILE_CACHE',
    default: '1',
    description: 'supervisors load their code through Node\'s compile cache, read-only in every sandbox (a faster start): the local driver fills it on the host, the docker driver in a one-off container of its default image; 0 or 1',
    parse: zeroOrOne,
  },
  ownerTtlMs: {
    env: 'SANDGATE_OWNER_TTL_MS',
    default: '6000',
    description: 'lifetime of the ownership and liveness keys in Redis, renewed at a third of it',
    parse: positiveInt,
  },
  maxExecsPerSandbox: {
    env: 'SANDGATE_MAX_EXECS_PER_SANDBOX',
    default: '64',
    description: 'concurrent execs per sandbox; the next one fails with RESOURCE_EXHAUSTED',
    parse: positiveInt,
  },
  provisionTimeoutMs: PROVISION_TIMEOUT_OPTION,
  sshSessionTtlSeconds: {
    env: 'SANDGATE_SSH_SESSION_TTL_SECONDS',
    default: '86400',
    description: 'lifetime of CreateSshSession tokens (0 = never expire)',
    parse: nonNegativeInt,
  },
  sshMaxConnectionsPerToken: {
    env: 'SANDGATE_SSH_MAX_CONNECTIONS_PER_TOKEN',
    default: '3',
    description: 'concurrent ForwardTcp connections per SSH session token',
    parse: positiveInt,
  },
  sshMaxConnectionsPerSandbox: {
    env: 'SANDGATE_SSH_MAX_CONNECTIONS_PER_SANDBOX',
    default: '20',
    description: 'concurrent ForwardTcp connections per sandbox, across replicas',
    parse: positiveInt,
  },
  dockerImage: {
    env: 'SANDGATE_DOCKER_IMAGE',
    // The image's name lives in @sandgate/compute (DEFAULT_DOCKER_IMAGE); empty selects it.
    default: { text: "the docker driver's default image", compute: () => '' },
    description: 'image for sandboxes that name none (docker driver)',
    parse: nonEmpty,
  },
  dockerNetnsSpares: {
    env: 'SANDGATE_DOCKER_NETNS_SPARES',
    default: '2',
    description: 'network namespaces the docker driver keeps ready, each a small container on the sandbox network: a create that claims one starts its container about 250 ms sooner, for a containerd shim per sandbox; 0 gives every container its own bridge endpoint',
    parse: integer(0, 64, 'a whole number from 0 to 64'),
  },
  localDiskSpares: {
    env: 'SANDGATE_LOCAL_DISK_SPARES',
    default: '4',
    description: "sandbox disks of the default size the local driver keeps formatted and mounted from its first create on: a create that claims one skips mkfs and mount (two forks of the replica), for an idle loop device each; 0 makes every sandbox's disk at its create",
    parse: integer(0, 64, 'a whole number from 0 to 64'),
  },
  peerSecret: {
    env: 'SANDGATE_PEER_SECRET',
    default: { text: "derived from the Redis URL's password", compute: () => '' },
    description: 'secret replicas prove to each other on the peer port (HMAC challenge–response, never sent); the same on every replica and worker; without it and without a Redis password a replica refuses to start',
    parse: anyString,
  },
  tlsCert: {
    flag: 'tls-cert',
    worker: true,
    env: 'SANDGATE_TLS_CERT',
    default: { text: 'none (plaintext)', compute: () => '' },
    description: "PEM certificate (chain) of the public gRPC and HTTP listeners; with --tls-key, they serve TLS (a worker: the gateway's, for the supervisors it restarts)",
    parse: anyString,
  },
  tlsKey: {
    flag: 'tls-key',
    env: 'SANDGATE_TLS_KEY',
    default: { text: 'none', compute: () => '' },
    description: 'PEM private key of --tls-cert',
    parse: anyString,
  },
  tlsCa: {
    flag: 'tls-ca',
    worker: true,
    env: 'SANDGATE_TLS_CA',
    default: { text: '--tls-cert itself (self-signed)', compute: () => '' },
    description: 'PEM CA that signed --tls-cert: supervisors are handed it to verify the gateway',
    parse: anyString,
  },
  clientCa: {
    flag: 'client-ca',
    env: 'SANDGATE_CLIENT_CA',
    default: { text: 'none (no mTLS)', compute: () => '' },
    description: 'PEM CA of client certificates: a certificate it signed is a principal (mTLS); needs --tls-cert',
    parse: anyString,
  },
  auth: {
    flag: 'no-auth',
    flagSets: '0',
    up: true,
    env: 'SANDGATE_AUTH',
    default: '1',
    description: 'authenticate every public call, 0 or 1; --no-auth lets anyone in as an admin (a warning at start)',
    parse: zeroOrOne,
  },
  oidcIssuer: {
    flag: 'oidc-issuer',
    env: 'SANDGATE_OIDC_ISSUER',
    default: { text: 'none (OIDC tokens refused)', compute: () => '' },
    description: 'OIDC issuer URL whose JWTs are accepted as bearer tokens (`iss` must match)',
    parse: anyString,
  },
  oidcAudience: {
    flag: 'oidc-audience',
    env: 'SANDGATE_OIDC_AUDIENCE',
    default: { text: 'none', compute: () => '' },
    description: 'the `aud` an OIDC token must carry (required with --oidc-issuer)',
    parse: anyString,
  },
  oidcJwksUrl: {
    env: 'SANDGATE_OIDC_JWKS_URL',
    default: { text: "the issuer's discovery document", compute: () => '' },
    description: 'JWKS URL of the OIDC issuer (default: jwks_uri from <issuer>/.well-known/openid-configuration)',
    parse: anyString,
  },
  oidcWorkspaceClaim: {
    env: 'SANDGATE_OIDC_WORKSPACE_CLAIM',
    default: 'workspace',
    description: "dotted path of the OIDC claim naming the caller's workspace (absent: default)",
    parse: nonEmpty,
  },
  oidcRoleClaim: {
    env: 'SANDGATE_OIDC_ROLE_CLAIM',
    default: 'roles',
    description: "dotted path of the OIDC claim holding the caller's role or roles",
    parse: nonEmpty,
  },
  oidcAdminRole: {
    env: 'SANDGATE_OIDC_ADMIN_ROLE',
    default: 'admin',
    description: 'the role (in the role claim) that makes an OIDC caller a gateway admin',
    parse: nonEmpty,
  },
  maxSandboxesPerWorkspace: {
    flag: 'max-sandboxes-per-workspace',
    env: 'SANDGATE_MAX_SANDBOXES_PER_WORKSPACE',
    default: '0',
    description: 'sandboxes one workspace may hold (0 = no limit); the next create fails with RESOURCE_EXHAUSTED',
    parse: nonNegativeInt,
  },
  maxExecsPerWorkspace: {
    flag: 'max-execs-per-workspace',
    env: 'SANDGATE_MAX_EXECS_PER_WORKSPACE',
    default: '0',
    description: 'concurrent execs one workspace may run across replicas (0 = no limit); the next fails with RESOURCE_EXHAUSTED',
    parse: nonNegativeInt,
  },
  serviceDomain: {
    flag: 'service-domain',
    up: true,
    env: 'SANDGATE_SERVICE_DOMAIN',
    default: DEFAULT_SERVICE_DOMAIN,
    description: 'base domain of exposed-service URLs: `<workspace>--<sandbox>[--<service>].<domain>` is served on the HTTP port (point a wildcard DNS name at the load balancer)',
    parse: (raw, what) => {
      const domain = normaliseServiceDomain(raw);
      if (!domain) throw new ConfigError(`${what} must be a DNS name of at least two labels (e.g. apps.example.com), got '${raw}'`);
      return domain;
    },
  },
  servicePublicScheme: {
    flag: 'service-public-scheme',
    env: 'SANDGATE_SERVICE_PUBLIC_SCHEME',
    default: { text: 'https with --tls-cert, else http', compute: () => '' },
    description: 'scheme of exposed-service URLs, where a load balancer in front terminates TLS or not: http or https',
    parse: oneOf(['http', 'https'] as const),
  },
  servicePublicPort: {
    flag: 'service-public-port',
    env: 'SANDGATE_SERVICE_PUBLIC_PORT',
    default: { text: "this replica's HTTP port", compute: () => 0 },
    description: 'port of exposed-service URLs: the load balancer\'s HTTP port in front of the replicas (left out of URLs when it is the scheme\'s default)',
    parse: integer(1, 65535, 'a port'),
  },
  redisCa: {
    flag: 'redis-ca',
    up: true,
    worker: true,
    env: 'SANDGATE_REDIS_CA',
    default: { text: "the system's CAs", compute: () => '' },
    description: 'PEM CA of a `rediss://` Redis',
    parse: anyString,
  },
  redisMinReplicas: {
    env: 'SANDGATE_REDIS_MIN_REPLICAS',
    default: '0',
    description: 'Redis replicas that must have a write a client is told succeeded (create, delete, stop, start, token, ownership claim; WAIT) before the answer, else UNAVAILABLE; 0: no check (one Redis)',
    parse: integer(0, 100, 'a whole number'),
  },
  redisWaitTimeoutMs: {
    env: 'SANDGATE_REDIS_WAIT_TIMEOUT_MS',
    default: '1000',
    description: 'how long such a write waits for SANDGATE_REDIS_MIN_REPLICAS replicas',
    parse: positiveInt,
  },
  pendingGraceMs: {
    env: 'SANDGATE_PENDING_GRACE_MS',
    default: '60000',
    description: 'how old a create, claim or delete left half-done by a dead replica must be before the reconcile sweep finishes or undoes it; at least 20000 (a create\'s later steps may write for 10000 after its first)',
    parse: (raw, what) => {
      const n = nonNegativeInt(raw, what);
      if (n < 20_000) throw new ConfigError(`${what} must be at least 20000 (a create's steps may write for 10000 ms after its reservation)`);
      return n;
    },
  },
  orphanGraceMs: {
    env: 'SANDGATE_ORPHAN_GRACE_MS',
    default: '60000',
    description: 'how long the reconcile sweep must see compute without a record before it deletes it (until then it is quarantined: counted and logged); 0: at once',
    parse: nonNegativeInt,
  },
  logLevel: {
    env: 'SANDGATE_LOG_LEVEL',
    default: 'info',
    description: `least severe log level written: ${LOG_LEVELS.join(', ')}`,
    parse: oneOf(LOG_LEVELS),
  },
  debugBreaks: {
    env: DEBUG_ENV.breaks,
    default: '',
    description: `comma-separated debug faults (${Object.keys(DEBUG_BREAKS).join(', ')}) that switch a safety mechanism off, for negative chaos runs; a replica refuses to start with any unless ${DEBUG_ENV.unsafe}=1`,
    // The variable is read with its companions by parseDebugBreaks (see parseReplicaConfig).
    parse: () => new Set(),
  },
};

/** The values a config gets when nothing is given (computed defaults excluded). */
export const CONFIG_DEFAULTS = Object.fromEntries(
  Object.entries(REPLICA_OPTIONS as Record<string, OptionSpec<unknown>>).flatMap(([key, spec]) =>
    typeof spec.default === 'string' && spec.default !== '' ? [[key, spec.parse(spec.default, 'default')]] : [],
  ),
) as Partial<ReplicaConfig>;

/** The flag, else the variable, else an alias; empty variables count as unset. */
export function readOption(spec: OptionSpec<unknown>, flagValue: string | boolean | undefined, env: Readonly<Record<string, string | undefined>>): RawOption | undefined {
  if (typeof flagValue === 'string') return { value: flagValue, what: `--${spec.flag}` };
  if (flagValue === true && spec.flagSets !== undefined) return { value: spec.flagSets, what: `--${spec.flag}` };
  for (const name of [spec.env, ...(spec.aliases ?? [])]) {
    const value = env[name];
    if (value !== undefined && value !== '') return { value, what: name };
  }
  return undefined;
}

/** One option's value: what the user gave, parsed, else its default. */
export function resolveOption<T>(
  spec: OptionSpec<T>,
  flagValue: string | boolean | undefined,
  env: Readonly<Record<string, string | undefined>>,
  resolved: Partial<ReplicaConfig>,
  facts: HostFacts,
): T {
  const given = readOption(spec, flagValue, env);
  if (given) return spec.parse(given.value, given.what);
  return typeof spec.default === 'string' ? spec.parse(spec.default, 'default') : spec.default.compute(resolved, facts);
}

/**
 * Flag > variable (set and non-empty) > alias > default, for every option. `flags` is keyed by
 * flag name, as node:util parseArgs returns them. Throws ConfigError, or DebugBreakError for
 * debug faults without SANDGATE_DEBUG_UNSAFE=1.
 */
export function parseReplicaConfig(
  flags: Readonly<Record<string, string | boolean | undefined>>,
  env: Readonly<Record<string, string | undefined>>,
  facts: HostFacts,
): ReplicaConfig {
  const resolved: Partial<ReplicaConfig> = {};
  const set = resolved as Record<string, unknown>;
  for (const [key, spec] of Object.entries(REPLICA_OPTIONS as Record<string, OptionSpec<unknown>>)) {
    set[key] = resolveOption(spec, spec.flag === undefined ? undefined : flags[spec.flag], env, resolved, facts);
  }
  resolved.debugBreaks = parseDebugBreaks(env);
  resolved.otlpMetrics = otlpMetricsExportFromEnv(env);
  return resolved as ReplicaConfig;
}

export interface RunningReplica {
  readonly replicaId: string;
  /** host:port of the public gRPC listener. */
  readonly grpcAddress: string;
  /** http://host:port of the HTTP listener. */
  readonly httpUrl: string;
  readonly peerAddress: string;
  /** Graceful stop: releases ownership of every session at once, then closes listeners. */
  close(): Promise<void>;
}
