// The workload's own cgroups for a docker sandbox. Docker's HostConfig limits hold the whole
// container, the supervisor included — and the supervisor with its netns agent is two Node
// processes (≈ 80 MiB): under `--memory 64Mi` it could not even start, and a memory hog would
// share its budget with it. So, as the local driver does, the workload gets cgroups of its own:
//
//   <mount>/<parent>/<id>/            the container's CgroupParent (Docker puts the container,
//                                     i.e. tini and the supervisor, in <id>/<container id>)
//   <mount>/<parent>/<id>/workload    the limits; bind-mounted into the container read-write at
//                                     /run/sandgate/cgroup/<name>, joined by the supervisor's
//                                     wrapper before each workload process runs
//
// for the memory, cpu and pids hierarchies (cgroup v1, each controller's mount; or the v2
// unified one). Workload processes stay in the container's PID namespace, so they die with it.
// Needs the engine's cgroupfs cgroup driver (CgroupParent is then a path) and a driver running
// as root on the engine's host (it bind-mounts host paths already); the driver checks both.
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEFAULT_PIDS_LIMIT, type ResourceLimits } from '../driver.ts';

/** Where a workload cgroup directory appears inside the container. */
export const CGROUP_IN_CONTAINER = '/run/sandgate/cgroup';
/** Below each hierarchy's mount: every docker sandbox's cgroups (not the local driver's `sandgate`). */
export const DEFAULT_CGROUP_PARENT = 'sandgate-docker';
const CPU_PERIOD_US = 100_000;

type Controller = 'memory' | 'cpu' | 'pids';
const CONTROLLERS: Controller[] = ['memory', 'cpu', 'pids'];

export interface Hierarchy {
  version: 1 | 2;
  mount: string;
  controllers: Controller[];
  /** Its directory name under CGROUP_IN_CONTAINER. */
  name: string;
}

export interface WorkloadCgroup {
  hostDir: string;
  containerDir: string;
}

/** Every cgroup (v1 or v2) mount of this host: Docker makes <parent>/<id> in each one. */
export function cgroupMounts(mountinfo: string): string[] {
  return parseMounts(mountinfo)
    .filter((m) => m.fstype === 'cgroup' || m.fstype === 'cgroup2')
    .map((m) => m.mountPoint);
}

function parseMounts(mountinfo: string): { mountPoint: string; fstype: string; options: string[] }[] {
  return mountinfo
    .split('\n')
    .map((line) => {
      const sep = line.indexOf(' - ');
      if (sep < 0) return null;
      const pre = line.slice(0, sep).split(' ');
      const post = line.slice(sep + 3).split(' ');
      return { mountPoint: (pre[4] ?? '').replace(/\\040/g, ' '), fstype: post[0] ?? '', options: (post[2] ?? '').split(',') };
    })
    .filter((m) => m !== null);
}

/** The memory, cpu and pids hierarchies of this host, from /proc/self/mountinfo. */
export function findHierarchies(mountinfo: string, v2Controllers: (mount: string) => string[]): Hierarchy[] {
  const mounts = parseMounts(mountinfo);
  const byMount = new Map<string, Hierarchy>();
  for (const c of CONTROLLERS) {
    const v1 = mounts.find((m) => m.fstype === 'cgroup' && m.options.includes(c));
    const v2 = v1 ? undefined : mounts.find((m) => m.fstype === 'cgroup2' && v2Controllers(m.mountPoint).includes(c));
    const m = v1 ?? v2;
    if (!m) throw new Error(`no cgroup hierarchy offers the ${c} controller: the docker driver enforces workload limits with it`);
    const h = byMount.get(m.mountPoint) ?? { version: v1 ? 1 : 2, mount: m.mountPoint, controllers: [], name: '' };
    h.controllers.push(c);
    byMount.set(m.mountPoint, h);
  }
  const out = [...byMount.values()];
  for (const h of out) h.name = h.version === 2 ? 'unified' : h.controllers.join(',');
  return out;
}

/** The control files to write, in order, for `limits` in a workload cgroup of `h`. */
export function limitWrites(h: Hierarchy, limits: ResourceLimits, has: (file: string) => boolean): [string, string][] {
  const out: [string, string][] = [];
  for (const c of h.controllers) {
    if (c === 'memory' && limits.memoryBytes !== undefined) {
      const mem = String(limits.memoryBytes);
      if (h.version === 1) {
        out.push(['memory.limit_in_bytes', mem]);
        // memory+swap no higher than memory: no swap on top of the limit.
        if (has('memory.memsw.limit_in_bytes')) out.push(['memory.memsw.limit_in_bytes', mem]);
        else if (has('memory.swappiness')) out.push(['memory.swappiness', '0']);
      } else {
        out.push(['memory.max', mem]);
        if (has('memory.swap.max')) out.push(['memory.swap.max', '0']);
      }
    }
    if (c === 'cpu' && limits.cpuMillis !== undefined) {
      const quota = String(limits.cpuMillis * (CPU_PERIOD_US / 1000));
      if (h.version === 1) out.push(['cpu.cfs_period_us', String(CPU_PERIOD_US)], ['cpu.cfs_quota_us', quota]);
      else out.push(['cpu.max', `${quota} ${CPU_PERIOD_US}`]);
    }
    if (c === 'pids') out.push(['pids.max', String(limits.pids ?? DEFAULT_PIDS_LIMIT)]);
  }
  return out;
}

export class DockerCgroups {
  readonly hierarchies: Hierarchy[];
  readonly parent: string;
  /** Every cgroup mount (blkio, devices, freezer… too): where Docker also makes <parent>/<id>. */
  readonly allMounts: string[];

  constructor(hierarchies: Hierarchy[], parent = DEFAULT_CGROUP_PARENT, allMounts: string[] = hierarchies.map((h) => h.mount)) {
    if (!/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(parent)) throw new Error(`cgroup parent must be one path component (got ${JSON.stringify(parent)})`);
    this.hierarchies = hierarchies;
    this.parent = parent;
    this.allMounts = [...new Set([...allMounts, ...hierarchies.map((h) => h.mount)])];
  }

  static detect(parent = DEFAULT_CGROUP_PARENT): DockerCgroups {
    const text = fs.readFileSync('/proc/self/mountinfo', 'utf8');
    const hs = findHierarchies(text, (mount) => {
      try {
        return fs.readFileSync(path.join(mount, 'cgroup.controllers'), 'utf8').trim().split(/\s+/);
      } catch {
        return [];
      }
    });
    return new DockerCgroups(hs, parent, cgroupMounts(text));
  }

  /** The container's CgroupParent (cgroupfs driver: a path below every hierarchy's root). */
  cgroupParent(sandboxId: string): string {
    return `/${this.parent}/${sandboxId}`;
  }

  /** Whether any hierarchy is v2 (the container then needs the host's cgroup namespace to join a sibling). */
  get anyV2(): boolean {
    return this.hierarchies.some((h) => h.version === 2);
  }

  private sandboxDir(h: Hierarchy, sandboxId: string): string {
    return path.join(h.mount, this.parent, sandboxId);
  }

  /** The sandbox's workload cgroups (host and container paths), whether they exist yet or not. */
  dirs(sandboxId: string): WorkloadCgroup[] {
    return this.hierarchies.map((h) => ({
      hostDir: path.join(this.sandboxDir(h, sandboxId), 'workload'),
      containerDir: `${CGROUP_IN_CONTAINER}/${h.name}`,
    }));
  }

  /**
   * Makes (or refreshes) the sandbox's workload cgroups with `limits` written. Idempotent: a
   * restart rewrites the limits of the existing ones. Fails loudly: a sandbox never runs unlimited.
   */
  async ensure(sandboxId: string, limits: ResourceLimits): Promise<WorkloadCgroup[]> {
    const out: WorkloadCgroup[] = [];
    try {
      for (const h of this.hierarchies) {
        const dir = path.join(this.sandboxDir(h, sandboxId), 'workload');
        await mkdirp(h, dir);
        for (const [file, value] of limitWrites(h, limits, (f) => fs.existsSync(path.join(dir, f)))) {
          await fsp.writeFile(path.join(dir, file), value).catch((err: Error) => {
            throw new Error(`cannot write ${value} to ${path.join(dir, file)}: ${err.message}`);
          });
        }
        out.push({ hostDir: dir, containerDir: `${CGROUP_IN_CONTAINER}/${h.name}` });
      }
      return out;
    } catch (err) {
      throw new Error(
        `sandbox ${sandboxId}: cannot set up the workload cgroups that enforce its limits (the docker driver needs root ` +
          `on the engine's host and writable memory, cpu and pids cgroup hierarchies): ${(err as Error).message}`,
      );
    }
  }

  /** Sandbox ids that have workload cgroups (in the first hierarchy: they are made in all). */
  async list(): Promise<string[]> {
    const h = this.hierarchies[0];
    if (!h) return [];
    const entries = await fsp.readdir(path.join(h.mount, this.parent), { withFileTypes: true }).catch(() => []);
    return entries.filter((e) => e.isDirectory()).map((e) => e.name);
  }

  /**
   * Removes the sandbox's cgroups once its container is gone. Processes still in the workload
   * cgroup (the container's PID namespace is being torn down) are waited for, then SIGKILLed.
   */
  async remove(sandboxId: string, timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (const mount of this.allMounts) {
      const top = path.join(mount, this.parent, sandboxId);
      for (const dir of [path.join(top, 'workload'), top]) {
        for (;;) {
          try {
            await fsp.rmdir(dir);
            break;
          } catch (err) {
            const code = (err as NodeJS.ErrnoException).code;
            if (code === 'ENOENT') break;
            // ENOTEMPTY: Docker's own child (<id>/<container>) is still being removed.
            if ((code !== 'EBUSY' && code !== 'ENOTEMPTY') || Date.now() > deadline) {
              throw new Error(`sandbox ${sandboxId}: cannot remove cgroup ${dir}: ${(err as Error).message}`);
            }
            if (Date.now() > deadline - timeoutMs / 2) await killProcsIn(dir);
            await sleep(50);
          }
        }
      }
    }
  }
}

async function mkdirp(h: Hierarchy, dir: string): Promise<void> {
  const rel = path.relative(h.mount, dir).split(path.sep).filter(Boolean);
  let cur = h.mount;
  for (const part of rel) {
    // v2: a child can only use the controllers its parent hands down.
    if (h.version === 2) await enableControllers(cur, h.controllers);
    cur = path.join(cur, part);
    await fsp.mkdir(cur).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'EEXIST') throw err;
    });
  }
}

async function enableControllers(dir: string, controllers: Controller[]): Promise<void> {
  const file = path.join(dir, 'cgroup.subtree_control');
  const enabled = (await fsp.readFile(file, 'utf8')).trim().split(/\s+/);
  const missing = controllers.filter((c) => !enabled.includes(c));
  if (missing.length > 0) await fsp.writeFile(file, missing.map((c) => `+${c}`).join(' '));
}

async function killProcsIn(dir: string): Promise<void> {
  const text = await fsp.readFile(path.join(dir, 'cgroup.procs'), 'utf8').catch(() => '');
  for (const pid of text.split('\n').filter(Boolean).map(Number)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
}
