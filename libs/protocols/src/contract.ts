// The wire contract between sandgate's processes, in one place: the sandbox phase numbers, the
// gRPC metadata names, the supervisor's environment (built by every compute driver, parsed by the
// supervisor) and the loopback rule for forwarded TCP. Pure: importable without loading the
// .proto files (`@sandgate/protocols/contract`), so libs/core can build on it.
import { isIP } from 'node:net';

/** `openshell.v1.SandboxPhase`, as numbers on the wire and in stored records. */
export const SandboxPhase = {
  UNSPECIFIED: 0,
  PROVISIONING: 1,
  READY: 2,
  ERROR: 3,
  DELETING: 4,
  UNKNOWN: 5,
  STOPPING: 6,
  STOPPED: 7,
  STARTING: 8,
  COMPLETED: 9,
} as const;
export type SandboxPhase = (typeof SandboxPhase)[keyof typeof SandboxPhase];

/** gRPC metadata keys sandgate's own calls carry (lower case, as HTTP/2 sends them). */
export const MetadataKey = {
  /** Supervisor → gateway: which sandbox this supervisor serves. */
  sandboxId: 'x-sandgate-sandbox-id',
  /** Supervisor → gateway: the per-sandbox secret the driver handed over as a file. */
  credential: 'x-sandgate-credential',
  // Replicas no longer call each other over gRPC (peer calls ride authenticated peer links,
  // libs/relay/src/link.ts), and no secret travels in metadata: `x-sandgate-peer-secret` and
  // `x-sandgate-from-replica` are gone.
} as const;

/**
 * The supervisor's environment variables. Every `SANDGATE_*` name belongs to sandgate: drivers
 * drop any the sandbox's own environment carries, and the supervisor hides them from the main
 * process and execs (except the exec tag).
 */
export const SupervisorEnv = {
  prefix: 'SANDGATE_',
  /** Comma-separated gRPC endpoints the supervisor dials, rotating on failure. */
  gateway: 'SANDGATE_GATEWAY',
  /** Path (inside the sandbox) of the PEM CA the gateway's certificate chains to; absent: plaintext. */
  gatewayCaFile: 'SANDGATE_GATEWAY_CA_FILE',
  /** The name the supervisor verifies the gateway's certificate for, whatever address it dials. */
  gatewayTlsName: 'SANDGATE_GATEWAY_TLS_NAME',
  sandboxId: 'SANDGATE_SANDBOX_ID',
  /** Path (inside the sandbox) of the credential file; the credential itself is never in the environment. */
  credentialFile: 'SANDGATE_CREDENTIAL_FILE',
  /** Path (inside the sandbox) of the sandbox's variables as JSON (SANDBOX_ENVIRONMENT_PATH); empty: none. */
  environmentFile: 'SANDGATE_ENVIRONMENT_FILE',
  /** `1`: the main process gets a PTY; `0` (or absent): pipes. */
  mainTty: 'SANDGATE_MAIN_TTY',
  logLevel: 'SANDGATE_LOG_LEVEL',
  /**
   * Directory (inside the sandbox) of Node's compile cache for the supervisor's own code, filled
   * on the host and read-only in the sandbox; empty: none. Only ever a directory nothing in the
   * sandbox can write: code cached there runs as the supervisor.
   */
  compileCache: 'SANDGATE_COMPILE_CACHE',
  /** Supervisor-side debug faults (libs/core debug-breaks.ts), honoured only with debugUnsafe=1. */
  debugBreaks: 'SANDGATE_DEBUG_BREAK',
  debugUnsafe: 'SANDGATE_DEBUG_UNSAFE',
  /** Set by the supervisor on every exec process, so a tree can be found after it left its group. */
  execId: 'SANDGATE_EXEC_ID',
  /** Numeric uid/gid every workload process (main, execs, SSH shells) runs as; never 0. */
  workloadUid: 'SANDGATE_WORKLOAD_UID',
  workloadGid: 'SANDGATE_WORKLOAD_GID',
  /** `1`: workload processes run in a network namespace of their own (loopback + egress proxy). */
  networkIsolation: 'SANDGATE_NETWORK_ISOLATION',
  /**
   * `:`-separated cgroup directories (as the supervisor sees them) every workload process joins
   * before it runs: where the driver enforces memory, cpu and pids limits. Empty: none.
   */
  workloadCgroups: 'SANDGATE_WORKLOAD_CGROUPS',
  /** The sandbox's SandboxPolicy as stored (base64 of its protobuf bytes); empty: no policy (deny all egress). */
  policy: 'SANDGATE_POLICY',
  /**
   * `1`: a warm-pool member. The supervisor connects and serves execs but starts its main process
   * only when the gateway sends start_main (the claim's command and environment).
   */
  deferMain: 'SANDGATE_DEFER_MAIN',
} as const;

/**
 * The workload's identity when the policy names none (`run_as_user: sandbox`). Not root; outside
 * the range Debian gives to people and system daemons, so no host account shares it.
 */
export const SANDBOX_UID = 10001;
export const SANDBOX_GID = 10001;

/** How a driver confines the workload, as far as the supervisor takes part in it. */
export interface WorkloadIsolation {
  uid: number;
  gid: number;
  /** Run workload processes in a network namespace of their own. */
  isolateNetwork: boolean;
  /** cgroup directories (supervisor's view) each workload process joins; may be empty. */
  cgroupDirs: string[];
}

/** Where every driver puts the credential file inside the sandbox (a read-only bind). */
export const SANDBOX_CREDENTIAL_PATH = '/run/sandgate/credential';
/**
 * Where every driver shows the supervisor the sandbox's own variables (renderSandboxEnvironment),
 * read-only: a file, never the supervisor's process environment, where LD_PRELOAD or
 * NODE_OPTIONS would act on the supervisor itself and, for the local driver, on bwrap, which
 * runs as root on the host.
 */
export const SANDBOX_ENVIRONMENT_PATH = '/run/sandgate/environment.json';

/** Where every driver puts the gateway's CA (PEM) inside the sandbox when the gateway serves TLS (a read-only bind). */
export const SANDBOX_GATEWAY_CA_PATH = '/run/sandgate/gateway-ca.pem';
/** Where a driver that has one shows the supervisor's compile cache (SupervisorEnv.compileCache), read-only. */
export const SANDBOX_COMPILE_CACHE_PATH = '/run/sandgate/compile-cache';

/**
 * Node's own name for its compile cache directory, read when the process starts: set to the
 * supervisors' cache, it has Node take even the entry point (main.ts) from the cache, so no
 * TypeScript file of the supervisor is ever stripped in the sandbox. The first one stripped costs
 * Node ~30 ms of CPU to start its type stripper (BENCHMARKS.md, "Cold create"); main.ts can only
 * turn the cache on once it is itself loaded. Not a SANDGATE_* name, so the supervisor removes it
 * from the base of the workload's environment itself (parseSupervisorEnvironment).
 */
export const NODE_COMPILE_CACHE_VAR = 'NODE_COMPILE_CACHE';

/**
 * The variables that point a Node process at the supervisors' compile cache `dir` ('' for none):
 * the supervisor's launch and the run that fills the cache set the same ones.
 */
export function compileCacheEnvironment(dir: string | undefined): Record<string, string> {
  return { [SupervisorEnv.compileCache]: dir ?? '', [NODE_COMPILE_CACHE_VAR]: dir ?? '' };
}

/** What a driver knows about one supervisor launch, as far as its environment goes. */
export interface SupervisorLaunch {
  sandboxId: string;
  gatewayEndpoints: string;
  /** Path of the credential file as the supervisor sees it. */
  credentialFile: string;
  /**
   * Path of the sandbox's variables (the file renderSandboxEnvironment(environment) wrote) as the
   * supervisor sees it; absent only where no driver is involved (the supervisor's own tests).
   */
  environmentFile?: string;
  tty: boolean;
  /** Empty means the supervisor's default (info). */
  logLevel: string;
  /**
   * The sandbox's variables (for the main process and execs); SANDGATE_* names are dropped. Not
   * written to the supervisor's environment: the driver hands them over in `environmentFile`.
   */
  environment: Readonly<Record<string, string>>;
  /** Supervisor-side debug faults as `supervisorDebugBreaks()` renders them; empty or absent: none. */
  debugBreaks?: string;
  /** Absent only where no driver is involved (the supervisor's own tests): the workload is not confined. */
  workload?: WorkloadIsolation;
  /** SandboxPolicy bytes as stored; absent or empty: no policy. */
  policy?: Uint8Array;
  /**
   * The gateway serves TLS: the CA file's path as the supervisor sees it, and the name in the
   * gateway's certificate to verify (whatever address is dialled). Absent: plaintext.
   */
  gatewayTls?: { caFile: string; serverName: string };
  /** The compile cache's directory as the supervisor sees it (read-only there); absent: none. */
  compileCacheDir?: string;
  /** A warm-pool member: the main process waits for start_main. */
  deferMain?: boolean;
}

/**
 * The supervisor's environment for one launch: every SANDGATE_* variable the supervisor reads,
 * each written explicitly (MAIN_TTY as 0 or 1, the debug switches empty when off), so nothing a
 * container image or the host supplies can set or change one. Drivers add only what their
 * runtime lacks (e.g. PATH/HOME for bubblewrap). The sandbox's own variables are not here: a
 * caller could otherwise set LD_PRELOAD or NODE_OPTIONS for the supervisor (and for bwrap, root
 * on the host); the driver writes them to `environmentFile` (renderSandboxEnvironment) and the
 * supervisor gives them to workload processes only.
 */
export function supervisorEnvironment(l: SupervisorLaunch): Record<string, string> {
  const env: Record<string, string> = {};
  const breaks = (l.debugBreaks ?? '').trim();
  env[SupervisorEnv.gateway] = l.gatewayEndpoints;
  env[SupervisorEnv.sandboxId] = l.sandboxId;
  env[SupervisorEnv.credentialFile] = l.credentialFile;
  env[SupervisorEnv.environmentFile] = l.environmentFile ?? '';
  env[SupervisorEnv.mainTty] = l.tty ? '1' : '0';
  env[SupervisorEnv.logLevel] = l.logLevel || 'info';
  env[SupervisorEnv.debugBreaks] = breaks;
  env[SupervisorEnv.debugUnsafe] = breaks ? '1' : '0';
  if (l.workload) {
    env[SupervisorEnv.workloadUid] = String(l.workload.uid);
    env[SupervisorEnv.workloadGid] = String(l.workload.gid);
    env[SupervisorEnv.networkIsolation] = l.workload.isolateNetwork ? '1' : '0';
    env[SupervisorEnv.workloadCgroups] = l.workload.cgroupDirs.join(':');
  }
  env[SupervisorEnv.policy] = l.policy && l.policy.byteLength > 0 ? Buffer.from(l.policy).toString('base64') : '';
  // Written even when empty: an image's ENV must not turn TLS on (or point it at its own CA).
  env[SupervisorEnv.gatewayCaFile] = l.gatewayTls?.caFile ?? '';
  env[SupervisorEnv.gatewayTlsName] = l.gatewayTls?.serverName ?? '';
  // Also written when empty: an image's ENV must not point the supervisor (or Node itself, at its
  // start) at a cache it can write.
  Object.assign(env, compileCacheEnvironment(l.compileCacheDir));
  env[SupervisorEnv.deferMain] = l.deferMain ? '1' : '0';
  return env;
}

/** The supervisor's side of supervisorEnvironment(): the raw facts, not yet checked. */
export interface SupervisorEnvironment {
  endpoints: string[];
  sandboxId: string;
  credentialFile: string;
  /** Path of the sandbox's variables (JSON); absent: none beyond the process environment's. */
  environmentFile?: string;
  mainTty: boolean;
  /** As written; the supervisor's logger maps unknown values to info. */
  logLevel: string;
  /**
   * The process environment minus SANDGATE_* and NODE_COMPILE_CACHE (PATH and HOME from the
   * driver, a container image's ENV): the base the variables of `environmentFile` are laid over,
   * for workload processes.
   */
  sandboxEnv: Record<string, string>;
  /** Absent when the launch set no workload identity (the supervisor's own tests). */
  workload?: WorkloadIsolation;
  /** Policy bytes; empty when none. */
  policy: Buffer;
  /** Path of the gateway's CA (TLS) and the name to verify; absent: plaintext. */
  gatewayTls?: { caFile: string; serverName: string };
  /** The supervisors' compile cache (read-only); absent: none. */
  compileCacheDir?: string;
  /** A warm-pool member: start the main process only on start_main. */
  deferMain: boolean;
}

export function parseEndpoints(value: string | undefined): string[] {
  return (value ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

/** SupervisorEnv.compileCache as the supervisor reads it: undefined when empty (no cache). */
export function compileCacheDirOf(env: Readonly<Record<string, string | undefined>>): string | undefined {
  return (env[SupervisorEnv.compileCache] ?? '').trim() || undefined;
}

/** The contents of a launch's `environmentFile`: the sandbox's variables, SANDGATE_* names dropped. */
export function renderSandboxEnvironment(environment: Readonly<Record<string, string>>): string {
  return JSON.stringify(withoutSupervisorEnv(environment));
}

/** The supervisor's side of renderSandboxEnvironment(); throws on anything else. */
export function parseSandboxEnvironment(text: string): Record<string, string> {
  const parsed: unknown = JSON.parse(text);
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('the sandbox environment file holds no JSON object');
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(parsed)) {
    if (typeof v !== 'string') throw new Error(`the sandbox environment file gives ${k} a non-string value`);
    if (!k.startsWith(SupervisorEnv.prefix)) out[k] = v;
  }
  return out;
}

/** Drops every SANDGATE_* variable (they are the supervisor's, never the sandbox's) and the names in `alsoDrop`. */
export function withoutSupervisorEnv(env: Readonly<Record<string, string | undefined>>, alsoDrop: readonly string[] = []): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) {
    if (v === undefined || k.startsWith(SupervisorEnv.prefix) || alsoDrop.includes(k)) continue;
    out[k] = v;
  }
  return out;
}

export function parseSupervisorEnvironment(env: Readonly<Record<string, string | undefined>>): SupervisorEnvironment {
  return {
    endpoints: parseEndpoints(env[SupervisorEnv.gateway]),
    sandboxId: (env[SupervisorEnv.sandboxId] ?? '').trim(),
    credentialFile: env[SupervisorEnv.credentialFile] ?? '',
    environmentFile: (env[SupervisorEnv.environmentFile] ?? '').trim() || undefined,
    mainTty: env[SupervisorEnv.mainTty] === '1',
    logLevel: (env[SupervisorEnv.logLevel] ?? '').trim(),
    sandboxEnv: withoutSupervisorEnv(env, [NODE_COMPILE_CACHE_VAR]),
    workload: parseWorkload(env),
    policy: Buffer.from(env[SupervisorEnv.policy] ?? '', 'base64'),
    gatewayTls: (env[SupervisorEnv.gatewayCaFile] ?? '').trim()
      ? { caFile: env[SupervisorEnv.gatewayCaFile]!.trim(), serverName: (env[SupervisorEnv.gatewayTlsName] ?? '').trim() }
      : undefined,
    compileCacheDir: compileCacheDirOf(env),
    deferMain: env[SupervisorEnv.deferMain] === '1',
  };
}

function parseWorkload(env: Readonly<Record<string, string | undefined>>): WorkloadIsolation | undefined {
  const uid = env[SupervisorEnv.workloadUid];
  const gid = env[SupervisorEnv.workloadGid];
  if (uid === undefined && gid === undefined) return undefined;
  const id = (name: string, v: string | undefined) => {
    const n = Number(v);
    if (!/^\d+$/.test(v ?? '') || !Number.isSafeInteger(n) || n <= 0 || n >= 4294967295) {
      throw new Error(`${name} must be a numeric id other than 0 (got ${JSON.stringify(v)})`);
    }
    return n;
  };
  return {
    uid: id(SupervisorEnv.workloadUid, uid),
    gid: id(SupervisorEnv.workloadGid, gid),
    isolateNetwork: env[SupervisorEnv.networkIsolation] === '1',
    cgroupDirs: (env[SupervisorEnv.workloadCgroups] ?? '').split(':').filter((d) => d.length > 0),
  };
}

/**
 * The one loopback rule for forwarded TCP (gateway and supervisor alike): a target must be the
 * sandbox's own loopback. `localhost` becomes 127.0.0.1; 127.0.0.0/8 passes as written; `::1`
 * (any spelling) becomes `::1`; an IPv4-mapped `::ffff:127.x.y.z` becomes `127.x.y.z`; brackets
 * are dropped. Anything else, names included (they would need a resolver we do not trust), is null.
 */
export function loopbackHost(raw: string): string | null {
  let host = raw.trim();
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1);
  const lower = host.toLowerCase();
  if (lower === 'localhost') return '127.0.0.1';
  const family = isIP(host);
  if (family === 4) return host.split('.')[0] === '127' ? host : null;
  if (family !== 6) return null;
  const groups = ipv6Groups(lower);
  if (!groups) return null;
  if (groups.slice(0, 7).every((g) => g === 0) && groups[7] === 1) return '::1';
  // IPv4-mapped (::ffff:a.b.c.d, also written in hex): loopback when a is 127.
  if (groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff && groups[6]! >> 8 === 127) {
    return [groups[6]! >> 8, groups[6]! & 0xff, groups[7]! >> 8, groups[7]! & 0xff].join('.');
  }
  return null;
}

/** The eight 16-bit groups of an IPv6 literal that isIP() accepted (zone ids refused), or null. */
function ipv6Groups(lower: string): number[] | null {
  if (lower.includes('%')) return null;
  let text = lower;
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.includes('::') ? text.split('::') : [text, undefined];
  const parse = (s: string | undefined) => (s ? s.split(':').map((g) => parseInt(g, 16)) : []);
  const h = parse(head);
  const t = parse(tail);
  const all = tail === undefined ? h : [...h, ...new Array<number>(8 - h.length - t.length).fill(0), ...t];
  return all.length === 8 && all.every((g) => Number.isInteger(g) && g >= 0 && g <= 0xffff) ? all : null;
}
