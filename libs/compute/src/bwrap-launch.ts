// Builds the bubblewrap command line and the environment for one sandbox. Pure functions: the
// driver does the I/O, so the exact isolation can be read (and unit-tested) in one place.
import path from 'node:path';
import { SANDBOX_COMPILE_CACHE_PATH, SANDBOX_CREDENTIAL_PATH, SANDBOX_ENVIRONMENT_PATH, SANDBOX_GATEWAY_CA_PATH, type WorkloadIsolation } from '@sandgate/protocols/contract';
import { CONFINEMENT_CAPABILITIES, SUPERVISOR_NODE_FLAGS, supervisorEnvironmentFor, type LaunchSpec } from './driver.ts';

/** Where the sandbox sees its own work directory, and uses it as cwd and HOME. */
export const SANDBOX_MOUNT = '/sandbox';
export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** Where the sandbox sees the workload cgroup of a hierarchy (`<dir>/<hierarchy name>`), writable. */
export const SANDBOX_CGROUP_DIR = '/run/sandgate/cgroup';

/** The workload's user name in the sandbox's /etc/passwd and /etc/group. */
export const WORKLOAD_USER_NAME = 'sandbox';

/**
 * The only capabilities the supervisor keeps (it runs as root inside the sandbox). Everything it
 * starts for the workload goes through its wrapper (nsenter + setpriv), which drops to the
 * workload's uid and so loses all of them; bwrap also sets no_new_privs, so nothing the supervisor
 * or the workload execs (setuid binaries, file capabilities) can gain one back.
 */
export const SUPERVISOR_CAPABILITIES = [
  ...CONFINEMENT_CAPABILITIES,
  // Files of another uid: /proc/<pid>/environ is the workload's own 0400 file, and the supervisor
  // checks and starts processes in the workload's files (an exec's cwd, argv[0]: preflight's
  // stat/access, the wrapper's chdir) before it drops to the workload's uid; a workload may make
  // them owner-only (0700), and root without this capability is just "other" for them.
  'CAP_DAC_OVERRIDE',
] as const;

/** Sizes of the sandbox's private /tmp and /dev/shm (tmpfs, so RAM) without a memory limit. */
export const TMP_BYTES = 1024 * 1024 * 1024;
export const SHM_BYTES = 64 * 1024 * 1024;

/**
 * The /tmp and /dev/shm sizes for a sandbox. Their pages are charged to the workload's memory
 * cgroup and can never be reclaimed (there is no swap), so with a memory limit each gets at most
 * a quarter of it: a workload that fills both still has half its memory to run commands in,
 * instead of every later exec being OOM-killed at once.
 */
export function tmpfsSizes(memoryBytes: number | undefined): { tmp: number; shm: number } {
  if (memoryBytes === undefined) return { tmp: TMP_BYTES, shm: SHM_BYTES };
  const quarter = Math.floor(memoryBytes / 4 / 4096) * 4096;
  return { tmp: Math.min(TMP_BYTES, quarter), shm: Math.min(SHM_BYTES, quarter) };
}

/** Top-level host entries the sandbox gets its own version of instead of the host's. */
const PRIVATE_TOP_LEVEL = new Set(['proc', 'dev', 'tmp', 'run', 'sandbox']);

/**
 * Host directories shown empty (a tmpfs with this mode), whatever their permissions on the host:
 * people's and root's homes hold keys, tokens and histories that are no sandbox's business.
 */
const MASKED_TOP_LEVEL = new Map([
  ['root', '0700'],
  ['home', '0755'],
]);

/**
 * The host's /var is not shown: it is the host's state (service data, logs, other runtimes'
 * container filesystems, this driver's own sandbox disks), and mounts come and go under it all the
 * time. bwrap's binds are recursive and it remounts every submount read-only one by one, so a
 * mount that vanished in between (a docker container stopping, another sandbox's disk unmounted)
 * made the launch fail with EINVAL ("Unable to apply mount flags"), and one made after the
 * launch would have shown up read-write. The sandbox gets an empty read-only /var with the usual
 * links, /var/tmp on its own /tmp, and only the package database (for tools that ask what is
 * installed).
 */
const HOST_VAR_SHOWN = ['/var/lib/dpkg'];
const VAR_LINKS: [target: string, link: string][] = [
  ['../run', '/var/run'],
  ['../run/lock', '/var/lock'],
  ['../tmp', '/var/tmp'],
];

/** One entry of the host's `/`, as the driver read it at launch time. */
export interface RootEntry {
  name: string;
  kind: 'dir' | 'file' | 'symlink' | 'other';
  /** Link target, for symlinks. */
  target?: string;
}

export interface BwrapLaunch {
  sandboxId: string;
  /** The workload's memory limit, which sizes /tmp and /dev/shm (tmpfsSizes). */
  memoryBytes?: number;
  /** Real path of the driver's state directory; hidden inside every sandbox. */
  stateRoot: string;
  /** <stateRoot>/sandboxes/<id> */
  sandboxDir: string;
  rootEntries: RootEntry[];
  /** Real path of the node binary that runs the supervisor. */
  nodePath: string;
  /** Real path of the supervisor's entry file (inside one of runtimePaths). */
  supervisorEntry: string;
  /**
   * Real host paths the supervisor needs to run (the node binary, the checkout with its apps/,
   * libs/ and node_modules/), bound read-only at the same path: wherever they live, even under a
   * directory the sandbox gets a private copy of (/tmp, /run).
   */
  runtimePaths: string[];
  command: string[];
  /** The workload cgroup of each hierarchy (host path), bound writable at SANDBOX_CGROUP_DIR/<name>. */
  workloadCgroups: { name: string; hostDir: string }[];
  /**
   * Per cgroup hierarchy: the directory holding every sandbox's cgroups, masked, and this
   * sandbox's own, shown again (read-only) at its real path.
   */
  cgroupTrees: { parentDir: string; sandboxDir: string }[];
  /**
   * Generated /etc/passwd and /etc/group (host paths) naming the workload's user, bound read-only
   * over the host's; absent: the host's are shown as they are.
   */
  identityFiles?: { passwd: string; group: string };
  /** Host path of the gateway's CA (PEM), bound read-only at SANDBOX_GATEWAY_CA_PATH; absent: plaintext. */
  gatewayCaFile?: string;
  /** Host path of the sandbox's variables (renderSandboxEnvironment), bound read-only at SANDBOX_ENVIRONMENT_PATH. */
  environmentFile: string;
  /** Host directory of the supervisor's compile cache, bound read-only at SANDBOX_COMPILE_CACHE_PATH; absent: none. */
  compileCacheDir?: string;
}

export function hostnameFor(sandboxId: string): string {
  return `sandbox-${sandboxId.slice(0, 8)}`;
}

/**
 * Arguments for bwrap (not including the bwrap binary itself).
 *
 * The host root is reproduced read-only entry by entry rather than with `--ro-bind / /`: with the
 * host's `/` itself read-only, bwrap could not create the /sandbox and /run/sandgate mount points
 * (there is no such directory on the host, and creating one there would modify the host). Binding
 * each top-level entry on top of bwrap's own root tmpfs gives the same read-only view of the host,
 * lets us add our mount points, and the root is then remounted read-only.
 *
 * Deliberately absent: `--die-with-parent`. bwrap applies it to itself relative to *its* parent,
 * which is the replica (or a short-lived shim) — the sandbox must outlive both. Deletion instead
 * kills the namespace's PID 1, which takes every process in the namespace with it.
 */
export function buildBwrapArgs(l: BwrapLaunch): string[] {
  const args = [
    '--unshare-pid',
    '--unshare-ipc',
    '--unshare-uts',
    '--hostname',
    hostnameFor(l.sandboxId),
    // We run as root: without this the sandbox keeps every capability and could remount the
    // read-only host filesystems read-write. The supervisor keeps only what confining its
    // workload takes (SUPERVISOR_CAPABILITIES says why each).
    '--cap-drop',
    'ALL',
    ...SUPERVISOR_CAPABILITIES.flatMap((c) => ['--cap-add', c]),
  ];
  let hostVarMasked = false;
  for (const e of [...l.rootEntries].sort((a, b) => a.name.localeCompare(b.name))) {
    if (PRIVATE_TOP_LEVEL.has(e.name) || e.name === '' || e.name.includes('/')) continue;
    const p = `/${e.name}`;
    if (e.kind === 'symlink' && e.target !== undefined) args.push('--symlink', e.target, p);
    else if (e.kind === 'dir' && MASKED_TOP_LEVEL.has(e.name)) args.push('--perms', MASKED_TOP_LEVEL.get(e.name)!, '--tmpfs', p);
    else if (e.kind === 'dir' && e.name === 'var') {
      hostVarMasked = true;
      args.push('--perms', '0755', '--tmpfs', p);
      for (const [target, link] of VAR_LINKS) args.push('--symlink', target, link);
      for (const shown of HOST_VAR_SHOWN) args.push('--ro-bind-try', shown, shown);
    }
    else if (e.kind === 'dir' || e.kind === 'file') args.push('--ro-bind', p, p);
    // Sockets, fifos and devices at the top level are not something a sandbox should reach.
  }
  args.push(
    '--dev',
    '/dev',
    // The writable tmpfs mounts are sized: their pages are RAM, charged to the memory cgroup of
    // whoever writes them only when that cgroup has a limit. /dev/shm is bwrap's /dev tmpfs
    // otherwise (unbounded).
    '--perms',
    '1777',
    '--size',
    String(tmpfsSizes(l.memoryBytes).shm),
    '--tmpfs',
    '/dev/shm',
    '--proc',
    '/proc',
    '--perms',
    '1777',
    '--size',
    String(tmpfsSizes(l.memoryBytes).tmp),
    '--tmpfs',
    '/tmp',
    // A private /run: the host's holds control sockets (docker.sock, dbus, …) that a process
    // running as root could use to escape. Only the resolver's directory is kept, because
    // /etc/resolv.conf is often a symlink into it.
    '--tmpfs',
    '/run',
    '--ro-bind-try',
    '/run/systemd/resolve',
    '/run/systemd/resolve',
  );
  // After the private /tmp and /run (or a checkout there would be invisible), before the state
  // tmpfs (so a state directory inside the checkout stays hidden).
  for (const p of [...new Set(l.runtimePaths)].sort()) args.push('--ro-bind', p, p);
  args.push(
    // Hide the driver's state (every sandbox's credential and work directory).
    '--tmpfs',
    l.stateRoot,
    '--bind',
    path.join(l.sandboxDir, 'work'),
    SANDBOX_MOUNT,
    // root:root 0600 on the host, so inside too: the supervisor (root) reads it, the workload
    // (another uid) cannot.
    '--ro-bind',
    path.join(l.sandboxDir, 'credential'),
    SANDBOX_CREDENTIAL_PATH,
  );
  // root:root 0600 like the credential: the supervisor reads the sandbox's variables from it and
  // hands them to workload processes only.
  args.push('--ro-bind', l.environmentFile, SANDBOX_ENVIRONMENT_PATH);
  // Public (a CA certificate), read-only so nothing in the sandbox can swap the gateway's trust.
  if (l.gatewayCaFile) args.push('--ro-bind', l.gatewayCaFile, SANDBOX_GATEWAY_CA_PATH);
  // Read-only: code cached there runs as the supervisor, so nothing in any sandbox may write it.
  if (l.compileCacheDir) args.push('--ro-bind', l.compileCacheDir, SANDBOX_COMPILE_CACHE_PATH);
  if (l.identityFiles) {
    args.push('--ro-bind', l.identityFiles.passwd, '/etc/passwd', '--ro-bind', l.identityFiles.group, '/etc/group');
  }
  // Writable for the supervisor (root) to move workload processes in; their files are root's
  // 0644, so the workload can neither leave its cgroup nor raise its limits.
  for (const cg of l.workloadCgroups) args.push('--bind', cg.hostDir, sandboxCgroupDir(cg.name));
  // /sys shows the host's cgroup trees (read-only): without this a sandbox could list every
  // other sandbox's id and read its usage. Its own stay where /proc/self/cgroup says, for
  // runtimes that size themselves by their limits (node, the JVM).
  for (const t of l.cgroupTrees) args.push('--tmpfs', t.parentDir, '--ro-bind', t.sandboxDir, t.sandboxDir);
  args.push(
    ...(hostVarMasked ? ['--remount-ro', '/var'] : []),
    '--remount-ro',
    '/',
    '--chdir',
    SANDBOX_MOUNT,
    l.nodePath,
    ...SUPERVISOR_NODE_FLAGS,
    l.supervisorEntry,
    '--',
    ...l.command,
  );
  return args;
}

/**
 * The complete environment of the supervisor (bwrap is spawned with exactly this and passes it
 * on). Nothing comes from the replica's own environment: the contract's environment (the same as
 * the docker driver's) over the PATH and HOME a container image would otherwise supply.
 */
export function buildSandboxEnv(spec: LaunchSpec, workload?: WorkloadIsolation, compileCache = false): Record<string, string> {
  return { PATH: DEFAULT_PATH, HOME: SANDBOX_MOUNT, ...supervisorEnvironmentFor(spec, workload, compileCache ? SANDBOX_COMPILE_CACHE_PATH : undefined) };
}

/** Where the sandbox sees the workload cgroup of the hierarchy called `name`. */
export function sandboxCgroupDir(name: string): string {
  if (name === '' || name.includes('/') || name === '.' || name === '..') throw new Error(`bad cgroup hierarchy name ${JSON.stringify(name)}`);
  return `${SANDBOX_CGROUP_DIR}/${name}`;
}

/**
 * The host's /etc/passwd and /etc/group with the workload's user (`sandbox`, home /sandbox) in
 * place of any entry with its name or id, so `id`, `whoami` and `ls -l` show a name.
 */
export function identityFilesFor(hostPasswd: string, hostGroup: string, uid: number, gid: number): { passwd: string; group: string } {
  const keep = (text: string, id: number) =>
    text
      .split('\n')
      .filter((l) => l.trim() !== '')
      .filter((l) => {
        const f = l.split(':');
        return f[0] !== WORKLOAD_USER_NAME && f[2] !== String(id);
      });
  return {
    passwd: [...keep(hostPasswd, uid), `${WORKLOAD_USER_NAME}:x:${uid}:${gid}:sandgate workload:${SANDBOX_MOUNT}:/bin/sh`].join('\n') + '\n',
    group: [...keep(hostGroup, gid), `${WORKLOAD_USER_NAME}:x:${gid}:`].join('\n') + '\n',
  };
}
