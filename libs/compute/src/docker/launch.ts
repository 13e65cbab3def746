// Builds the Docker container definition for one sandbox. Pure functions: the docker driver does
// the I/O, so what a sandbox container looks like (mounts, environment, limits, labels) can be
// read and unit-tested in one place.
import path from 'node:path';
import type Dockerode from 'dockerode';
import { compileCacheEnvironment, SANDBOX_COMPILE_CACHE_PATH, SANDBOX_CREDENTIAL_PATH, SANDBOX_ENVIRONMENT_PATH, SANDBOX_GATEWAY_CA_PATH, type WorkloadIsolation } from '@sandgate/protocols/contract';
import { CONFINEMENT_CAPABILITIES, DEFAULT_PIDS_LIMIT, SUPERVISOR_NODE_FLAGS, supervisorEnvironmentFor, type LaunchSpec, type ResourceLimits } from '../driver.ts';
import type { WorkloadCgroup } from './cgroups.ts';

/** Every container and volume sandgate makes carries these labels. */
export const LABEL_MANAGED = 'sandgate.managed';
export const LABEL_SANDBOX_ID = 'sandgate.sandbox-id';
export const LABEL_DRIVER = 'sandgate.driver';
/**
 * On an image: `UID:GID`, the owner its /sandbox directory already has (scripts/build-sandbox-image.sh
 * sets it on the default image). Docker fills a new volume from the image's directory, owner
 * included, so for a workload of that uid:gid the driver need not give /sandbox away itself.
 * The image builder's promise: a wrong label only leaves /sandbox unwritable to that image's
 * workloads, never writable to anyone else.
 */
export const LABEL_SANDBOX_OWNER = 'sandgate.sandbox-owner';

/** Where the supervisor's runtime appears inside every sandbox container (all read-only). */
export const NODE_IN_CONTAINER = '/opt/sandgate/node/bin/node';
export const APP_IN_CONTAINER = '/opt/sandgate/app';
/** The sandbox's persistent work directory (a named volume) and the main process's cwd. */
export const SANDBOX_DIR = '/sandbox';

export const DEFAULT_IMAGE = 'sandgate-sandbox:latest';
/** docker stop's grace period: longer than the supervisor's own 10 s shutdown deadline. */
export const STOP_TIMEOUT_S = 15;

/**
 * What the supervisor (root inside the container, never the workload) may do, and nothing else:
 * every other capability Docker grants by default is dropped. Workload processes start through
 * the supervisor's wrapper (nsenter + setpriv --no-new-privs to a non-root uid), so they hold none.
 */
export const SUPERVISOR_CAPABILITIES = [
  ...CONFINEMENT_CAPABILITIES,
  // /proc/<pid>/environ of workload processes is their own 0400 file: with the ptrace check, its
  // mode also refuses a root without this. Read-only: unlike CAP_DAC_OVERRIDE it never lets the
  // supervisor write the workload's files.
  'CAP_DAC_READ_SEARCH',
] as const;

/**
 * The supervisor's oom_score_adj (Docker sets it on the container's first process; everything the
 * supervisor starts inherits it): 0, the neutral value, while the workload wrapper raises every
 * workload process to +500, so the kernel's OOM killer (rss + adj × limit / 1000 inside the
 * container's memory cgroup) prefers workload processes. Not negative: lowering an adj below 0
 * needs CAP_SYS_RESOURCE in the engine, which engines running inside a container (CI, this
 * project's own test machine) lack, and runc then fails every start ("can't get final child's
 * PID from pipe"). +500 against 0 still leaves a supervisor whose rss exceeds half the memory
 * limit the likelier victim: limits below ~2× the supervisor's rss (≈ 100 MiB) are tight.
 */
export const SUPERVISOR_OOM_SCORE_ADJ = 0;

export function containerName(sandboxId: string): string {
  // Docker names must start with [A-Za-z0-9]; sandbox ids may start with '.', '_' or '-'.
  return `sandgate-${sandboxId}`;
}

export function volumeName(sandboxId: string): string {
  return `sandgate-${sandboxId}`;
}

export function labelsFor(sandboxId: string): Record<string, string> {
  return { [LABEL_MANAGED]: 'true', [LABEL_SANDBOX_ID]: sandboxId, [LABEL_DRIVER]: 'docker' };
}

/** Docker refuses memory limits below 6 MiB; said before it does, in our words. */
export const MIN_MEMORY_BYTES = 6 * 1024 * 1024;

export function assertLimits(r: ResourceLimits | undefined, what: string): void {
  if (r === undefined) return;
  if (r === null || typeof r !== 'object') throw new Error(`${what} must be an object`);
  for (const k of Object.keys(r)) {
    if (k !== 'cpuMillis' && k !== 'memoryBytes' && k !== 'pids') {
      throw new Error(`${what}.${k} is not a limit the docker driver knows (cpuMillis, memoryBytes, pids)`);
    }
  }
  for (const k of ['cpuMillis', 'memoryBytes', 'pids'] as const) {
    const v = r[k];
    if (v === undefined) continue;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) {
      throw new Error(`${what}.${k} must be a positive integer (got ${JSON.stringify(v)})`);
    }
  }
  if (r.memoryBytes !== undefined && r.memoryBytes < MIN_MEMORY_BYTES) {
    throw new Error(`${what}.memoryBytes must be at least 6 MiB (got ${r.memoryBytes})`);
  }
}

/** The workload's uid/gid: the spec's, else SANDBOX_UID/SANDBOX_GID. Never root. */
export function assertWorkloadUser(u: { uid: number; gid: number }, what: string): void {
  for (const k of ['uid', 'gid'] as const) {
    const v = u[k];
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0 || v >= 4294967295) {
      throw new Error(`${what}.${k} must be a numeric id other than 0 (got ${JSON.stringify(v)})`);
    }
  }
}

/**
 * The supervisor's environment contract, as Docker `Env` entries. Docker merges these over the
 * image's own ENV (same name: ours wins); every SANDGATE_* variable the supervisor reads is written
 * explicitly, so an image's ENV can neither supply nor change one. The credential is never here:
 * only the path of its file.
 */
export function buildContainerEnv(spec: LaunchSpec, workload?: WorkloadIsolation, compileCache = false): string[] {
  // HOME: the workload's own directory (as the local driver does), not Docker's default /root,
  // which the workload's uid cannot read; the sandbox's environment may still set another.
  return Object.entries({ HOME: SANDBOX_DIR, ...supervisorEnvironmentFor(spec, workload, compileCache ? SANDBOX_COMPILE_CACHE_PATH : undefined) }).map(([k, v]) => `${k}=${v}`);
}

/**
 * The body of the one-off container that fills the supervisors' compile cache: `image` (the
 * driver's default: see DockerDriver.compileCache), node and the checkout mounted where a sandbox
 * has them (Node keys the cache by file path), the cache directory writable at
 * SANDBOX_COMPILE_CACHE_PATH. No network, no capability; Docker removes it when it exits.
 */
export function buildCompileCacheFillOptions(f: { image: string; nodeHostPath: string; appHostPath: string; supervisorRelPath: string; cacheHostPath: string }): Dockerode.ContainerCreateOptions {
  return {
    Image: f.image,
    User: '0:0',
    // With the supervisor's own flags: V8 rejects a code cache made under different flags.
    Entrypoint: [NODE_IN_CONTAINER, ...SUPERVISOR_NODE_FLAGS, path.posix.join(APP_IN_CONTAINER, f.supervisorRelPath), '--fill-compile-cache'],
    Cmd: [],
    Env: Object.entries(compileCacheEnvironment(SANDBOX_COMPILE_CACHE_PATH)).map(([k, v]) => `${k}=${v}`),
    // Not `true`: the driver's listings of sandbox containers (reconcile, delete) leave it alone.
    Labels: { [LABEL_MANAGED]: 'compile-cache' },
    HostConfig: {
      AutoRemove: true,
      NetworkMode: 'none',
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges'],
      Mounts: [
        { Type: 'bind', Source: f.nodeHostPath, Target: NODE_IN_CONTAINER, ReadOnly: true },
        { Type: 'bind', Source: f.appHostPath, Target: APP_IN_CONTAINER, ReadOnly: true },
        { Type: 'bind', Source: f.cacheHostPath, Target: SANDBOX_COMPILE_CACHE_PATH, ReadOnly: false },
      ],
      LogConfig: { Type: 'json-file', Config: { 'max-size': '1m', 'max-file': '1' } },
    },
  };
}

export interface ContainerLaunch {
  /** The spec, with gatewayEndpoints as the supervisor on the bridge must dial them. */
  spec: LaunchSpec;
  /** The image actually used (spec.image or the driver's default). */
  image: string;
  /** The main process argv (spec.command, or the image's ENTRYPOINT + CMD when that is empty). */
  command: string[];
  /** Real path on the Docker host of the node binary to bind-mount. */
  nodeHostPath: string;
  /** Real path on the Docker host of the repository root (apps/supervisor + node_modules). */
  appHostPath: string;
  /** Path of the supervisor entry relative to appHostPath. */
  supervisorRelPath: string;
  /** Host path of the 0600 credential file. */
  credentialHostPath: string;
  /** Host path of the 0600 file of the sandbox's variables (renderSandboxEnvironment). */
  environmentHostPath: string;
  /** Host path of the gateway's CA (PEM) when it serves TLS; absent: plaintext. */
  gatewayCaHostPath?: string;
  /** Host directory of the supervisors' compile cache, bound read-only; absent: none. */
  compileCacheHostPath?: string;
  /** The sandbox network (a user-defined bridge, see docker/network.ts). */
  network: string;
  /** Effective limits: the spec's over the driver's defaults. */
  limits: ResourceLimits;
  /**
   * The workload's own cgroups (docker/cgroups.ts), which then carry the limits, under
   * `cgroupParent`. Absent (engines with the systemd cgroup driver): the limits are the
   * container's, the supervisor counted in.
   */
  cgroups?: { parent: string; dirs: WorkloadCgroup[]; hostNamespace: boolean };
  /** The workload's identity and confinement, handed to the supervisor. */
  workload: WorkloadIsolation;
}

/** The body of `POST /containers/create`. */
export function buildContainerCreateOptions(l: ContainerLaunch): Dockerode.ContainerCreateOptions {
  const id = l.spec.sandboxId;
  const r = l.limits;
  const hostConfig: Dockerode.HostConfig = {
    // Docker's init (tini) is PID 1: it reaps zombies and forwards signals to the supervisor.
    Init: true,
    // sandgate owns restarts; a container that Docker restarted behind its back would confuse it.
    RestartPolicy: { Name: 'no' },
    // A bridge of sandgate's own with inter-container traffic off: not the host's loopback (the
    // replicas, Redis) and not another sandbox's ports. See docker/network.ts.
    NetworkMode: l.network,
    CapDrop: ['ALL'],
    CapAdd: [...SUPERVISOR_CAPABILITIES],
    // No setuid binary or file capability in the image can raise a process's privileges; setpriv
    // only ever lowers them, so the supervisor's wrapper works under it.
    SecurityOpt: ['no-new-privileges'],
    OomScoreAdj: SUPERVISOR_OOM_SCORE_ADJ,
    // Nothing else is mounted: no Docker socket, no host directory but these read-only ones.
    Mounts: [
      { Type: 'bind', Source: l.nodeHostPath, Target: NODE_IN_CONTAINER, ReadOnly: true },
      { Type: 'bind', Source: l.appHostPath, Target: APP_IN_CONTAINER, ReadOnly: true },
      // root:root 0600 on the host, and so in the container (no user namespace): the supervisor
      // (root) reads it, the workload's uid cannot.
      { Type: 'bind', Source: l.credentialHostPath, Target: SANDBOX_CREDENTIAL_PATH, ReadOnly: true },
      // The sandbox's variables, root's 0600 too: the supervisor hands them to workload processes;
      // in the container's environment they would act on the supervisor (LD_PRELOAD, NODE_OPTIONS).
      { Type: 'bind', Source: l.environmentHostPath, Target: SANDBOX_ENVIRONMENT_PATH, ReadOnly: true },
      // Public (a CA certificate); read-only so nothing in the container can swap the gateway's trust.
      ...(l.gatewayCaHostPath ? [{ Type: 'bind' as const, Source: l.gatewayCaHostPath, Target: SANDBOX_GATEWAY_CA_PATH, ReadOnly: true }] : []),
      // Compiled code of the supervisor's own (public) modules: nothing secret, read-only.
      ...(l.compileCacheHostPath ? [{ Type: 'bind' as const, Source: l.compileCacheHostPath, Target: SANDBOX_COMPILE_CACHE_PATH, ReadOnly: true }] : []),
      // Created (labelled) by the driver beforehand and chowned to the workload's uid; an image's
      // files at /sandbox are copied in.
      { Type: 'volume', Source: volumeName(id), Target: SANDBOX_DIR },
    ],
    // The supervisor's side: the workload cgroups carry the workload's own pids cap.
    PidsLimit: l.cgroups ? DEFAULT_PIDS_LIMIT : (r.pids ?? DEFAULT_PIDS_LIMIT),
    // The supervisor logs to stdout; bounded, and json-file so failureReason can read it back.
    LogConfig: { Type: 'json-file', Config: { 'max-size': '10m', 'max-file': '2' } },
  };
  if (l.cgroups) {
    // The container (tini, the supervisor, its netns agent) in <parent>/<container id>, the
    // workload's cgroups beside it in <parent>/workload, bound in read-write for the wrapper to
    // join; the limits are written there, so the supervisor stays outside them.
    hostConfig.CgroupParent = l.cgroups.parent;
    for (const d of l.cgroups.dirs) hostConfig.Mounts!.push({ Type: 'bind', Source: d.hostDir, Target: d.containerDir, ReadOnly: false });
    // v2: joining a cgroup outside the container's own cgroup namespace is refused.
    if (l.cgroups.hostNamespace) (hostConfig as Record<string, unknown>).CgroupnsMode = 'host';
  } else {
    if (r.cpuMillis !== undefined) hostConfig.NanoCpus = r.cpuMillis * 1_000_000;
    if (r.memoryBytes !== undefined) {
      hostConfig.Memory = r.memoryBytes;
      // Equal to Memory: no swap on top of the limit (a memory hog is killed, not swapped out).
      hostConfig.MemorySwap = r.memoryBytes;
    }
  }
  return {
    name: containerName(id),
    Image: l.image,
    // The supervisor is root whatever the image's USER says: it confines the workload itself
    // (drops to the workload's uid); a non-root supervisor could not.
    User: '0:0',
    Entrypoint: [NODE_IN_CONTAINER, ...SUPERVISOR_NODE_FLAGS, path.posix.join(APP_IN_CONTAINER, l.supervisorRelPath), '--'],
    Cmd: l.command,
    Env: buildContainerEnv(l.spec, l.workload, l.compileCacheHostPath !== undefined),
    WorkingDir: SANDBOX_DIR,
    Labels: labelsFor(id),
    // The supervisor makes its own PTY (node-pty) for a tty main process; the container has none.
    Tty: false,
    OpenStdin: false,
    AttachStdin: false,
    AttachStdout: false,
    AttachStderr: false,
    StopTimeout: STOP_TIMEOUT_S,
    HostConfig: hostConfig,
  };
}
