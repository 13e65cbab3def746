// The local driver's resource limits: a cgroup tree per sandbox, on cgroup v1 (one hierarchy per
// controller, or a few co-mounted) and v2 (the unified hierarchy) alike, even mixed.
//
// Per sandbox, in every hierarchy we use, under <mount>/<parent>/<id>:
//   v1: <id>             bwrap, its init and the supervisor (no limit: the supervisor must survive
//                        whatever the workload does)
//       <id>/workload    every workload process (the limits)
//   v2: <id>/supervisor  the same as v1's <id>: v2 lets processes live only in leaves once a
//                        cgroup hands controllers down (the "no internal processes" rule)
//       <id>/workload    the limits
// The supervisor moves each workload process into <id>/workload (its wrapper writes to the bound
// cgroup.procs before exec), so a fork bomb or a memory hog is capped there and the supervisor,
// outside the limits, keeps its session.
//
// Everything here is derived from the sandbox id alone (no state), so any replica can remove the
// cgroups of a sandbox whose creator crashed.
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEFAULT_PIDS_LIMIT, type ResourceLimits } from './driver.ts';
import { assertSandboxId } from './validate.ts';

export type Controller = 'memory' | 'cpu' | 'cpuacct' | 'pids';

/** Controllers a sandbox cannot run without: its limits are enforced through them. */
const REQUIRED: readonly Controller[] = ['memory', 'cpu', 'pids'];
/** v1 only: cpu usage accounting (v2's cpu controller accounts by itself, in cpu.stat). */
const OPTIONAL: readonly Controller[] = ['cpuacct'];

/** The CFS period every cpu limit uses: a quota of cpuMillis * 100 µs per 100 ms is cpuMillis/1000 of a core. */
export const CPU_PERIOD_US = 100_000;
/** The kernel refuses a CFS quota under 1 ms, i.e. 10 millicores at our period. */
export const MIN_CPU_MILLIS = 10;

/** One mounted cgroup hierarchy and the controllers of ours it carries. */
export interface Hierarchy {
  version: 1 | 2;
  /** Mount point on the host. */
  mount: string;
  controllers: Controller[];
  /** Short, unique name: where its workload directory is bound inside the sandbox. */
  name: string;
}

/** A sandbox's cgroups, as the launcher and the supervisor need them. */
export interface SandboxCgroups {
  /** cgroup.procs files (host paths) bwrap is written into before it starts: the supervisor's cgroup. */
  supervisorProcs: string[];
  /** The workload cgroup of each hierarchy (host path), and the hierarchy's name. */
  workload: { name: string; hostDir: string }[];
  /** Per hierarchy, <mount>/<parent> (every sandbox's cgroups) and <mount>/<parent>/<id> (this one's). */
  trees: { parentDir: string; sandboxDir: string }[];
}

interface Mount {
  root: string;
  mountPoint: string;
  fstype: string;
  superOptions: string[];
}

/** /proc/<pid>/mountinfo lines, parsed (fields per proc(5); mount points escape space, tab, \n, \\ as octal). */
export function parseMountinfo(text: string): Mount[] {
  const unescape = (s: string) => s.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8)));
  const out: Mount[] = [];
  for (const line of text.split('\n')) {
    const sep = line.indexOf(' - ');
    if (sep < 0) continue;
    const pre = line.slice(0, sep).split(' ');
    const post = line.slice(sep + 3).split(' ');
    if (pre.length < 5 || post.length < 3) continue;
    out.push({ root: unescape(pre[3]), mountPoint: unescape(pre[4]), fstype: post[0], superOptions: post[2].split(',') });
  }
  return out;
}

/**
 * The hierarchies carrying our controllers: a controller bound to a v1 hierarchy is used there;
 * otherwise a cgroup2 mount whose cgroup.controllers offers it. `v2Controllers` reads that file
 * (null if unreadable). Throws, naming what is missing, if memory, cpu or pids has no hierarchy.
 */
export function findHierarchies(mounts: Mount[], v2Controllers: (mount: string) => string[] | null): Hierarchy[] {
  const byMount = new Map<string, Hierarchy>();
  const place = (c: Controller): boolean => {
    for (const m of mounts) {
      if (m.fstype === 'cgroup' && m.superOptions.includes(c)) {
        const h = byMount.get(m.mountPoint) ?? { version: 1 as const, mount: m.mountPoint, controllers: [], name: '' };
        h.controllers.push(c);
        byMount.set(m.mountPoint, h);
        return true;
      }
    }
    if (c === 'cpuacct') return false; // v2 has no cpuacct controller
    for (const m of mounts) {
      if (m.fstype === 'cgroup2' && (v2Controllers(m.mountPoint) ?? []).includes(c)) {
        const h = byMount.get(m.mountPoint) ?? { version: 2 as const, mount: m.mountPoint, controllers: [], name: '' };
        h.controllers.push(c);
        byMount.set(m.mountPoint, h);
        return true;
      }
    }
    return false;
  };
  const missing = REQUIRED.filter((c) => !place(c));
  if (missing.length > 0) {
    throw new Error(
      `no cgroup hierarchy offers the ${missing.join(', ')} controller(s) (looked for cgroup v1 mounts and a cgroup2 mount ` +
        `listing them in cgroup.controllers): the local driver enforces sandbox limits with them`,
    );
  }
  for (const c of OPTIONAL) place(c);
  const out = [...byMount.values()];
  for (const h of out) h.name = h.version === 2 ? 'unified' : h.controllers.join(',');
  return out;
}

/** Throws a clear error for limits the kernel would refuse (or that make no sense). */
export function assertLimits(limits: ResourceLimits | undefined): void {
  if (!limits) return;
  const positiveInt = (what: string, v: unknown) => {
    if (v !== undefined && (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0)) {
      throw new Error(`limits.${what} must be a positive integer (got ${String(v)})`);
    }
  };
  positiveInt('cpuMillis', limits.cpuMillis);
  positiveInt('memoryBytes', limits.memoryBytes);
  positiveInt('pids', limits.pids);
  if (limits.cpuMillis !== undefined && limits.cpuMillis < MIN_CPU_MILLIS) {
    throw new Error(`limits.cpuMillis must be at least ${MIN_CPU_MILLIS} (the kernel's smallest CFS quota; got ${limits.cpuMillis})`);
  }
}

/**
 * The files to write (in this order) into a workload cgroup of `h` to enforce `limits`. `has`
 * tells whether an optional interface file exists there (swap accounting may be compiled out).
 * Pure, so both versions' mapping is unit-tested on any machine.
 */
export function limitWrites(h: Hierarchy, limits: ResourceLimits, has: (file: string) => boolean): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  const mem = limits.memoryBytes;
  const cpu = limits.cpuMillis;
  for (const c of h.controllers) {
    if (c === 'memory' && mem !== undefined) {
      if (h.version === 1) {
        // memsw (memory + swap) must be >= the memory limit, so it comes second. Without it the
        // workload could spill past the limit into swap; then at least do not swap its pages.
        out.push(['memory.limit_in_bytes', String(mem)]);
        if (has('memory.memsw.limit_in_bytes')) out.push(['memory.memsw.limit_in_bytes', String(mem)]);
        else if (has('memory.swappiness')) out.push(['memory.swappiness', '0']);
      } else {
        out.push(['memory.max', String(mem)]);
        if (has('memory.swap.max')) out.push(['memory.swap.max', '0']);
      }
    } else if (c === 'cpu' && cpu !== undefined) {
      const quota = String(cpu * (CPU_PERIOD_US / 1000));
      if (h.version === 1) {
        out.push(['cpu.cfs_period_us', String(CPU_PERIOD_US)], ['cpu.cfs_quota_us', quota]);
      } else {
        out.push(['cpu.max', `${quota} ${CPU_PERIOD_US}`]);
      }
    } else if (c === 'pids') {
      // Always capped: a fork bomb must stop inside its sandbox even when no limit was asked for.
      out.push(['pids.max', String(limits.pids ?? DEFAULT_PIDS_LIMIT)]);
    }
  }
  return out;
}

export interface CgroupsOptions {
  /** Path below each hierarchy's mount under which sandboxes get their cgroups. Default `sandgate`. */
  parent?: string;
  /** Defaults to /proc/self/mountinfo (tests and other layouts may pass their own). */
  mountinfo?: string;
}

export class Cgroups {
  readonly hierarchies: Hierarchy[];
  readonly parent: string;

  constructor(hierarchies: Hierarchy[], parent = 'sandgate') {
    const norm = path.posix.normalize(parent);
    if (path.posix.isAbsolute(parent) || norm === '.' || norm.startsWith('..') || norm !== parent.replace(/\/+$/, '')) {
      throw new Error(`cgroup parent must be a relative path without . or .. components (got ${JSON.stringify(parent)})`);
    }
    this.hierarchies = hierarchies;
    this.parent = norm;
  }

  /** The hierarchies mounted on this host. Throws (naming what is missing) if limits cannot be enforced. */
  static detect(opts: CgroupsOptions = {}): Cgroups {
    let text: string;
    try {
      text = opts.mountinfo ?? fs.readFileSync('/proc/self/mountinfo', 'utf8');
    } catch (err) {
      throw new Error(`cannot read /proc/self/mountinfo to find the cgroup hierarchies: ${(err as Error).message}`);
    }
    const hs = findHierarchies(parseMountinfo(text), (mount) => {
      try {
        return fs.readFileSync(path.join(mount, 'cgroup.controllers'), 'utf8').trim().split(/\s+/).filter(Boolean);
      } catch {
        return null;
      }
    });
    return new Cgroups(hs, opts.parent);
  }

  /** <mount>/<parent>/<id> in `h`. */
  sandboxDir(h: Hierarchy, sandboxId: string): string {
    assertSandboxId(sandboxId);
    return path.join(h.mount, this.parent, sandboxId);
  }

  workloadDir(h: Hierarchy, sandboxId: string): string {
    return path.join(this.sandboxDir(h, sandboxId), 'workload');
  }

  /** Where bwrap (and so the supervisor) lives. */
  supervisorDir(h: Hierarchy, sandboxId: string): string {
    return h.version === 2 ? path.join(this.sandboxDir(h, sandboxId), 'supervisor') : this.sandboxDir(h, sandboxId);
  }

  /**
   * Creates the sandbox's cgroups with `limits` written, replacing empty leftovers of an earlier
   * run (a crash, a stop). Fails loudly — never runs a sandbox unlimited — and leaves nothing
   * behind when it fails.
   */
  async create(sandboxId: string, limits: ResourceLimits = {}): Promise<SandboxCgroups> {
    assertSandboxId(sandboxId);
    assertLimits(limits);
    // Leftovers of an earlier run are replaced, but only empty ones: processes in them are a
    // live sandbox's (another driver's, say), never to be taken over or removed from here.
    const procs = await this.processesIn(sandboxId);
    if (procs.length > 0) {
      throw new Error(
        `the cgroups of sandbox ${sandboxId} (${this.sandboxDir(this.hierarchies[0], sandboxId)}) still have processes ` +
          `(${procs.slice(0, 5).join(', ')}): is it running elsewhere?`,
      );
    }
    const out: SandboxCgroups = { supervisorProcs: [], workload: [], trees: [] };
    try {
      for (const h of this.hierarchies) {
        await mkdirp(h, path.join(h.mount, this.parent));
        const dir = this.sandboxDir(h, sandboxId);
        if (await exists(dir)) await this.removeIn(h, sandboxId);
        await fsp.mkdir(dir);
        if (h.version === 2) {
          await enableControllers(dir, h.controllers);
          await fsp.mkdir(path.join(dir, 'supervisor'));
        }
        const workload = this.workloadDir(h, sandboxId);
        await fsp.mkdir(workload);
        for (const [file, value] of limitWrites(h, limits, (f) => fs.existsSync(path.join(workload, f)))) {
          await writeControl(path.join(workload, file), value);
        }
        out.supervisorProcs.push(path.join(this.supervisorDir(h, sandboxId), 'cgroup.procs'));
        out.workload.push({ name: h.name, hostDir: workload });
        out.trees.push({ parentDir: path.join(h.mount, this.parent), sandboxDir: dir });
      }
      return out;
    } catch (err) {
      // Only what is empty (what this call made): nothing of ours runs in it yet.
      for (const h of this.hierarchies) await this.removeIn(h, sandboxId).catch(() => false);
      throw new Error(
        `cannot set up the cgroups that enforce sandbox ${sandboxId}'s limits (the local driver needs root and ` +
          `writable cgroup hierarchies for memory, cpu and pids): ${(err as Error).message}`,
      );
    }
  }

  /** Host pids in any of the sandbox's cgroups. */
  async processesIn(sandboxId: string): Promise<number[]> {
    const pids = new Set<number>();
    for (const h of this.hierarchies) {
      for (const dir of this.leavesAndSelf(h, sandboxId)) {
        for (const p of await readProcs(dir)) pids.add(p);
      }
    }
    return [...pids];
  }

  /**
   * Removes the sandbox's cgroups (children first). Anything still inside is the sandbox's by
   * construction and is SIGKILLed; waits up to `timeoutMs` for the kernel to let go (a dying
   * process keeps its cgroup busy for a moment). Resolves true if any cgroup existed.
   */
  async remove(sandboxId: string, timeoutMs = 5000): Promise<boolean> {
    assertSandboxId(sandboxId);
    const deadline = Date.now() + timeoutMs;
    let existed = false;
    for (const h of this.hierarchies) {
      for (;;) {
        try {
          existed = (await this.removeIn(h, sandboxId)) || existed;
          break;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'EBUSY') throw err;
          for (const pid of await this.processesIn(sandboxId)) killQuietly(pid);
          if (Date.now() >= deadline) {
            throw new Error(`cgroup ${this.sandboxDir(h, sandboxId)} is still busy ${timeoutMs} ms after killing its processes`);
          }
          await sleep(20);
        }
      }
    }
    return existed;
  }

  /**
   * CPU time and memory of the whole sandbox (supervisor and workload: the sandbox's cgroup
   * counts its children), from the kernel's accounting files; null when it has no cgroup.
   * v2: cpu.stat usage_usec, memory.current minus inactive_file (reclaimable cache).
   * v1: cpuacct.usage (ns), memory.usage_in_bytes minus total_inactive_file.
   */
  async usage(sandboxId: string): Promise<{ cpuSeconds: number; memoryBytes: number } | null> {
    let cpuSeconds: number | null = null;
    let memoryBytes: number | null = null;
    for (const h of this.hierarchies) {
      const dir = this.sandboxDir(h, sandboxId);
      if (h.version === 2) {
        const cpu = statField(await readOr(path.join(dir, 'cpu.stat')), 'usage_usec');
        if (cpu !== null) cpuSeconds = cpu / 1e6;
        const current = await readOr(path.join(dir, 'memory.current'));
        if (current !== null) memoryBytes = Math.max(0, Number(current.trim()) - (statField(await readOr(path.join(dir, 'memory.stat')), 'inactive_file') ?? 0));
      } else {
        if (h.controllers.includes('cpuacct')) {
          const ns = await readOr(path.join(dir, 'cpuacct.usage'));
          if (ns !== null) cpuSeconds = Number(ns.trim()) / 1e9;
        }
        if (h.controllers.includes('memory')) {
          const used = await readOr(path.join(dir, 'memory.usage_in_bytes'));
          if (used !== null) memoryBytes = Math.max(0, Number(used.trim()) - (statField(await readOr(path.join(dir, 'memory.stat')), 'total_inactive_file') ?? 0));
        }
      }
    }
    return cpuSeconds === null && memoryBytes === null ? null : { cpuSeconds: cpuSeconds ?? 0, memoryBytes: memoryBytes ?? 0 };
  }

  /** Sandbox ids that have a cgroup in any hierarchy (including leftovers of crashed replicas). */
  async list(): Promise<string[]> {
    const ids = new Set<string>();
    for (const h of this.hierarchies) {
      let names: fs.Dirent[];
      try {
        names = await fsp.readdir(path.join(h.mount, this.parent), { withFileTypes: true });
      } catch {
        continue;
      }
      for (const e of names) if (e.isDirectory()) ids.add(e.name);
    }
    return [...ids];
  }

  private leavesAndSelf(h: Hierarchy, sandboxId: string): string[] {
    const dir = this.sandboxDir(h, sandboxId);
    return h.version === 2 ? [path.join(dir, 'workload'), path.join(dir, 'supervisor'), dir] : [path.join(dir, 'workload'), dir];
  }

  /** rmdir of the sandbox's cgroups in one hierarchy, children first; EBUSY propagates. */
  private async removeIn(h: Hierarchy, sandboxId: string): Promise<boolean> {
    let existed = false;
    for (const dir of this.leavesAndSelf(h, sandboxId)) {
      try {
        await fsp.rmdir(dir);
        existed = true;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
    }
    return existed;
  }
}

async function exists(p: string): Promise<boolean> {
  try {
    await fsp.access(p);
    return true;
  } catch {
    return false;
  }
}

/**
 * mkdir -p of `dir` inside a hierarchy; in v2, every level from the mount down hands our
 * controllers on (cgroup.subtree_control), since a child can only use what its parent enabled.
 */
async function mkdirp(h: Hierarchy, dir: string): Promise<void> {
  const rel = path.relative(h.mount, dir).split(path.sep).filter(Boolean);
  let cur = h.mount;
  for (const part of [null, ...rel]) {
    if (part !== null) {
      cur = path.join(cur, part);
      try {
        await fsp.mkdir(cur);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
    }
    if (h.version === 2) await enableControllers(cur, h.controllers);
  }
}

async function enableControllers(dir: string, controllers: Controller[]): Promise<void> {
  const file = path.join(dir, 'cgroup.subtree_control');
  const enabled = (await fsp.readFile(file, 'utf8')).trim().split(/\s+/);
  const missing = controllers.filter((c) => !enabled.includes(c));
  if (missing.length === 0) return;
  try {
    await fsp.writeFile(file, missing.map((c) => `+${c}`).join(' '));
  } catch (err) {
    // EBUSY: the cgroup holds processes itself (v2 forbids controllers there); say which.
    throw new Error(`cannot enable ${missing.join(', ')} in ${file}: ${(err as Error).message}`);
  }
}

async function writeControl(file: string, value: string): Promise<void> {
  try {
    await fsp.writeFile(file, value);
  } catch (err) {
    throw new Error(`cannot write ${value} to ${file}: ${(err as Error).message}`);
  }
}

async function readProcs(dir: string): Promise<number[]> {
  try {
    return (await fsp.readFile(path.join(dir, 'cgroup.procs'), 'utf8'))
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map(Number);
  } catch {
    return [];
  }
}

function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // gone already
  }
}

/** A cgroup file's text, or null when it does not exist (no such cgroup). */
async function readOr(file: string): Promise<string | null> {
  try {
    return await fsp.readFile(file, 'utf8');
  } catch {
    return null;
  }
}

/** `key value` lines (cpu.stat, memory.stat): the value of `key`, or null. */
function statField(text: string | null, key: string): number | null {
  if (text === null) return null;
  for (const line of text.split('\n')) {
    const [k, v] = line.split(' ');
    if (k === key && v !== undefined) return Number(v);
  }
  return null;
}
