// The `local` compute driver: each sandbox is a supervisor process tree on this host, isolated by
// bubblewrap (own PID/IPC/UTS namespaces, read-only host root, private /tmp, /run and /sandbox).
//
// Lifetime: the tree belongs to no replica. bwrap is spawned detached (its own session and process
// group) and unref'd, and without --die-with-parent, so a replica can crash or restart and its
// sandboxes keep running; any replica on the host can later find and delete them from the id and
// the handle alone (or from <stateDir>/sandboxes/<id>/handle.json).
//
// Layout: <stateDir>/sandboxes/<id>/{work/, credential, gateway-ca.pem, passwd, group, supervisor.log, handle.json}
//
// Confinement: the supervisor runs as root with a handful of capabilities (SUPERVISOR_CAPABILITIES)
// and starts every workload process as the workload's uid (spec.workloadUser, default
// SANDBOX_UID), with no capabilities, in a network namespace of its own and in the sandbox's
// workload cgroups (cgroups.ts), which carry the limits. /sandbox belongs to the workload's uid;
// the credential stays root's 0600.
//
// Supervisor delivery: the node binary and the checkout (repoRoot: apps/, libs/, node_modules/)
// are bound read-only at their own paths, explicitly, so a checkout under /tmp or /run (which
// every sandbox gets a private copy of) runs as well as one anywhere else.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { compileCacheEnvironment, renderSandboxEnvironment, SANDBOX_GID, SANDBOX_UID, type WorkloadIsolation } from '@sandgate/protocols/contract';
import { SUPERVISOR_NODE_FLAGS, waitForCompileCache, type ComputeDriver, type ComputeHandle, type ComputeState, type ComputeUsage, type LaunchSpec, type ObservedCompute } from './driver.ts';
import { DEFAULT_DISK_BYTES, mountDisk, unmountDisk } from './disk.ts';
import { DiskSpares } from './disk-spares.ts';
import { buildBwrapArgs, buildSandboxEnv, DEFAULT_PATH, identityFilesFor, SANDBOX_MOUNT, sandboxCgroupDir, type RootEntry } from './bwrap-launch.ts';
import { assertLimits, Cgroups, type SandboxCgroups } from './cgroups.ts';
import { isAlive, isDead, killQuietly, listPids, readCmdline, readPidNamespace, readStat, type ProcStat } from './proc.ts';
import { assertLaunchSpec, assertSandboxId, parseHandle, type LocalHandle } from './validate.ts';
import { tailLines } from './docker/diagnose.ts';

export interface LocalDriverOptions {
  stateDir: string;
  /** Absolute path of apps/supervisor/src/main.ts (run with nodePath inside the sandbox). */
  supervisorEntry: string;
  /**
   * The checkout holding the supervisor's code and dependencies (apps/, libs/, node_modules/),
   * bound read-only into every sandbox; supervisorEntry must be inside it. Default: the npm
   * workspace root above supervisorEntry (else the nearest directory with node_modules).
   */
  repoRoot?: string;
  /** Defaults to process.execPath. */
  nodePath?: string;
  /** Defaults to /usr/bin/bwrap. */
  bwrapPath?: string;
  /**
   * How long the first launch watches for bwrap exiting straight away (a host without user
   * namespaces, bad mounts, missing binaries). Once one launch passed, later ones do not wait:
   * the gateway's launch watch (failureReason) and the reconcile sweep catch a sandbox that dies
   * at start, and every create is that much faster.
   */
  startupCheckMs?: number;
  /** How long delete() waits for the sandbox's processes to disappear before giving up. */
  deleteTimeoutMs?: number;
  /**
   * Give supervisors Node's compile cache of their own code (default true): filled once per driver
   * on the host (`main.ts --fill-compile-cache`), shown to every sandbox read-only. false: every
   * supervisor compiles its code itself (the benchmark's "before").
   */
  compileCache?: boolean;
  /**
   * Path below each cgroup hierarchy's mount where sandboxes get their cgroups (`<parent>/<id>`).
   * Default `sandgate`. Every replica on a host must use the same one (any of them deletes).
   */
  cgroupParent?: string;
  /** The hierarchies to use (for hosts whose layout detection misreads). Default: Cgroups.detect(). */
  cgroups?: Cgroups;
  /**
   * Sandbox disks of the default size kept formatted and mounted for creates (disk-spares.ts),
   * 0 to 64. Default 0: every create makes its own.
   */
  diskSpares?: number;
  /** Told what went wrong in the background (a spare disk that could not be made). */
  warn?: (msg: string, fields: Record<string, unknown>) => void;
}

const HANDLE_FILE = 'handle.json';
const GATEWAY_CA_FILE = 'gateway-ca.pem';
const LOG_FILE = 'supervisor.log';
const ENVIRONMENT_FILE = 'environment.json';
/**
 * Runs before bwrap, as bwrap's own process: writes its pid into the supervisor's cgroups, then
 * execs bwrap, so every process of the sandbox starts inside them (nothing can fork in between).
 * Arguments: the number N of cgroup.procs files, the N files, then bwrap's argv.
 */
const CGROUP_JOIN_SCRIPT =
  'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n - 1)); done; exec "$@"';

export class LocalDriver implements ComputeDriver {
  readonly name = 'local';
  readonly enforcesDiskLimit = true;
  private readonly stateDir: string;
  private readonly supervisorEntry: string;
  private readonly repoRoot: string;
  private readonly nodePath: string;
  private readonly bwrapPath: string;
  private readonly startupCheckMs: number;
  private readonly useCompileCache: boolean;
  /** A launch of this driver passed the start-up check: bwrap works on this host. */
  private launchProven = false;
  private readonly deleteTimeoutMs: number;
  /** Real path of stateDir, resolved once it exists (bwrap mounts need real paths). */
  private stateRoot: string | null = null;
  private runtimePending: Promise<SupervisorRuntime> | null = null;
  private readonly cgroupParent: string;
  private cgroupsCache: Cgroups | null = null;
  private readonly diskSpares: DiskSpares;

  constructor(opts: LocalDriverOptions) {
    if (!opts.stateDir) throw new Error('LocalDriver: stateDir is required');
    if (!path.isAbsolute(opts.supervisorEntry ?? '')) {
      throw new Error(`LocalDriver: supervisorEntry must be an absolute path (got ${JSON.stringify(opts.supervisorEntry)})`);
    }
    this.stateDir = path.resolve(opts.stateDir);
    if (this.stateDir === '/') throw new Error('LocalDriver: stateDir must not be /');
    this.supervisorEntry = opts.supervisorEntry;
    if (opts.repoRoot !== undefined && !path.isAbsolute(opts.repoRoot)) {
      throw new Error(`LocalDriver: repoRoot must be an absolute path (got ${JSON.stringify(opts.repoRoot)})`);
    }
    this.repoRoot = opts.repoRoot ?? checkoutOf(this.supervisorEntry);
    if (!isWithin(this.repoRoot, this.supervisorEntry)) {
      throw new Error(`LocalDriver: supervisorEntry ${this.supervisorEntry} is not inside repoRoot ${this.repoRoot}`);
    }
    this.nodePath = opts.nodePath ?? process.execPath;
    if (!path.isAbsolute(this.nodePath)) throw new Error('LocalDriver: nodePath must be an absolute path');
    this.bwrapPath = opts.bwrapPath ?? '/usr/bin/bwrap';
    this.startupCheckMs = opts.startupCheckMs ?? 200;
    this.useCompileCache = opts.compileCache ?? true;
    this.deleteTimeoutMs = opts.deleteTimeoutMs ?? 5000;
    this.cgroupParent = opts.cgroupParent ?? 'sandgate';
    // Checked now (a bad value is a configuration error); the hierarchies are found at first use.
    new Cgroups([], this.cgroupParent);
    this.cgroupsCache = opts.cgroups ?? null;
    // The state directory is hidden (tmpfs) inside sandboxes, so nothing launched may live in it.
    for (const p of [this.supervisorEntry, this.nodePath, this.repoRoot]) {
      if (isWithin(this.stateDir, p)) throw new Error(`LocalDriver: ${p} is inside stateDir, which sandboxes cannot see`);
    }
    const spares = opts.diskSpares ?? 0;
    if (!Number.isInteger(spares) || spares < 0 || spares > 64) throw new Error(`LocalDriver: diskSpares must be an integer from 0 to 64 (got ${spares})`);
    const warn = opts.warn;
    this.diskSpares = new DiskSpares({
      size: spares,
      root: () => this.root(),
      owner: { uid: SANDBOX_UID, gid: SANDBOX_GID },
      onRefillFailed: warn
        ? (err, retryInMs) => warn('local: a sandbox disk could not be made ready; creates make their own until the next try', { err, retry_in_s: retryInMs / 1000 })
        : undefined,
    });
    // Made once the driver is used (its first create's claim finds none and schedules them): a
    // replica that never creates a local sandbox keeps no disks. Stale spares any driver left
    // are swept from the start.
    this.diskSpares.sweepOnly();
  }

  /** Removes the disks kept ready (a replica shutting down). */
  async close(): Promise<void> {
    await this.diskSpares.close();
  }

  async create(spec: LaunchSpec): Promise<ComputeHandle> {
    const { root, dir } = await this.checkLaunch(spec);
    if (!(await this.claimSpareDisk(spec, dir))) await this.claimDir(spec.sandboxId, dir);
    return this.launch(spec, root, dir, true);
  }

  async stop(sandboxId: string, handle: ComputeHandle | null): Promise<void> {
    assertSandboxId(sandboxId);
    const dir = path.join(await this.root(), 'sandboxes', sandboxId);
    const handles = [parseHandle(handle), await readHandleFile(dir)].filter((h): h is LocalHandle => h !== null);
    await this.killSandbox(dir, handles);
    await this.removeCgroups(sandboxId);
    await unmountDisk(dir);
  }

  async start(spec: LaunchSpec, handle: ComputeHandle | null): Promise<ComputeHandle> {
    const { root, dir } = await this.checkLaunch(spec);
    // A run that is still going (a restart of a finished main process) ends first.
    await this.stop(spec.sandboxId, handle);
    return this.launch(spec, root, dir, false);
  }

  /**
   * Prepares `dir` (work directory, credential, identity files, cgroups) and runs bwrap in it; on
   * failure a fresh sandbox is removed whole.
   */
  private async launch(spec: LaunchSpec, root: string, dir: string, fresh: boolean): Promise<ComputeHandle> {
    let handle: LocalHandle | null = null;
    // Only cgroups this launch made are removed if it fails: one that was refused ("still has
    // processes") belongs to a live sandbox elsewhere.
    let cgroupsMade = false;
    try {
      const user = workloadUser(spec);
      const work = path.join(dir, 'work');
      const environmentFile = path.join(dir, ENVIRONMENT_FILE);
      const gatewayCaFile = path.join(dir, GATEWAY_CA_FILE);
      // The disk (mkfs and a loop mount: two processes), the files and the cgroups do not depend
      // on each other: made side by side. All settle before anything is judged, so a failure's
      // clean-up below never races a mount still being made.
      const [identityFiles, cgroups] = await allSettledOrThrow(
        (async () => {
          // The credential only ever exists as this file; the sandbox sees a read-only bind of it.
          // root:root 0600: readable by the supervisor (root), not by the workload.
          await fsp.rm(path.join(dir, 'credential'), { force: true });
          await fsp.writeFile(path.join(dir, 'credential'), spec.credential, { mode: 0o600, flag: 'wx' });
          await fsp.chown(path.join(dir, 'credential'), 0, 0);
          // The sandbox's variables, for the supervisor to hand to workload processes: a file, never
          // bwrap's environment (bwrap runs as root on the host: LD_PRELOAD there would be an escape).
          await writeAtomic(environmentFile, renderSandboxEnvironment(spec.environment), 0o600);
          // The gateway's CA (public), when it serves TLS: the supervisor verifies the gateway with it.
          await fsp.rm(gatewayCaFile, { force: true });
          if (spec.gatewayTls) await fsp.writeFile(gatewayCaFile, spec.gatewayTls.ca, { mode: 0o644 });
          return writeIdentityFiles(dir, user.uid, user.gid);
        })(),
        (async () => {
          const made = await (await this.cgroups()).create(spec.sandboxId, spec.limits ?? {});
          cgroupsMade = true;
          return made;
        })(),
        (async () => {
          // The workload's home and only writable place: its own filesystem (disk.ts), so filling
          // it cannot fill the host's disk, and its own uid's (set again on every start, since
          // the workload user may differ from the last run's). Only the directory itself: a
          // recursive chown would follow whatever the workload left in it.
          await mountDisk(dir, spec.limits?.diskBytes ?? DEFAULT_DISK_BYTES, user);
          await fsp.lchown(work, user.uid, user.gid);
        })(),
      );
      const workload: WorkloadIsolation = {
        uid: user.uid,
        gid: user.gid,
        // Always: the workload reaches nothing but its own loopback and the egress proxy.
        isolateNetwork: true,
        cgroupDirs: cgroups.workload.map((c) => sandboxCgroupDir(c.name)),
      };
      const rt = await this.runtime();
      if (spec.deferMain && rt.compileCacheFilled) await waitForCompileCache(rt.compileCacheFilled);
      const args = buildBwrapArgs({
        sandboxId: spec.sandboxId,
        memoryBytes: spec.limits?.memoryBytes,
        stateRoot: root,
        sandboxDir: dir,
        rootEntries: await readRootEntries(),
        nodePath: rt.nodePath,
        supervisorEntry: rt.supervisorEntry,
        runtimePaths: rt.paths,
        command: spec.command,
        workloadCgroups: cgroups.workload,
        cgroupTrees: cgroups.trees,
        identityFiles: identityFiles ?? undefined,
        gatewayCaFile: spec.gatewayTls ? gatewayCaFile : undefined,
        compileCacheDir: rt.compileCacheDir ?? undefined,
        environmentFile,
      });
      const child = await this.spawnBwrap(dir, args, buildSandboxEnv(spec, workload, rt.compileCacheDir !== null), cgroups);
      handle = { pid: child.pid!, startTime: startTimeOf(child.pid!), dir };
      // Persist before anything else can fail, so list()/delete() find it even if we crash now.
      await writeJsonAtomic(path.join(dir, HANDLE_FILE), handle);
      if (!this.launchProven) {
        const early = await exitWithin(child, this.startupCheckMs);
        if (early) {
          const tail = await readTail(path.join(dir, LOG_FILE), 2048);
          throw new Error(
            `sandbox ${spec.sandboxId}: launch failed, bwrap exited immediately (${early})${tail ? `: ${tail.trim()}` : ''}`,
          );
        }
        this.launchProven = true;
      }
      return { ...handle };
    } catch (err) {
      // Nothing half-made survives a failed create: kill whatever started and drop the directory.
      // A failed restart keeps the filesystem.
      if (fresh) await this.destroy(dir, handle ? [handle] : [], cgroupsMade).catch(() => {});
      else {
        await this.killSandbox(dir, handle ? [handle] : []).catch(() => false);
        if (cgroupsMade) await this.removeCgroups(spec.sandboxId).catch(() => false);
        await unmountDisk(dir).catch(() => false);
      }
      throw err;
    }
  }

  async inspect(sandboxId: string, handle: ComputeHandle | null): Promise<ComputeState> {
    assertSandboxId(sandboxId);
    const dir = path.join(await this.root(), 'sandboxes', sandboxId);
    const h = parseHandle(handle) ?? (await readHandleFile(dir));
    return h && isAlive(h.pid, h.startTime) ? 'running' : 'gone';
  }

  /**
   * Why the sandbox's processes are gone, for a launch that died before its supervisor connected
   * (the gateway asks only then): the last lines bwrap and the supervisor wrote to the sandbox's
   * log. null while it runs, or when it left nothing to say.
   */
  async failureReason(sandboxId: string, handle: ComputeHandle | null = null): Promise<string | null> {
    assertSandboxId(sandboxId);
    const dir = path.join(await this.root(), 'sandboxes', sandboxId);
    const h = parseHandle(handle) ?? (await readHandleFile(dir));
    if (h && isAlive(h.pid, h.startTime)) return null;
    const tail = tailLines(await readTail(path.join(dir, LOG_FILE), 4096), 6, 1500);
    return tail ? `sandbox processes exited before the supervisor connected: ${tail}` : null;
  }

  async delete(sandboxId: string, handle: ComputeHandle | null): Promise<boolean> {
    assertSandboxId(sandboxId);
    const dir = path.join(await this.root(), 'sandboxes', sandboxId);
    // Both the caller's handle and handle.json: they differ if the id was re-created meanwhile.
    const handles = [parseHandle(handle), await readHandleFile(dir)].filter((h): h is LocalHandle => h !== null);
    return this.destroy(dir, handles);
  }

  async list(): Promise<ObservedCompute[]> {
    const base = path.join(await this.root(), 'sandboxes');
    let entries: fs.Dirent[];
    try {
      entries = await fsp.readdir(base, { withFileTypes: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
    const out: ObservedCompute[] = [];
    for (const e of entries) {
      if (!e.isDirectory()) continue;
      try {
        assertSandboxId(e.name);
      } catch {
        continue;
      }
      const h = await readHandleFile(path.join(base, e.name));
      out.push({
        sandboxId: e.name,
        handle: h ? { ...h } : {},
        state: h && isAlive(h.pid, h.startTime) ? 'running' : 'gone',
      });
    }
    return out;
  }

  /** Kills every process of the sandbox at `dir`, then removes its cgroups and the directory. */
  private async destroy(dir: string, handles: LocalHandle[], withCgroups = true): Promise<boolean> {
    const killed = await this.killSandbox(dir, handles);
    // From the id alone: a crashed replica's leftovers go too, with or without a directory.
    const hadCgroups = withCgroups ? await this.removeCgroups(path.basename(dir)) : false;
    let existed = hadCgroups;
    try {
      await fsp.access(dir);
      existed = true;
    } catch {
      // already gone
    }
    // Unmounted first: removing the directory would otherwise empty the sandbox's filesystem
    // file by file and then fail on the mount point.
    const hadDisk = await unmountDisk(dir);
    if (existed) await fsp.rm(dir, { recursive: true, force: true });
    return existed || killed || hadDisk;
  }

  /**
   * Finds the sandbox's bwrap processes — the outer one (the handle's pid, checked against its
   * start time) and its child, which is PID 1 of the sandbox's PID namespace — and SIGKILLs them.
   * The kernel then kills every other process in that namespace, however it forked or setsid'd.
   * bwrap processes are also recognised by their argv (which binds <dir>/work), so a sandbox is
   * found even without a handle (crash between spawn and handle.json) or if its outer bwrap died.
   * Waits until the bwrap processes are gone (with the namespace's init goes every process in it)
   * and kills anything seen in the namespace meanwhile. Returns true if anything was running.
   */
  private async killSandbox(dir: string, handles: LocalHandle[]): Promise<boolean> {
    const workDir = path.join(dir, 'work');
    const bwrapComm = path.basename(this.bwrapPath).slice(0, 15);
    const stats = scanProcesses();
    const targets = new Map<number, number>(); // pid -> start time
    for (const h of handles) {
      const s = stats.get(h.pid);
      if (s && s.startTime === h.startTime) targets.set(s.pid, s.startTime);
    }
    for (const s of stats.values()) {
      if (s.comm === bwrapComm && isSandboxBwrap(readCmdline(s.pid), workDir)) targets.set(s.pid, s.startTime);
    }
    for (const s of stats.values()) {
      if (targets.has(s.ppid) && s.comm === bwrapComm) targets.set(s.pid, s.startTime);
    }
    if (targets.size === 0) return false;

    const ownNs = readPidNamespace('self');
    const deadline = Date.now() + this.deleteTimeoutMs;
    for (;;) {
      // The sandbox's namespace is named only through a member verified (pid + start time) in
      // this very pass. Once its init is gone the kernel kills the rest, and the namespace's
      // inode number can be recycled for a newer sandbox's namespace: a set kept from an earlier
      // pass (say, before this replica was frozen for a while) could then kill that sandbox.
      const namespaces = new Set<string>();
      for (const [pid, startTime] of targets) {
        const s = readStat(pid);
        if (!s || isDead(s) || s.startTime !== startTime) continue;
        const ns = readPidNamespace(pid);
        if (ns && ns !== ownNs) namespaces.add(ns);
      }
      let remaining = 0;
      for (const pid of listPids()) {
        const s = readStat(pid);
        if (!s || isDead(s)) continue;
        const ours =
          targets.get(pid) === s.startTime || (namespaces.size > 0 && namespaces.has(readPidNamespace(pid) ?? ''));
        if (!ours) continue;
        remaining++;
        killQuietly(pid);
      }
      if (remaining === 0) return true;
      if (Date.now() >= deadline) {
        throw new Error(`sandbox at ${dir}: ${remaining} process(es) still alive ${this.deleteTimeoutMs} ms after SIGKILL`);
      }
      await sleep(25);
    }
  }

  private async spawnBwrap(dir: string, args: string[], env: Record<string, string>, cgroups: SandboxCgroups): Promise<ChildProcess> {
    const logFd = fs.openSync(path.join(dir, LOG_FILE), 'a', 0o600);
    let child: ChildProcess;
    try {
      // detached: bwrap leads its own session/process group, so nothing aimed at the replica's
      // group (Ctrl-C, a supervisor of the replica) reaches it. env is the complete environment.
      // The shell joins the supervisor's cgroups and execs bwrap in the same process.
      const join = cgroups.supervisorProcs;
      child = spawn('/bin/sh', ['-c', CGROUP_JOIN_SCRIPT, 'sandgate-launch', String(join.length), ...join, this.bwrapPath, ...args], {
        detached: true,
        stdio: ['ignore', logFd, logFd],
        env,
        cwd: '/',
      });
    } finally {
      // The child has its own copies by now (spawn forks synchronously).
      fs.closeSync(logFd);
    }
    // Never keep the replica's event loop alive for a sandbox; Node still reaps it if it exits.
    child.unref();
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', (err) => reject(new Error(`cannot start bubblewrap (${this.bwrapPath}, through /bin/sh): ${err.message}`)));
    });
    return child;
  }

  /** Everything a launch needs, checked before anything is written; the sandbox's directory. */
  private async checkLaunch(spec: LaunchSpec): Promise<{ root: string; dir: string }> {
    assertLaunchSpec(spec);
    try {
      await fsp.access(this.bwrapPath, fs.constants.X_OK);
    } catch {
      throw new Error(`bubblewrap is not installed or not executable at ${this.bwrapPath} (the local driver needs it)`);
    }
    workloadUser(spec);
    assertLimits(spec.limits);
    await this.cgroups();
    await this.runtime();
    const root = await this.root();
    return { root, dir: path.join(root, 'sandboxes', spec.sandboxId) };
  }

  /** The host's cgroup hierarchies, found once; throws (create fails) if limits cannot be enforced. */
  /** From the sandbox's cgroups (the kernel's own accounting): no process walk. */
  async usage(sandboxId: string, _handle: ComputeHandle | null): Promise<ComputeUsage | null> {
    assertSandboxId(sandboxId);
    return (await this.cgroups()).usage(sandboxId);
  }

  private async cgroups(): Promise<Cgroups> {
    this.cgroupsCache ??= Cgroups.detect({ parent: this.cgroupParent });
    return this.cgroupsCache;
  }

  /** Removes the sandbox's cgroups, if any; a host without cgroups has none to remove. */
  private async removeCgroups(sandboxId: string): Promise<boolean> {
    let cg: Cgroups;
    try {
      cg = await this.cgroups();
    } catch {
      return false;
    }
    return cg.remove(sandboxId, this.deleteTimeoutMs);
  }

  /**
   * Real paths of node, the supervisor entry and what to bind for them: checked once per driver,
   * one resolution shared by creates that start together (each resolution starts a fill of the
   * compile cache of its own). Forgotten if it fails, so a fixed host is tried again.
   */
  private runtime(): Promise<SupervisorRuntime> {
    this.runtimePending ??= this.resolveRuntime().catch((err: unknown) => {
      this.runtimePending = null;
      throw err;
    });
    return this.runtimePending;
  }

  private async resolveRuntime(): Promise<SupervisorRuntime> {
    let nodePath: string;
    try {
      nodePath = await fsp.realpath(this.nodePath);
      await fsp.access(nodePath, fs.constants.X_OK);
    } catch {
      throw new Error(`node is not executable at ${this.nodePath}`);
    }
    let supervisorEntry: string;
    let repoRoot: string;
    try {
      supervisorEntry = await fsp.realpath(this.supervisorEntry);
      await fsp.access(supervisorEntry, fs.constants.R_OK);
      repoRoot = await fsp.realpath(this.repoRoot);
    } catch {
      throw new Error(`supervisor entry ${this.supervisorEntry} (in ${this.repoRoot}) is not readable`);
    }
    if (!isWithin(repoRoot, supervisorEntry)) {
      throw new Error(`LocalDriver: supervisor entry ${supervisorEntry} is not inside repoRoot ${repoRoot} (after resolving links)`);
    }
    // Bound over the sandbox's private directories: never one of them (or / itself) whole.
    if (path.dirname(repoRoot) === '/' && ['', 'tmp', 'run', 'proc', 'dev'].includes(path.basename(repoRoot))) {
      throw new Error(`LocalDriver: repoRoot ${repoRoot} would show the host's ${repoRoot} to every sandbox; use the checkout's own directory`);
    }
    const stateRoot = await this.root();
    for (const p of [nodePath, repoRoot]) {
      if (isWithin(stateRoot, p)) throw new Error(`LocalDriver: ${p} is inside stateDir, which sandboxes cannot see`);
    }
    const cache = this.useCompileCache ? await startCompileCache(stateRoot, nodePath, supervisorEntry) : null;
    // The binary alone, not its directory: node in /tmp would otherwise bring the host's /tmp.
    return { nodePath, supervisorEntry, paths: [nodePath, repoRoot], compileCacheDir: cache?.dir ?? null, compileCacheFilled: cache?.filled ?? null };
  }

  /**
   * A spare disk of the default size, renamed to be the sandbox's directory: false if none was
   * ready, or the directory exists (claimDir then deals with what is there).
   */
  private async claimSpareDisk(spec: LaunchSpec, dir: string): Promise<boolean> {
    if ((spec.limits?.diskBytes ?? DEFAULT_DISK_BYTES) !== DEFAULT_DISK_BYTES) return false;
    await fsp.mkdir(path.dirname(dir), { recursive: true, mode: 0o700 });
    return this.diskSpares.claim(dir);
  }

  /** A fresh directory for the sandbox. Leftovers of a dead sandbox with the same id are cleared. */
  private async claimDir(id: string, dir: string): Promise<void> {
    await fsp.mkdir(path.dirname(dir), { recursive: true, mode: 0o700 });
    try {
      await fsp.mkdir(dir, { mode: 0o700 });
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const h = await readHandleFile(dir);
    if (h && isAlive(h.pid, h.startTime)) throw new Error(`sandbox ${id} already exists (pid ${h.pid})`);
    await this.destroy(dir, h ? [h] : []);
    // EEXIST now means a concurrent create of the same id won the race.
    await fsp.mkdir(dir, { mode: 0o700 });
  }

  private async root(): Promise<string> {
    if (this.stateRoot) return this.stateRoot;
    await fsp.mkdir(this.stateDir, { recursive: true, mode: 0o700 });
    this.stateRoot = await fsp.realpath(this.stateDir);
    return this.stateRoot;
  }
}

/** The workload's uid/gid: the spec's, else SANDBOX_UID/SANDBOX_GID. Never root. */
function workloadUser(spec: LaunchSpec): { uid: number; gid: number } {
  const user = spec.workloadUser ?? { uid: SANDBOX_UID, gid: SANDBOX_GID };
  for (const k of ['uid', 'gid'] as const) {
    const v = user[k];
    if (!Number.isSafeInteger(v) || v < 0 || v >= 0xffffffff) throw new Error(`workloadUser.${k} must be an integer id (got ${String(v)})`);
    if (v === 0) throw new Error(`workloadUser.${k} must not be 0: the workload never runs as root`);
  }
  return user;
}

/** Writes <dir>/passwd and <dir>/group naming the workload's user; null if the host has no /etc/passwd. */
async function writeIdentityFiles(dir: string, uid: number, gid: number): Promise<{ passwd: string; group: string } | null> {
  let hostPasswd: string;
  let hostGroup: string;
  try {
    hostPasswd = await fsp.readFile('/etc/passwd', 'utf8');
    hostGroup = await fsp.readFile('/etc/group', 'utf8').catch(() => '');
  } catch {
    return null;
  }
  const files = identityFilesFor(hostPasswd, hostGroup, uid, gid);
  const out = { passwd: path.join(dir, 'passwd'), group: path.join(dir, 'group') };
  await writeAtomic(out.passwd, files.passwd, 0o644);
  await writeAtomic(out.group, files.group, 0o644);
  return out;
}

interface SupervisorRuntime {
  nodePath: string;
  supervisorEntry: string;
  /** Bound read-only into every sandbox at the same path. */
  paths: string[];
  /** Host directory of the supervisors' compile cache; null: none. */
  compileCacheDir: string | null;
  /** Settles when the cache's fill has ended (however it ended); null: no cache. */
  compileCacheFilled: Promise<void> | null;
}

/** The compile cache's directory under the state root (hidden in sandboxes; bound read-only). */
const COMPILE_CACHE_DIR = 'compile-cache';

/**
 * Makes the supervisors' compile cache directory and starts filling it: the supervisor's entry
 * loads its modules on the host with `--fill-compile-cache` and writes their compiled code there
 * (about a second, in the background: a warm-pool member's launch waits for it, see
 * waitForCompileCache; other launches meanwhile simply find less in it). Node checks
 * each entry against its source, so a cache from an older checkout is refreshed, never misused.
 * null (no cache, supervisors compile for themselves) if the directory cannot be made. `filled`
 * settles when the filler has ended, however it ended.
 */
async function startCompileCache(stateRoot: string, nodePath: string, supervisorEntry: string): Promise<{ dir: string; filled: Promise<void> } | null> {
  const dir = path.join(stateRoot, COMPILE_CACHE_DIR);
  try {
    await fsp.mkdir(dir, { recursive: true, mode: 0o755 });
  } catch {
    return null;
  }
  // With the supervisor's own flags: V8 rejects a code cache made under different flags.
  const filler = spawn(nodePath, [...SUPERVISOR_NODE_FLAGS, supervisorEntry, '--fill-compile-cache'], {
    // The supervisors' own variables: with NODE_COMPILE_CACHE the entry point is cached too.
    env: { PATH: DEFAULT_PATH, ...compileCacheEnvironment(dir) },
    stdio: 'ignore',
  });
  // A failed fill only costs the speed-up.
  const filled = new Promise<void>((resolve) => {
    // 'on', not 'once': a second 'error' (a failed kill, say) must not go unhandled.
    filler.on('error', () => resolve());
    filler.once('exit', () => resolve());
  });
  return { dir, filled };
}

/**
 * The checkout holding `entry`: the nearest directory above it (below /) whose package.json
 * declares npm workspaces (the repository root: a workspace may have a node_modules of its own),
 * else the nearest with a node_modules directory, else entry's own directory.
 */
function checkoutOf(entry: string): string {
  let withModules: string | null = null;
  for (let dir = path.dirname(entry); path.dirname(dir) !== dir; dir = path.dirname(dir)) {
    if (declaresWorkspaces(path.join(dir, 'package.json'))) return dir;
    if (withModules === null && fs.existsSync(path.join(dir, 'node_modules'))) withModules = dir;
  }
  return withModules ?? path.dirname(entry);
}

function declaresWorkspaces(packageJson: string): boolean {
  try {
    return Array.isArray((JSON.parse(fs.readFileSync(packageJson, 'utf8')) as { workspaces?: unknown }).workspaces);
  } catch {
    return false;
  }
}

function isWithin(dir: string, p: string): boolean {
  const rel = path.relative(dir, path.resolve(p));
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/** bwrap's argv for this sandbox contains `--bind <dir>/work /sandbox`; no other process's does. */
function isSandboxBwrap(argv: string[] | null, workDir: string): boolean {
  if (!argv) return false;
  for (let i = 0; i + 2 < argv.length; i++) {
    if (argv[i] === '--bind' && argv[i + 1] === workDir && argv[i + 2] === SANDBOX_MOUNT) return true;
  }
  return false;
}

function scanProcesses(): Map<number, ProcStat> {
  const out = new Map<number, ProcStat>();
  for (const pid of listPids()) {
    const s = readStat(pid);
    if (s && !isDead(s)) out.set(pid, s);
  }
  return out;
}

function startTimeOf(pid: number): number {
  // Read synchronously right after 'spawn': the process exists (at worst as an unreaped zombie).
  const s = readStat(pid);
  if (!s) throw new Error(`bwrap (pid ${pid}) vanished right after starting`);
  return s.startTime;
}

/** Resolves to a description of the exit if the child exits within `ms`, otherwise null. */
async function exitWithin(child: ChildProcess, ms: number): Promise<string | null> {
  if (child.exitCode !== null || child.signalCode !== null) return describeExit(child.exitCode, child.signalCode);
  const ac = new AbortController();
  const exited = new Promise<string>((resolve) =>
    child.once('exit', (code, signal) => resolve(describeExit(code, signal))),
  );
  const timeout = sleep(ms, null, { signal: ac.signal }).catch(() => null);
  try {
    return await Promise.race([exited, timeout]);
  } finally {
    ac.abort();
  }
}

function describeExit(code: number | null, signal: NodeJS.Signals | null): string {
  return signal ? `signal ${signal}` : `exit code ${code}`;
}

async function readRootEntries(): Promise<RootEntry[]> {
  const out: RootEntry[] = [];
  for (const e of await fsp.readdir('/', { withFileTypes: true })) {
    if (e.isSymbolicLink()) {
      out.push({ name: e.name, kind: 'symlink', target: await fsp.readlink(`/${e.name}`) });
    } else {
      out.push({ name: e.name, kind: e.isDirectory() ? 'dir' : e.isFile() ? 'file' : 'other' });
    }
  }
  return out;
}

async function readHandleFile(dir: string): Promise<LocalHandle | null> {
  try {
    return parseHandle(JSON.parse(await fsp.readFile(path.join(dir, HANDLE_FILE), 'utf8')));
  } catch {
    return null;
  }
}

async function writeJsonAtomic(file: string, value: unknown): Promise<void> {
  await writeAtomic(file, JSON.stringify(value) + '\n', 0o600);
}

async function writeAtomic(file: string, text: string, mode: number): Promise<void> {
  const tmp = `${file}.${process.pid}.tmp`;
  await fsp.writeFile(tmp, text, { mode });
  await fsp.chmod(tmp, mode); // the umask may have narrowed it
  await fsp.rename(tmp, file);
}

async function readTail(file: string, bytes: number): Promise<string> {
  try {
    const fh = await fsp.open(file, 'r');
    try {
      const { size } = await fh.stat();
      const start = Math.max(0, size - bytes);
      const buf = Buffer.alloc(size - start);
      await fh.read(buf, 0, buf.length, start);
      return buf.toString('utf8');
    } finally {
      await fh.close();
    }
  } catch {
    return '';
  }
}

/** Awaits every promise, then throws the first rejection (if any): nothing is left running behind a failure. */
async function allSettledOrThrow<A, B, C>(a: Promise<A>, b: Promise<B>, c: Promise<C>): Promise<[A, B, C]> {
  const settled = await Promise.allSettled([a, b, c]);
  const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
  return settled.map((r) => (r as PromiseFulfilledResult<unknown>).value) as [A, B, C];
}
