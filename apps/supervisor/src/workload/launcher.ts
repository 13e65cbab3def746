// How every workload process (main, execs, SSH shells, sftp) is started when the sandbox is
// confined: through one fixed wrapper, so no spawn site can forget a step.
//
//   /bin/bash -c SCRIPT sandgate-workload <netns> <uid> <gid> <cgroup dirs> <nsenter> <setpriv> env -i -- K=V... argv...
//
// The wrapper is the spawned process itself (same pid, so process groups, PTY sessions, signals
// and exit statuses are exactly the command's: every step execs the next). As root it joins the
// workload cgroups *before* anything can fork (a move after the spawn would leave early children
// outside the limits), raises its own oom_score_adj (when the sandbox's memory runs out, the
// kernel must pick a workload process, never the supervisor), enters the sandbox's network
// namespace and drops to the workload's uid/gid with no supplementary groups and no_new_privs
// (setpriv also sets the saved uid, so there is no way back to root).
//
// Descriptors: Node opens its own close-on-exec, but node-pty's terminal masters are not, so a
// process started while another exec's terminal is open would hold that terminal (read what is
// typed into it, type into it). The wrapper closes everything above 2 first; this needs bash
// (dash cannot name descriptors above 9), which every supported image has; with only a POSIX sh
// those descriptors stay open.
//
// The root part runs with a fixed, minimal environment: the workload's environment is
// attacker-influenced (LD_PRELOAD or LD_LIBRARY_PATH pointing at a file the workload wrote would
// otherwise run its code as root inside the wrapper, nsenter or setpriv). The real environment is
// installed by `env -i` only after the uid drop. Tools are called by absolute path for the same
// reason (a workload PATH must not pick them).
//
// The same steps in one execve: native/sandgate-launch.c, built at `npm install`. Each exec of the
// chain costs a process start (BENCHMARKS.md, "Where a workload process's start goes"), so the
// helper is used whenever it was built; the chain remains for a checkout built without a C
// compiler, and the supervisor's log says which one runs (`launcher`).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { WorkloadIsolation } from '@sandgate/protocols';
import { EXEC_ID_ENV } from '../config.ts';
import { loadNativeSpawn, type PipedChild } from './native-spawn.ts';
import { loadNativePty, type NativePtySpawn, type Terminal, type TerminalOptions } from './native-pty.ts';
import { SpareWrapper } from './spare.ts';

export const WRAPPER_NAME = 'sandgate-workload';
/** The native wrapper (native/build.sh builds it), where this checkout keeps it. */
export const NATIVE_LAUNCHER = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../native/build/sandgate-launch');
/** The exit status when the wrapper could not confine the process (it then never runs it). */
export const EXIT_CONFINE_FAILED = 125;
export const SAFE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
/** Higher than the supervisor's 0: the OOM killer takes workload processes first. */
export const WORKLOAD_OOM_SCORE_ADJ = 500;

/** The proxy variables every confined process gets unless its own environment sets them. */
export const PROXY_ENV_NAMES = ['HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY', 'http_proxy', 'https_proxy', 'all_proxy'] as const;
export const NO_PROXY_VALUE = '127.0.0.1,localhost,::1';

// $1 netns path ('' = stay), $2 uid, $3 gid, $4 cgroup dirs joined by ':', $5 nsenter, $6 setpriv.
const SCRIPT = [
  'if [ -n "${BASH_VERSION-}" ]; then',
  '  for fd in /proc/$$/fd/*; do fd=${fd##*/}; case $fd in 0|1|2) ;; *) eval "exec $fd>&-" ;; esac; done',
  'fi',
  'set -f',
  'ns=$1 uid=$2 gid=$3 cgs=$4 nsenter=$5 setpriv=$6',
  'shift 6',
  'IFS=:',
  'for d in $cgs; do',
  `  echo $$ > "$d/cgroup.procs" || { echo "sandgate: cannot join the workload cgroup $d" >&2; exit ${EXIT_CONFINE_FAILED}; }`,
  'done',
  `echo ${WORKLOAD_OOM_SCORE_ADJ} > /proc/self/oom_score_adj || exit ${EXIT_CONFINE_FAILED}`,
  'if [ -n "$ns" ]; then',
  '  exec "$nsenter" --net="$ns" -- "$setpriv" --reuid="$uid" --regid="$gid" --clear-groups --no-new-privs -- "$@"',
  'fi',
  'exec "$setpriv" --reuid="$uid" --regid="$gid" --clear-groups --no-new-privs -- "$@"',
].join('\n');

export interface LaunchCommand {
  file: string;
  args: string[];
  env: Record<string, string>;
}

/** Turns an argv and its environment into the command that runs it confined (or as is). */
export interface WorkloadLauncher {
  command(argv: string[], env: Record<string, string>): LaunchCommand;
  /** The workload's OOM-kill count so far (summed over its memory cgroups); undefined if unknown. */
  oomKills(): number | undefined;
  /** The name confined processes run under, for USER/LOGNAME where the sandbox sets none. */
  readonly userName: string;
  /** Whose permissions the preflight checks (the workload's, not the supervisor's). */
  readonly identity: { uid: number; gid: number };
  /** How processes are confined, for the log: the native wrapper's path, or `shell chain`. */
  readonly kind: string;
  /**
   * The command started in a wrapper that was waiting for it (spare.ts), in `cwd`: the process,
   * already running; null when none is ready (spawn `command()` then). When spares start
   * through posix_spawn, one is started on the spot if none waits. Pipes only: a process on a
   * terminal is started by startTerminal.
   */
  startInSpare?(argv: string[], env: Record<string, string>, cwd: string): PipedChild | null;
  /**
   * The command started confined on a new terminal through posix_spawn (native-pty.ts), without
   * forking the supervisor; null when this launcher cannot (no native wrapper or addon): node-pty
   * forks it then. Throws when the process could not be started.
   */
  startTerminal?(argv: string[], env: Record<string, string>, opts: TerminalOptions): Terminal | null;
  /** Stops keeping a spare wrapper (shutdown). */
  close?(): void;
}

/** Finds a tool by absolute path (never through the workload's PATH); throws naming what is missing. */
export function findTool(name: string): string {
  for (const dir of SAFE_PATH.split(':')) {
    const file = `${dir}/${name}`;
    try {
      fs.accessSync(file, fs.constants.X_OK);
      return file;
    } catch {
      // next
    }
  }
  throw new Error(`${name} not found in ${SAFE_PATH}: it is needed to confine workload processes (util-linux)`);
}

function executable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The file of `dir` that counts OOM kills (v2 memory.events, v1 memory.oom_control), if any. */
function oomCounterFile(dir: string): string | undefined {
  for (const name of ['memory.events', 'memory.oom_control']) {
    if (readOomCounter(`${dir}/${name}`) !== undefined) return `${dir}/${name}`;
  }
  return undefined;
}

/** `oom_kill N` of such a file. */
function readOomCounter(file: string): number | undefined {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
  const m = /^oom_kill (\d+)$/m.exec(text);
  return m ? Number(m[1]) : undefined;
}

export class ConfinedLauncher implements WorkloadLauncher {
  readonly userName = 'sandbox';
  readonly identity: { uid: number; gid: number };
  private readonly isolation: WorkloadIsolation;
  /** The workload cgroups' OOM-kill counter files, found at the first oomKills(). */
  private oomFiles: string[] | undefined;
  private readonly netnsPath: string;
  private readonly proxyPort: number | undefined;
  private readonly tools: { sh: string; nsenter: string; setpriv: string; env: string };
  /** The native wrapper, or null: the shell chain. */
  private readonly native: string | null;
  /** The native wrapper started ahead of need; null with the shell chain. */
  private readonly spare: SpareWrapper | null;
  /** Terminals started through posix_spawn (the addon), or null: node-pty. */
  private readonly nativePty: NativePtySpawn | null;
  readonly kind: string;

  /**
   * `netnsPath` and `proxyPort` are set when the network is isolated. `nativeLauncher`: the
   * native wrapper to use if it is executable (null: always the shell chain).
   */
  constructor(isolation: WorkloadIsolation, network?: { netnsPath: string; proxyPort: number }, nativeLauncher: string | null = NATIVE_LAUNCHER) {
    this.isolation = isolation;
    this.identity = { uid: isolation.uid, gid: isolation.gid };
    this.netnsPath = network?.netnsPath ?? '';
    this.proxyPort = network?.proxyPort;
    this.native = nativeLauncher !== null && executable(nativeLauncher) ? nativeLauncher : null;
    this.kind = this.native ?? 'shell chain';
    this.tools = {
      sh: executable('/bin/bash') ? '/bin/bash' : '/bin/sh',
      nsenter: network ? findTool('nsenter') : '',
      setpriv: findTool('setpriv'),
      env: findTool('env'),
    };
    // Checked once here so a driver mistake stops the sandbox at start, not every exec with 125.
    for (const d of isolation.cgroupDirs) {
      if (d.includes(':')) throw new Error(`workload cgroup directory ${JSON.stringify(d)} contains ':'`);
      try {
        fs.accessSync(`${d}/cgroup.procs`, fs.constants.W_OK);
      } catch (err) {
        throw new Error(`workload cgroup ${d} cannot be joined: ${(err as Error).message}`);
      }
    }
    this.spare = this.native ? new SpareWrapper(this.native, { PATH: SAFE_PATH }, loadNativeSpawn()) : null;
    this.nativePty = this.native ? loadNativePty() : null;
  }

  /** How terminals are started, for the log: `posix_spawn` (the addon) or `node-pty` (a fork). */
  get ptySpawner(): string {
    return this.nativePty ? 'posix_spawn' : 'node-pty';
  }

  /** How spare wrappers are started, for the log: `posix_spawn`, `node`, or `none` (the shell chain keeps no spare). */
  get spareSpawner(): string {
    return this.spare?.spawner ?? 'none';
  }

  /** Keeps a wrapper waiting from now on (startWorkload), so even the first exec finds one. */
  keepSpareReady(): void {
    this.spare?.fill();
  }

  /** The environment a confined process sees: the proxy variables unless the sandbox set its own. */
  workloadEnv(env: Record<string, string>): Record<string, string> {
    if (this.proxyPort === undefined) return env;
    const out = { ...env };
    const proxy = `http://127.0.0.1:${this.proxyPort}`;
    for (const name of PROXY_ENV_NAMES) out[name] ??= proxy;
    out.NO_PROXY ??= NO_PROXY_VALUE;
    out.no_proxy ??= NO_PROXY_VALUE;
    return out;
  }

  /** The workload's environment as the wrapper's K=V arguments. */
  private assignments(env: Record<string, string>): string[] {
    return (
      Object.entries(this.workloadEnv(env))
        // env(1) could not tell a name containing '=' from the value, nor pass a NUL.
        .filter(([k, v]) => k !== '' && !k.includes('=') && !k.includes('\0') && !v.includes('\0'))
        .map(([k, v]) => `${k}=${v}`)
    );
  }

  command(argv: string[], env: Record<string, string>): LaunchCommand {
    const assignments = this.assignments(env);
    const { uid, gid, cgroupDirs } = this.isolation;
    const wrapperEnv: Record<string, string> = { PATH: SAFE_PATH };
    // The exec tag on the wrapper too, so a kill between spawn and exec still finds it.
    if (env[EXEC_ID_ENV]) wrapperEnv[EXEC_ID_ENV] = env[EXEC_ID_ENV];
    if (this.native) return { file: this.native, args: this.nativeArgs(argv, assignments), env: wrapperEnv };
    // env(1) would take a command name containing '=' for one more assignment: let a shell exec it.
    const tail = argv[0]?.includes('=') ? ['/bin/sh', '-c', 'exec "$@"', 'sh', ...argv] : argv;
    return {
      file: this.tools.sh,
      args: [
        '-c',
        SCRIPT,
        WRAPPER_NAME,
        this.netnsPath,
        String(uid),
        String(gid),
        cgroupDirs.join(':'),
        this.tools.nsenter,
        this.tools.setpriv,
        this.tools.env,
        '-i',
        '--',
        ...assignments,
        ...tail,
      ],
      env: wrapperEnv,
    };
  }

  startInSpare(argv: string[], env: Record<string, string>, cwd: string): PipedChild | null {
    // A spare has no exec tag in its own environment (it was started before the exec): until its
    // exec of the command, which gets the tag, it is found by its process group, which it leads
    // and cannot leave (it runs no code of the workload's before that exec).
    if (!this.spare) return null;
    const started = this.spare.take(cwd, () => this.nativeArgs(argv, this.assignments(env)));
    if (!started) this.spare.fill(); // none was ready: there is one for the next exec
    return started;
  }

  startTerminal(argv: string[], env: Record<string, string>, opts: TerminalOptions): Terminal | null {
    if (!this.nativePty || !this.native) return null;
    const cmd = this.command(argv, env);
    return this.nativePty(cmd.file, [cmd.file, ...cmd.args], cmd.env, opts);
  }

  close(): void {
    this.spare?.close();
  }

  /** NETNS UID GID CGROUP_DIRS -- K=V... -- ARGV: the second `--` ends the environment, so a command name containing '=' needs nothing special. */
  private nativeArgs(argv: string[], assignments: string[]): string[] {
    const { uid, gid, cgroupDirs } = this.isolation;
    return [this.netnsPath, String(uid), String(gid), cgroupDirs.join(':'), '--', ...assignments, '--', ...argv];
  }

  oomKills(): number | undefined {
    // Every exec reads this at its start. Which of the workload's cgroup directories has a
    // counter (only the memory hierarchy) is found once: looking in each of them, with a
    // failed open and its exception per miss, was 2 % of the supervisor's time per exec.
    this.oomFiles ??= this.isolation.cgroupDirs.map(oomCounterFile).filter((f) => f !== undefined);
    let total: number | undefined;
    for (const file of this.oomFiles) {
      const n = readOomCounter(file);
      if (n !== undefined) total = (total ?? 0) + n;
    }
    return total;
  }
}

/** The line an exec's stderr gets when the OOM killer ended it. */
export const OOM_MESSAGE = "sandgate: killed by the out-of-memory killer (the sandbox's memory limit)\n";

/** Whether a SIGKILL death was the OOM killer's: the workload's OOM count rose since `before`. */
export function oomKilled(launcher: WorkloadLauncher | undefined, before: number | undefined, signal: number | null): boolean {
  if (!launcher || signal !== 9 || before === undefined) return false;
  const now = launcher.oomKills();
  return now !== undefined && now > before;
}
