// Builds the bubblewrap command line and the environment for one sandbox. Pure functions: the
// driver does the I/O, so the exact isolation can be read (and unit-tested) in one place.
import path from 'node:path';
import type { LaunchSpec } from './driver.ts';

/** Where the sandbox sees its own work directory, and uses it as cwd and HOME. */
export const SANDBOX_MOUNT = '/sandbox';
/** Where the sandbox sees its credential (a read-only bind of a 0600 file). */
export const CREDENTIAL_MOUNT = '/run/sandgate/credential';
export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** Top-level host entries the sandbox gets its own version of instead of the host's. */
const PRIVATE_TOP_LEVEL = new Set(['proc', 'dev', 'tmp', 'run', 'sandbox']);

/** One entry of the host's `/`, as the driver read it at launch time. */
export interface RootEntry {
  name: string;
  kind: 'dir' | 'file' | 'symlink' | 'other';
  /** Link target, for symlinks. */
  target?: string;
}

export interface BwrapLaunch {
  sandboxId: string;
  /** Real path of the driver's state directory; hidden inside every sandbox. */
  stateRoot: string;
  /** <stateRoot>/sandboxes/<id> */
  sandboxDir: string;
  rootEntries: RootEntry[];
  nodePath: string;
  supervisorEntry: string;
  command: string[];
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
    // read-only host filesystems read-write.
    '--cap-drop',
    'ALL',
  ];
  for (const e of [...l.rootEntries].sort((a, b) => a.name.localeCompare(b.name))) {
    if (PRIVATE_TOP_LEVEL.has(e.name) || e.name === '' || e.name.includes('/')) continue;
    const p = `/${e.name}`;
    if (e.kind === 'symlink' && e.target !== undefined) args.push('--symlink', e.target, p);
    else if (e.kind === 'dir' || e.kind === 'file') args.push('--ro-bind', p, p);
    // Sockets, fifos and devices at the top level are not something a sandbox should reach.
  }
  args.push(
    '--dev',
    '/dev',
    '--proc',
    '/proc',
    '--perms',
    '1777',
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
    // Hide the driver's state (every sandbox's credential and work directory).
    '--tmpfs',
    l.stateRoot,
    '--bind',
    path.join(l.sandboxDir, 'work'),
    SANDBOX_MOUNT,
    '--ro-bind',
    path.join(l.sandboxDir, 'credential'),
    CREDENTIAL_MOUNT,
    '--remount-ro',
    '/',
    '--chdir',
    SANDBOX_MOUNT,
    l.nodePath,
    l.supervisorEntry,
    '--',
    ...l.command,
  );
  return args;
}

/**
 * The complete environment of the supervisor (bwrap is spawned with exactly this and passes it
 * on). Nothing comes from the replica's own environment. Defaults first, then the sandbox's
 * variables (which may override PATH/HOME), then the SANDGATE_* contract, which nothing overrides.
 */
export function buildSandboxEnv(spec: LaunchSpec): Record<string, string> {
  const env: Record<string, string> = { PATH: DEFAULT_PATH, HOME: SANDBOX_MOUNT };
  for (const [k, v] of Object.entries(spec.environment)) env[k] = v;
  for (const k of Object.keys(env)) if (k.startsWith('SANDGATE_')) delete env[k];
  env.SANDGATE_GATEWAY = spec.gatewayEndpoints;
  env.SANDGATE_SANDBOX_ID = spec.sandboxId;
  env.SANDGATE_CREDENTIAL_FILE = CREDENTIAL_MOUNT;
  if (spec.tty) env.SANDGATE_MAIN_TTY = '1';
  if (spec.logLevel) env.SANDGATE_LOG_LEVEL = spec.logLevel;
  if (spec.debugBreaks) Object.assign(env, { SANDGATE_DEBUG_BREAK: spec.debugBreaks, SANDGATE_DEBUG_UNSAFE: '1' });
  return env;
}
