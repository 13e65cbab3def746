// The compute driver interface. A driver turns a sandbox record into a running supervisor (and
// its main process) somewhere, and can find, stop and remove it again from any replica: all it
// needs is the sandbox id and the handle it returned at create time (persisted in Redis).
// Shaped so that `local` (bubblewrap processes), `docker` and Kubernetes fit behind it.

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
  /** Supervisor-side debug faults (comma-separated), negative chaos runs only; empty normally. */
  debugBreaks?: string;
}

export type ComputeState = 'running' | 'stopped' | 'gone';

export interface ObservedCompute {
  sandboxId: string;
  handle: ComputeHandle;
  state: ComputeState;
}

export interface ComputeDriver {
  readonly name: string;
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
}
