// Builds the Docker container definition for one sandbox. Pure functions: the docker driver does
// the I/O, so what a sandbox container looks like (mounts, environment, limits, labels) can be
// read and unit-tested in one place.
import path from 'node:path';
import type Dockerode from 'dockerode';
import type { LaunchSpec } from '../driver.ts';

/** Every container and volume sandgate makes carries these labels. */
export const LABEL_MANAGED = 'sandgate.managed';
export const LABEL_SANDBOX_ID = 'sandgate.sandbox-id';
export const LABEL_DRIVER = 'sandgate.driver';

/** Where the supervisor's runtime appears inside every sandbox container (all read-only). */
export const NODE_IN_CONTAINER = '/opt/sandgate/node/bin/node';
export const APP_IN_CONTAINER = '/opt/sandgate/app';
export const CREDENTIAL_IN_CONTAINER = '/run/sandgate/credential';
/** The sandbox's persistent work directory (a named volume) and the main process's cwd. */
export const SANDBOX_DIR = '/sandbox';

export const DEFAULT_IMAGE = 'sandgate-sandbox:latest';
export const DEFAULT_PIDS_LIMIT = 4096;
/** docker stop's grace period: longer than the supervisor's own 10 s shutdown deadline. */
export const STOP_TIMEOUT_S = 15;

export interface DockerResources {
  /** CPU cores (fractions allowed), as `docker run --cpus`. */
  cpus?: number;
  /** Memory limit in bytes; swap is not allowed on top of it. */
  memoryBytes?: number;
  /** Maximum number of processes/threads in the container. Default 4096. */
  pids?: number;
}

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

export function assertResources(r: DockerResources | undefined, what: string): void {
  if (!r) return;
  const check = (k: keyof DockerResources, integer: boolean) => {
    const v = r[k];
    if (v === undefined) return;
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0 || (integer && !Number.isSafeInteger(v))) {
      throw new Error(`${what}.${k} must be a positive ${integer ? 'integer' : 'number'} (got ${JSON.stringify(v)})`);
    }
  };
  check('cpus', false);
  check('memoryBytes', true);
  check('pids', true);
  // Docker refuses memory limits below 6 MiB; say so before it does, in our words.
  if (r.memoryBytes !== undefined && r.memoryBytes < 6 * 1024 * 1024) {
    throw new Error(`${what}.memoryBytes must be at least 6 MiB (got ${r.memoryBytes})`);
  }
}

/**
 * The supervisor's environment contract, as Docker `Env` entries. Docker merges these over the
 * image's own ENV (same name: ours wins), so the order is: the sandbox's variables, minus any
 * SANDGATE_* name, then every SANDGATE_* variable the supervisor reads, each set explicitly, so
 * an image's ENV can neither supply nor change any of them (SANDGATE_MAIN_TTY is written as 0 too).
 * The credential is never here: only the path of its file.
 */
export function buildContainerEnv(spec: LaunchSpec): string[] {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(spec.environment)) {
    if (!k.startsWith('SANDGATE_')) env[k] = v;
  }
  env.SANDGATE_GATEWAY = spec.gatewayEndpoints;
  env.SANDGATE_SANDBOX_ID = spec.sandboxId;
  env.SANDGATE_CREDENTIAL_FILE = CREDENTIAL_IN_CONTAINER;
  env.SANDGATE_MAIN_TTY = spec.tty ? '1' : '0';
  env.SANDGATE_LOG_LEVEL = spec.logLevel || 'info';
  if (spec.debugBreaks) Object.assign(env, { SANDGATE_DEBUG_BREAK: spec.debugBreaks, SANDGATE_DEBUG_UNSAFE: '1' });
  return Object.entries(env).map(([k, v]) => `${k}=${v}`);
}

export interface ContainerLaunch {
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
  resources: DockerResources;
}

/** The body of `POST /containers/create`. */
export function buildContainerCreateOptions(l: ContainerLaunch): Dockerode.ContainerCreateOptions {
  const id = l.spec.sandboxId;
  const r = l.resources;
  const hostConfig: Dockerode.HostConfig = {
    // Docker's init (tini) is PID 1: it reaps zombies and forwards signals to the supervisor.
    Init: true,
    // sandgate owns restarts; a container that Docker restarted behind its back would confuse it.
    RestartPolicy: { Name: 'no' },
    // Only loopback is reachable here and the supervisor dials the gateway on 127.0.0.1.
    NetworkMode: 'host',
    Mounts: [
      { Type: 'bind', Source: l.nodeHostPath, Target: NODE_IN_CONTAINER, ReadOnly: true },
      { Type: 'bind', Source: l.appHostPath, Target: APP_IN_CONTAINER, ReadOnly: true },
      { Type: 'bind', Source: l.credentialHostPath, Target: CREDENTIAL_IN_CONTAINER, ReadOnly: true },
      // Created (labelled) by the driver beforehand; an image's files at /sandbox are copied in.
      { Type: 'volume', Source: volumeName(id), Target: SANDBOX_DIR },
    ],
    PidsLimit: r.pids ?? DEFAULT_PIDS_LIMIT,
    // The supervisor logs to stdout; bounded, and json-file so failureReason can read it back.
    LogConfig: { Type: 'json-file', Config: { 'max-size': '10m', 'max-file': '2' } },
  };
  if (r.cpus !== undefined) hostConfig.NanoCpus = Math.round(r.cpus * 1e9);
  if (r.memoryBytes !== undefined) {
    hostConfig.Memory = r.memoryBytes;
    hostConfig.MemorySwap = r.memoryBytes;
  }
  return {
    name: containerName(id),
    Image: l.image,
    Entrypoint: [NODE_IN_CONTAINER, path.posix.join(APP_IN_CONTAINER, l.supervisorRelPath), '--'],
    Cmd: l.command,
    Env: buildContainerEnv(l.spec),
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

/** `uid[:gid]` from an image's USER when it is numeric; null for names or when unset. */
export function numericImageUser(user: string | undefined): { uid: number; gid: number } | null {
  const m = /^(\d+)(?::(\d+))?$/.exec((user ?? '').trim());
  if (!m) return null;
  const uid = Number(m[1]);
  return { uid, gid: m[2] !== undefined ? Number(m[2]) : uid };
}
