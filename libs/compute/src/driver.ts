// The compute driver interface. A driver turns a sandbox record into a running supervisor (and
// its main process) somewhere, and can find, stop and remove it again from any replica: all it
// needs is the sandbox id and the handle it returned at create time (persisted in Redis).
// Shaped so that `local` (bubblewrap processes), `docker` and Kubernetes fit behind it.
import { SANDBOX_CREDENTIAL_PATH, SANDBOX_ENVIRONMENT_PATH, SANDBOX_GATEWAY_CA_PATH, supervisorEnvironment, type WorkloadIsolation } from '@sandgate/protocols/contract';

/** Opaque, JSON-serialisable facts a driver needs to find its compute again (pid, container id…). */
export type ComputeHandle = Record<string, unknown>;

export interface LaunchSpec {
  sandboxId: string;
  /** Main process argv, run without a shell. */
  command: string[];
  tty: boolean;
  /** Environment for the main process and every exec (spec.environment + template.environment). */
  environment: Record<string, string>;
  image: string;
  /** What the supervisor dials: comma-separated gRPC endpoints (a load balancer, or replicas). */
  gatewayEndpoints: string;
  /** Secret the supervisor presents; drivers hand it over as a file, never as an environment variable. */
  credential: string;
  logLevel: string;
  /**
   * Supervisor-side debug faults for this run, as supervisorDebugBreaks() (@sandgate/core)
   * renders them. Absent or empty (always, outside negative chaos runs): none.
   */
  debugBreaks?: string;
  /** Limits the driver enforces on the workload (from template.resources, parsed by the gateway). */
  limits?: ResourceLimits;
  /** SandboxPolicy bytes as stored (spec.policy); absent or empty: no policy, so no egress. */
  policy?: Uint8Array;
  /** The workload's uid/gid (from ProcessPolicy); absent: SANDBOX_UID/SANDBOX_GID. Never 0. */
  workloadUser?: { uid: number; gid: number };
  /**
   * The gateway serves TLS: the PEM CA its certificate chains to, which the driver hands the
   * supervisor as a read-only file (SANDBOX_GATEWAY_CA_PATH), and the name in that certificate the
   * supervisor verifies whatever address it dials (a docker supervisor dials the bridge's IP).
   * Absent: plaintext.
   */
  gatewayTls?: GatewayTls;
  /**
   * A warm-pool member: the supervisor connects and serves, but starts the main process (with the
   * claim's command and environment) only when the gateway sends start_main. `command` is then
   * what an empty start_main runs.
   */
  deferMain?: boolean;
}

export interface GatewayTls {
  ca: string;
  serverName: string;
}

/** Enforced resource limits. An absent field means no limit, except pids (DEFAULT_PIDS_LIMIT). */
export interface ResourceLimits {
  /** CPU in millicores (Kubernetes `500m` = 500, `1` = 1000). */
  cpuMillis?: number;
  memoryBytes?: number;
  /** Most processes/threads the workload may have at once. */
  pids?: number;
  /** Size of the sandbox's writable disk (/sandbox); only drivers with enforcesDiskLimit take it. */
  diskBytes?: number;
}

/** The pids cap when template.resources names none: a fork bomb stops here. */
export const DEFAULT_PIDS_LIMIT = 1024;

/**
 * The supervisor's environment for `spec` (the wire contract's supervisorEnvironment()), the same
 * for every driver; each adds only what its runtime lacks underneath. `workload` is how the driver
 * confines the workload (uid/gid, network namespace, cgroups); absent only in tests of the
 * supervisor alone. `compileCacheDir`: where the driver shows the supervisor's compile cache
 * read-only (SANDBOX_COMPILE_CACHE_PATH), if it has one.
 */
export function supervisorEnvironmentFor(spec: LaunchSpec, workload?: WorkloadIsolation, compileCacheDir?: string): Record<string, string> {
  return supervisorEnvironment({
    workload,
    policy: spec.policy,
    sandboxId: spec.sandboxId,
    gatewayEndpoints: spec.gatewayEndpoints,
    credentialFile: SANDBOX_CREDENTIAL_PATH,
    // Every driver shows the sandbox's variables there (renderSandboxEnvironment), never in the
    // supervisor's own environment.
    environmentFile: SANDBOX_ENVIRONMENT_PATH,
    tty: spec.tty,
    logLevel: spec.logLevel,
    environment: spec.environment,
    debugBreaks: spec.debugBreaks,
    gatewayTls: spec.gatewayTls ? { caFile: SANDBOX_GATEWAY_CA_PATH, serverName: spec.gatewayTls.serverName } : undefined,
    compileCacheDir,
    deferMain: spec.deferMain,
  });
}

export type ComputeState = 'running' | 'stopped' | 'gone';

/** What a sandbox's compute uses right now, as its driver measures it. */
export interface ComputeUsage {
  /** CPU time used since the compute started (supervisor and workload together). */
  cpuSeconds: number;
  /** Memory in use now, page cache the kernel can drop excluded where the driver can tell. */
  memoryBytes: number;
}

export interface ObservedCompute {
  sandboxId: string;
  handle: ComputeHandle;
  state: ComputeState;
}

export interface ComputeDriver {
  readonly name: string;
  /**
   * Whether the driver caps the sandbox's disk (ResourceLimits.diskBytes). The gateway refuses
   * a disk limit for a driver that would not enforce it.
   */
  readonly enforcesDiskLimit: boolean;
  /** Starts provisioning and returns quickly; readiness is the supervisor connecting. */
  create(spec: LaunchSpec): Promise<ComputeHandle>;
  /** Current state of one sandbox's compute. */
  inspect(sandboxId: string, handle: ComputeHandle | null): Promise<ComputeState>;
  /** Stops the sandbox's processes, keeping its filesystem. Idempotent. */
  stop(sandboxId: string, handle: ComputeHandle | null): Promise<void>;
  /**
   * Starts a stopped (or finished) sandbox again on the filesystem it kept: a new supervisor run
   * with a new credential. Returns the new handle.
   */
  start(spec: LaunchSpec, handle: ComputeHandle | null): Promise<ComputeHandle>;
  /** Idempotent. Resolves true if anything existed and was removed. */
  delete(sandboxId: string, handle: ComputeHandle | null): Promise<boolean>;
  /**
   * Why compute that stopped on its own failed, in words a user can act on (e.g. "the image has
   * no glibc"), or null if it did not fail. Optional: drivers without diagnostics omit it.
   */
  failureReason?(sandboxId: string, handle: ComputeHandle | null): Promise<string | null>;
  /** All compute this driver manages on this host/cluster (for reconciliation). */
  list(): Promise<ObservedCompute[]>;
  /**
   * CPU and memory of one sandbox's running compute; null when it is not running (or the driver
   * cannot tell). Cheap enough to call for every owned sandbox every few seconds.
   */
  usage?(sandboxId: string, handle: ComputeHandle | null): Promise<ComputeUsage | null>;
  /** Gives back what the driver keeps ready for later creates (its process is shutting down). */
  close?(): Promise<void>;
}

/**
 * Node flags every driver starts the supervisor with: it runs in every sandbox, so its idle memory
 * is multiplied by their number. A young generation of at most 1 MiB (Node lets it grow to 16+)
 * and one V8 worker thread instead of four: idle PSS 43.5 -> 39.4 MiB, with no measured cost to
 * streamed output (BENCHMARKS.md, "The supervisor's V8 flags"). `gc` exposed: an idle supervisor
 * runs V8's last-resort collection, which gives back the heap's pages an ordinary one keeps
 * (apps/supervisor/src/memory-trim.ts; BENCHMARKS.md, "An idle supervisor's memory").
 * `--use-openssl-ca`: loading node:tls (which node:http2 loads) otherwise parses Node's ~150 bundled
 * root certificates on a thread of its own and keeps them, about 0.7 MiB per idle supervisor. The
 * supervisor always names the gateway's CA, which replaces any roots, so it never uses them
 * (libs/compute/test/supervisor-tls-trust.test.ts attacks that with a CA planted in the system
 * store; BENCHMARKS.md, "The compile cache's entries and the bundled root certificates").
 */
export const SUPERVISOR_NODE_FLAGS = ['--max-semi-space-size=1', '--v8-pool-size=1', '--expose-gc', '--use-openssl-ca'] as const;

/**
 * How long a warm-pool member's launch waits for the supervisors' compile cache to be filled.
 * Nobody waits for a member to start; one started before the fill has ended compiles its modules
 * itself, loads Node's type stripper, and holds several MiB more for its whole life (BENCHMARKS.md,
 * "An idle supervisor's memory"). A caller's create does not wait: its latency counts more.
 */
export const COMPILE_CACHE_WAIT_MS = 15_000;

/** Waits until `filled` settles, at most `maxMs`; never fails (a failed fill only costs speed). */
export async function waitForCompileCache(filled: Promise<unknown>, maxMs = COMPILE_CACHE_WAIT_MS): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([filled.catch(() => undefined), new Promise((resolve) => (timer = setTimeout(resolve, maxMs)))]);
  clearTimeout(timer);
}

/**
 * The capabilities a supervisor needs to confine its workload, whatever runs it (bwrap, a
 * container). Each driver adds one for reading another uid's files; every other capability is
 * dropped, and the workload (another uid, no_new_privs) holds none.
 */
export const CONFINEMENT_CAPABILITIES = [
  // unshare(CLONE_NEWNET) for the netns agent, setns() into its namespace for every workload
  // process (nsenter --net). Docker's default seccomp profile allows both only with this cap.
  'CAP_SYS_ADMIN',
  // Bring `lo` up in the workload's new network namespace (netlink RTM_NEWLINK).
  'CAP_NET_ADMIN',
  // setpriv --reuid/--regid/--clear-groups: become the workload's uid and gid, drop the groups.
  'CAP_SETUID',
  'CAP_SETGID',
  // Signal workload processes (exec/SSH kill, timeouts, stop, restart): they run as another uid.
  'CAP_KILL',
  // /proc/<pid>/environ (the exec tag kill-tree.ts finds escaped exec trees by) and
  // /proc/<pid>/ns/* are guarded by ptrace access checks: another uid's processes, and
  // non-dumpable ones (a workload can make itself so to hide from the scan), need this.
  'CAP_SYS_PTRACE',
] as const;
