// The local driver against real bubblewrap processes (no mocks). Needs /usr/bin/bwrap and root.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SUPERVISOR_CAPABILITIES } from '../src/bwrap-launch.ts';
import { Cgroups } from '../src/cgroups.ts';
import { SUPERVISOR_NODE_FLAGS, type LaunchSpec } from '../src/driver.ts';
import { LocalDriver } from '../src/local-driver.ts';
import { isAlive, isDead, listPids, readCmdline, readPidNamespace, readStat } from '../src/proc.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const fakeSupervisor = path.join(here, 'fixtures', 'fake-supervisor.mjs');
const createAndHang = path.join(here, 'fixtures', 'create-and-hang.ts');

/** Suffix of the ids that get cgroups: those are host-wide, so concurrent runs must not share one. */
const RUN = process.pid.toString(36);
const LIST_A = `list-a-${RUN}`;
const LIST_B = `list-b-${RUN}`;

let stateDir: string;
let driver: LocalDriver;
const created: string[] = [];

function spec(sandboxId: string, over: Partial<LaunchSpec> = {}): LaunchSpec {
  created.push(sandboxId);
  return {
    sandboxId,
    command: ['sleep', '100000'],
    tty: false,
    environment: {},
    image: 'ignored-by-local',
    gatewayEndpoints: '127.0.0.1:7443',
    credential: `cred-${sandboxId}-s3cr3t`,
    logLevel: 'info',
    ...over,
  };
}

async function waitFor<T>(what: string, fn: () => T | null | undefined | false, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

function sandboxDir(id: string): string {
  return path.join(fs.realpathSync(stateDir), 'sandboxes', id);
}

function readReport(id: string): Record<string, any> | null {
  try {
    return JSON.parse(fs.readFileSync(path.join(sandboxDir(id), 'work', 'report.json'), 'utf8'));
  } catch {
    return null;
  }
}

/** A file the sandbox wrote into /sandbox, trimmed, or null while it does not exist yet. */
function readWorkFile(id: string, name: string): string | null {
  try {
    return fs.readFileSync(path.join(sandboxDir(id), 'work', name), 'utf8').trim() || null;
  } catch {
    return null;
  }
}

function liveInNamespace(ns: string): number[] {
  return listPids().filter((p) => {
    const s = readStat(p);
    return s !== null && !isDead(s) && readPidNamespace(p) === ns;
  });
}

/** Host pids of every live process in the PID namespace of the bwrap at `bwrapPid`. */
function sandboxProcesses(bwrapPid: number): { ns: string; pids: number[] } {
  const nsInit = listPids().find((p) => readStat(p)?.ppid === bwrapPid);
  if (nsInit === undefined) throw new Error(`bwrap ${bwrapPid} has no child`);
  const ns = readPidNamespace(nsInit)!;
  return { ns, pids: liveInNamespace(ns) };
}

const cgroups = Cgroups.detect();

/** Every cgroup directory (host paths) the driver makes for sandbox `id`. */
function cgroupDirsOf(id: string): string[] {
  return cgroups.hierarchies.flatMap((h) => [path.join(h.mount, 'sandgate', id), path.join(h.mount, 'sandgate', id, 'workload')]);
}

/** The cgroup of `pid` in each of the driver's hierarchies (v1: the line naming its controller). */
function cgroupsOf(pid: number): string[] {
  const lines = fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n').filter(Boolean).map((l) => l.split(':'));
  return cgroups.hierarchies.map((h) => {
    const line = h.version === 2 ? lines.find((f) => f[0] === '0') : lines.find((f) => f[1].split(',').includes(h.controllers[0]));
    return line ? line.slice(2).join(':') : '(none)';
  });
}

/** The capability mask SUPERVISOR_CAPABILITIES stands for, as /proc/<pid>/status prints it. */
function capMask(names: readonly string[]): string {
  const bits: Record<string, number> = {
    CAP_CHOWN: 0,
    CAP_DAC_OVERRIDE: 1,
    CAP_DAC_READ_SEARCH: 2,
    CAP_FOWNER: 3,
    CAP_KILL: 5,
    CAP_SETGID: 6,
    CAP_SETUID: 7,
    CAP_SETPCAP: 8,
    CAP_NET_ADMIN: 12,
    CAP_SYS_PTRACE: 19,
    CAP_SYS_ADMIN: 21,
  };
  let mask = 0n;
  for (const n of names) {
    if (bits[n] === undefined) throw new Error(`capMask: unknown ${n}`);
    mask |= 1n << BigInt(bits[n]);
  }
  return mask.toString(16).padStart(16, '0');
}

function statusField(pid: number, field: string): string | null {
  try {
    return new RegExp(`^${field}:\\s*(.*)$`, 'm').exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]?.trim() ?? null;
  } catch {
    return null;
  }
}

/** The supervisor's host pid: the process in the sandbox running the fake supervisor. */
function supervisorPid(bwrapPid: number): number {
  const pid = sandboxProcesses(bwrapPid).pids.find((p) => readCmdline(p)?.[1 + SUPERVISOR_NODE_FLAGS.length] === fakeSupervisor);
  if (pid === undefined) throw new Error('no supervisor process in the sandbox');
  return pid;
}

function allGone(pids: number[], starts: Map<number, number>): boolean {
  return pids.every((p) => !isAlive(p, starts.get(p)!));
}

beforeAll(() => {
  stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-compute-'));
  driver = new LocalDriver({ stateDir, supervisorEntry: fakeSupervisor });
});

afterAll(async () => {
  const cleaner = new LocalDriver({ stateDir, supervisorEntry: fakeSupervisor });
  for (const id of created) await cleaner.delete(id, null).catch(() => {});
  fs.rmSync(stateDir, { recursive: true, force: true });
});

describe('LocalDriver input validation', () => {
  it('rejects ids that are not safe path components', async () => {
    for (const bad of ['', '..', '.', 'a/b', '../etc', 'x'.repeat(129), 'a b', 'é']) {
      await expect(driver.create({ ...spec('placeholder'), sandboxId: bad })).rejects.toThrow(/invalid sandbox id/);
      await expect(driver.delete(bad, null)).rejects.toThrow(/invalid sandbox id/);
      await expect(driver.inspect(bad, null)).rejects.toThrow(/invalid sandbox id/);
    }
  });

  it('rejects an empty command and bad environment names', async () => {
    await expect(driver.create(spec('bad-cmd', { command: [] }))).rejects.toThrow(/command/);
    await expect(driver.create(spec('bad-env', { environment: { 'A=B': 'x' } }))).rejects.toThrow(/environment/);
  });

  it('fails clearly when bubblewrap is missing', async () => {
    const d = new LocalDriver({ stateDir, supervisorEntry: fakeSupervisor, bwrapPath: '/nonexistent/bwrap' });
    await expect(d.create(spec('no-bwrap'))).rejects.toThrow(/bubblewrap is not installed/);
    expect(fs.existsSync(sandboxDir('no-bwrap'))).toBe(false);
  });

  it('fails clearly when the launch fails immediately, leaving nothing behind', async () => {
    // bwrap runs /bin/false as the "supervisor", which exits at once; a generous check window
    // keeps this deterministic on a loaded machine.
    const d = new LocalDriver({ stateDir, supervisorEntry: fakeSupervisor, nodePath: '/bin/false', startupCheckMs: 3000 });
    await expect(d.create(spec(`fails-fast-${RUN}`))).rejects.toThrow(/launch failed.*exit code 1/);
    expect(fs.existsSync(sandboxDir(`fails-fast-${RUN}`))).toBe(false);
    expect(await d.inspect(`fails-fast-${RUN}`, null)).toBe('gone');
    expect(cgroupDirsOf(`fails-fast-${RUN}`).filter((d) => fs.existsSync(d))).toEqual([]);
  });

  it('checks only its first launch: a later one that dies at start returns at once, and failureReason says why', async () => {
    const d = new LocalDriver({ stateDir, supervisorEntry: fakeSupervisor, startupCheckMs: 3000 });
    const first = `proven-${RUN}`;
    const t0 = Date.now();
    const h1 = await d.create(spec(first));
    expect(Date.now() - t0).toBeGreaterThanOrEqual(3000); // the first launch waited its check out
    const later = `dies-later-${RUN}`;
    const t1 = Date.now();
    const h2 = await d.create(spec(later, { command: ['fake:fail-at-start', 'no such thing'] }));
    expect(Date.now() - t1).toBeLessThan(3000); // no check: returned before the supervisor died
    expect(await d.failureReason(first, h1)).toBeNull(); // running: nothing to explain
    for (const end = Date.now() + 15_000; (await d.inspect(later, h2)) !== 'gone'; await sleep(50)) {
      if (Date.now() > end) throw new Error('the later launch is still running after 15 s');
    }
    expect(await d.failureReason(later, h2)).toMatch(/exited before the supervisor connected: .*cannot start: no such thing/);
    expect(await d.delete(first, h1)).toBe(true);
    expect(await d.delete(later, h2)).toBe(true);
  }, 30_000);

  it('shows supervisors the compile cache it filled on the host, read-only: nothing in a sandbox can plant code there', async () => {
    const d = new LocalDriver({ stateDir, supervisorEntry: fakeSupervisor });
    const first = `cache-first-${RUN}`;
    const entry = path.join(fs.realpathSync(stateDir), 'compile-cache', 'fake-entry');
    // An earlier driver's entry would end the wait below before this driver's own fill ends, and
    // that fill would then write its entry during the next test.
    fs.rmSync(entry, { force: true });
    const h1 = await d.create(spec(first)); // starts the fill
    await waitFor('the fill to write its entry on the host', () => fs.existsSync(entry), 15_000);
    const id = `cache-${RUN}`;
    const h2 = await d.create(spec(id));
    const r = await waitFor('report.json', () => readReport(id), 15_000);
    expect(r.env.SANDGATE_COMPILE_CACHE).toBe('/run/sandgate/compile-cache');
    expect(r.env.NODE_COMPILE_CACHE).toBe('/run/sandgate/compile-cache'); // Node's own, from its start
    expect(r.compileCacheEntry).toBe('cached');
    expect(r.compileCacheWrite).toBe('EROFS'); // the attack: code planted for the next supervisor
    expect(fs.existsSync(path.join(path.dirname(entry), 'planted'))).toBe(false);
    for (const [i, h] of [[first, h1], [id, h2]] as const) expect(await d.delete(i, h)).toBe(true);

    const off = new LocalDriver({ stateDir, supervisorEntry: fakeSupervisor, compileCache: false });
    const plain = `cache-off-${RUN}`;
    const h3 = await off.create(spec(plain));
    const r3 = await waitFor('report.json', () => readReport(plain), 15_000);
    expect(r3.env.SANDGATE_COMPILE_CACHE).toBe('');
    expect(r3.env.NODE_COMPILE_CACHE).toBe('');
    expect(r3.compileCacheEntry).toMatch(/^ERR:/);
    expect(await off.delete(plain, h3)).toBe(true);
  }, 30_000);

  it("starts a warm-pool member only once the compile cache is filled; a caller's create does not wait", async () => {
    // The fake fill takes a second (fixtures/fake-supervisor.mjs). A member started before it
    // ends would compile its modules itself, and hold more memory for its whole life.
    // A fresh driver fills again; what an earlier one filled is taken away first.
    fs.rmSync(path.join(fs.realpathSync(stateDir), 'compile-cache', 'fake-entry'), { force: true });
    const fills = path.join(fs.realpathSync(stateDir), 'compile-cache', 'fills');
    const fillCount = () => (fs.existsSync(fills) ? fs.readFileSync(fills, 'utf8').split('\n').filter(Boolean).length : 0);
    const fillsBefore = fillCount();
    const d = new LocalDriver({ stateDir, supervisorEntry: fakeSupervisor });
    const plain = `fill-plain-${RUN}`;
    const member = `fill-member-${RUN}`;
    const [hPlain, hMember] = await Promise.all([d.create(spec(plain)), d.create(spec(member, { deferMain: true }))]);
    const rPlain = await waitFor('report.json', () => readReport(plain), 15_000);
    const rMember = await waitFor('report.json', () => readReport(member), 15_000);
    expect(rPlain.compileCacheEntry, 'the caller\'s sandbox started at once, before the fill ended').toMatch(/^ERR:/);
    expect(rMember.compileCacheEntry, 'the member started after the fill').toBe('cached');
    // Two creates at a fresh driver's start: one fill, not one each.
    await sleep(500);
    expect(fillCount() - fillsBefore, 'fills started by the two creates').toBe(1);
    for (const [i, h] of [[plain, hPlain], [member, hMember]] as const) expect(await d.delete(i, h)).toBe(true);
  }, 30_000);

  it('gives a caller\'s LD_PRELOAD and NODE_OPTIONS to no process of its own: not bwrap (root on the host), not the supervisor', async () => {
    const id = `env-attack-${RUN}`;
    const environment = { LD_PRELOAD: '/nonexistent-sandgate-probe.so', NODE_OPTIONS: '--title=sandgate-env-attack' };
    const h = await driver.create(spec(id, { environment }));
    const r = await waitFor('report.json', () => readReport(id), 15_000);
    // Had bwrap or node seen LD_PRELOAD, the dynamic loader would have said so in the sandbox log.
    expect(fs.readFileSync(path.join(sandboxDir(id), 'supervisor.log'), 'utf8')).not.toMatch(/LD_PRELOAD|ld\.so/);
    expect(r.env.LD_PRELOAD).toBeUndefined();
    expect(r.env.NODE_OPTIONS).toBeUndefined();
    expect(r.argv[0]).not.toBe('sandgate-env-attack');
    // The workload still gets them: the supervisor hands the file's variables to its processes.
    expect(r.sandboxEnv).toEqual(environment);
    expect(await driver.delete(id, h)).toBe(true);
  });

  it('refuses a root workload user and limits the kernel would not take, before anything is made', async () => {
    await expect(driver.create(spec('root-user', { workloadUser: { uid: 0, gid: 10001 } }))).rejects.toThrow(/workloadUser.uid must not be 0/);
    await expect(driver.create(spec('root-group', { workloadUser: { uid: 10001, gid: 0 } }))).rejects.toThrow(/workloadUser.gid must not be 0/);
    await expect(driver.create(spec('tiny-cpu', { limits: { cpuMillis: 1 } }))).rejects.toThrow(/cpuMillis must be at least 10/);
    for (const id of ['root-user', 'root-group', 'tiny-cpu']) {
      expect(fs.existsSync(sandboxDir(id))).toBe(false);
      expect(cgroupDirsOf(id).filter((d) => fs.existsSync(d))).toEqual([]);
    }
  });

  it('fails loudly, leaving nothing behind, when it cannot make the cgroups (never runs unlimited)', async () => {
    const nowhere = new Cgroups([{ version: 1, mount: '/nonexistent/cgroup', controllers: ['memory', 'cpu', 'pids'], name: 'all' }]);
    const d = new LocalDriver({ stateDir, supervisorEntry: fakeSupervisor, cgroups: nowhere });
    await expect(d.create(spec(`no-cgroups-${RUN}`))).rejects.toThrow(/cannot set up the cgroups that enforce sandbox no-cgroups-\w+'s limits/);
    expect(fs.existsSync(sandboxDir(`no-cgroups-${RUN}`))).toBe(false);
    expect(await d.inspect(`no-cgroups-${RUN}`, null)).toBe('gone');
  });
});

describe('LocalDriver sandbox lifecycle', () => {
  const id = `abcdef0123456789-main-${RUN}`;
  const secret = `cred-${id}-s3cr3t`;
  let handle: Record<string, unknown>;

  it('creates a bwrap-isolated supervisor with the expected argv, env and view of the host', async () => {
    process.env.SANDGATE_TEST_LEAK = 'must-not-leak';
    handle = await driver.create(
      spec(id, {
        tty: true,
        logLevel: 'debug',
        environment: {
          FOO: 'bar',
          HIDDEN_PROBE: path.join(sandboxDir(id), 'credential'),
          SANDGATE_GATEWAY: 'spoofed',
        },
        command: [
          'sh',
          '-c',
          // $$ and hostname from the main process; then a double-forked, setsid'd grandchild.
          'echo $$ > /sandbox/main.pid; hostname > /sandbox/hostname; (setsid sleep 31337 &); exec sleep 100000',
        ],
      }),
    );
    delete process.env.SANDGATE_TEST_LEAK;
    // How long a create takes is measured by load-tests/create-latency.ts, not asserted here.

    // Handle: exactly { pid, startTime, dir }, pid is the outer bwrap, startTime is field 22.
    expect(Object.keys(handle).sort()).toEqual(['dir', 'pid', 'startTime']);
    expect(handle.dir).toBe(sandboxDir(id));
    // The pid starts as /bin/sh joining the cgroups and becomes bwrap by exec (same pid, same
    // start time); create may return before that exec, so the test waits for it.
    const stat = await waitFor('the launch shell to exec bwrap', () => {
      const s = readStat(handle.pid as number);
      return s?.comm === 'bwrap' ? s : null;
    });
    expect(stat.startTime).toBe(handle.startTime);
    expect(stat.session).toBe(handle.pid); // its own session, not the replica's
    expect(JSON.parse(fs.readFileSync(path.join(sandboxDir(id), 'handle.json'), 'utf8'))).toEqual(handle);
    expect(fs.statSync(path.join(sandboxDir(id), 'credential')).mode & 0o777).toBe(0o600);
    expect(readCmdline(handle.pid as number)).not.toContain(secret);

    const r = await waitFor('report.json', () => readReport(id));
    expect(r.argv).toEqual([process.execPath, fakeSupervisor, '--', 'sh', '-c', expect.stringContaining('31337')]);
    expect(r.env).toEqual({
      SANDGATE_WORKLOAD_UID: '10001',
      SANDGATE_WORKLOAD_GID: '10001',
      SANDGATE_NETWORK_ISOLATION: '1',
      SANDGATE_WORKLOAD_CGROUPS: cgroups.hierarchies.map((h) => `/run/sandgate/cgroup/${h.name}`).join(':'),
      SANDGATE_POLICY: '',
      SANDGATE_GATEWAY_CA_FILE: '',
      SANDGATE_GATEWAY_TLS_NAME: '',
      SANDGATE_COMPILE_CACHE: '/run/sandgate/compile-cache',
      NODE_COMPILE_CACHE: '/run/sandgate/compile-cache',
      SANDGATE_DEFER_MAIN: '0',
      SANDGATE_ENVIRONMENT_FILE: '/run/sandgate/environment.json',
      HOME: '/sandbox',
      PATH: expect.stringContaining('/usr/bin'),
      PWD: '/sandbox', // set by bwrap's --chdir
      SANDGATE_GATEWAY: '127.0.0.1:7443',
      SANDGATE_SANDBOX_ID: id,
      SANDGATE_CREDENTIAL_FILE: '/run/sandgate/credential',
      SANDGATE_MAIN_TTY: '1',
      SANDGATE_LOG_LEVEL: 'debug',
      SANDGATE_DEBUG_BREAK: '',
      SANDGATE_DEBUG_UNSAFE: '0',
    });
    expect(Object.values(r.env)).not.toContain(secret);
    // The sandbox's own variables reach the supervisor only as a root-only read-only file.
    expect(r.sandboxEnv).toEqual({ FOO: 'bar', HIDDEN_PROBE: path.join(sandboxDir(id), 'credential') });
    expect(r.sandboxEnvStat).toEqual({ uid: 0, gid: 0, mode: 0o600 });
    expect(r.credential).toBe(secret);
    expect(r.credentialWrite).toBe('EROFS');
    expect(r.sandboxWrite).toBe('ok');
    expect(fs.readFileSync(path.join(sandboxDir(id), 'work', 'probe.txt'), 'utf8')).toBe('probe');
    expect(r.usrWrite).toBe('EROFS');
    expect(r.rootWrite).toBe('EROFS');
    expect(r.tmpWrite).toBe('ok');
    expect(fs.existsSync('/tmp/probe.txt')).toBe(false); // /tmp is private
    expect(r.hiddenProbe).toBe(false); // the driver's state dir is masked
    expect(r.rootList).toEqual([]); // homes are empty, even for root with CAP_DAC_OVERRIDE
    expect(r.homeList).toEqual([]);
    expect(r.cwd).toBe('/sandbox');
    expect(r.hostname).toBe('sandbox-abcdef01');
    expect(r.capEff).toBe(capMask(SUPERVISOR_CAPABILITIES));
    expect(r.uid).toBe(0);
    expect(r.sandboxOwner).toEqual({ uid: 10001, gid: 10001 });
    expect(r.credentialStat).toEqual({ uid: 0, gid: 0, mode: 0o600 });
    expect(r.passwdSandbox).toBe('sandbox:x:10001:10001:sandgate workload:/sandbox:/bin/sh');
    expect(r.cgroupBinds).toEqual(cgroups.hierarchies.map((h) => h.name).sort());
    // Own PID namespace: bwrap's init is 1, the supervisor 2, and only a handful of processes.
    expect(r.pid).toBe(2);
    expect(r.procPids.length).toBeLessThan(10);
    expect(r.runEntries).toEqual(expect.arrayContaining(['sandgate']));

    const mainPid = Number(await waitFor('main.pid', () => readWorkFile(id, 'main.pid')));
    expect(mainPid).toBeGreaterThan(1);
    expect(mainPid).toBeLessThan(10);
    expect(await waitFor('hostname', () => readWorkFile(id, 'hostname'))).toBe('sandbox-abcdef01');
    expect(await driver.inspect(id, handle)).toBe('running');
  }, 20_000);

  it('lists the sandbox with its handle', async () => {
    const all = await driver.list();
    expect(all).toContainEqual({ sandboxId: id, handle, state: 'running' });
  });

  it('treats a handle whose start time does not match (pid reuse) as gone', async () => {
    expect(await driver.inspect(id, { ...handle, startTime: (handle.startTime as number) + 1 })).toBe('gone');
    expect(await driver.inspect('never-created', null)).toBe('gone');
  });

  it('refuses to create a second sandbox with the same id while it runs', async () => {
    await expect(driver.create(spec(id))).rejects.toThrow(/already exists/);
    expect(await driver.inspect(id, handle)).toBe('running');
  });

  it('deletes from another driver instance, killing the whole tree including a setsid grandchild', async () => {
    const pid = handle.pid as number;
    const before = await waitFor('the grandchild', () => {
      const found = sandboxProcesses(pid);
      return found.pids.some((p) => readCmdline(p)?.join(' ') === 'sleep 31337') ? found : null;
    });
    const grandchild = before.pids.find((p) => readCmdline(p)?.join(' ') === 'sleep 31337')!;
    expect(readStat(grandchild)!.session).toBe(grandchild); // it really left the sandbox's session
    const starts = new Map(before.pids.map((p) => [p, readStat(p)!.startTime]));
    starts.set(pid, handle.startTime as number);
    expect(before.pids.length).toBeGreaterThanOrEqual(4); // init, supervisor, main, grandchild

    // A fresh driver (another replica) that only has the id and the handle as stored in Redis.
    const other = new LocalDriver({ stateDir, supervisorEntry: '/elsewhere/main.ts' });
    const fromRedis = JSON.parse(JSON.stringify(handle));
    expect(await other.delete(id, fromRedis)).toBe(true);

    expect(allGone([...before.pids, pid], starts)).toBe(true);
    expect(liveInNamespace(before.ns)).toEqual([]);
    expect(fs.existsSync(sandboxDir(id))).toBe(false);
    expect(await other.delete(id, fromRedis)).toBe(false);
    expect(await driver.inspect(id, handle)).toBe('gone');
    expect((await driver.list()).map((o) => o.sandboxId)).not.toContain(id);
  }, 20_000);
});

describe('LocalDriver with the supervisor and node under /tmp', () => {
  // Every sandbox gets a private /tmp: a checkout there (git clone … /tmp/x) must still be seen.
  let outside: string;
  beforeAll(() => {
    outside = fs.mkdtempSync('/tmp/sandgate-checkout-');
    const checkout = path.join(outside, 'checkout');
    fs.mkdirSync(path.join(checkout, 'apps', 'supervisor'), { recursive: true });
    fs.mkdirSync(path.join(checkout, 'libs', 'fake'), { recursive: true });
    // The workspace root is the checkout, even though a workspace has a node_modules of its own.
    fs.writeFileSync(path.join(checkout, 'package.json'), JSON.stringify({ workspaces: ['apps/*', 'libs/*'] }));
    fs.mkdirSync(path.join(checkout, 'apps', 'supervisor', 'node_modules'));
    // The entry imports code elsewhere in the checkout, as the real supervisor imports libs/.
    fs.copyFileSync(fakeSupervisor, path.join(checkout, 'libs', 'fake', 'fake-supervisor.mjs'));
    fs.writeFileSync(path.join(checkout, 'apps', 'supervisor', 'main.mjs'), "import '../../libs/fake/fake-supervisor.mjs';\n");
    fs.mkdirSync(path.join(outside, 'node'));
    try {
      fs.linkSync(fs.realpathSync(process.execPath), path.join(outside, 'node', 'node'));
    } catch {
      fs.copyFileSync(fs.realpathSync(process.execPath), path.join(outside, 'node', 'node'));
      fs.chmodSync(path.join(outside, 'node', 'node'), 0o755);
    }
  });
  afterAll(() => fs.rmSync(outside, { recursive: true, force: true }));

  it('runs them (bound read-only), the checkout found from the entry', async () => {
    const id = `under-tmp-1-${RUN}`;
    const entry = path.join(outside, 'checkout', 'apps', 'supervisor', 'main.mjs');
    const nodePath = path.join(outside, 'node', 'node');
    const d = new LocalDriver({ stateDir, supervisorEntry: entry, nodePath, startupCheckMs: 500 });
    const handle = await d.create(spec(id));
    const r = await waitFor('report.json', () => readReport(id), 15_000);
    expect(r.argv).toEqual([nodePath, entry, '--', 'sleep', '100000']);
    expect(r.tmpWrite).toBe('ok'); // /tmp is still the sandbox's own…
    expect(fs.existsSync('/tmp/probe.txt')).toBe(false);
    expect(await d.inspect(id, handle)).toBe('running');
    expect(await d.delete(id, handle)).toBe(true);
  }, 20_000);

  it('refuses a supervisor entry outside repoRoot', () => {
    expect(() => new LocalDriver({ stateDir, supervisorEntry: '/tmp/main.mjs', repoRoot: '/tmp/other' })).toThrow(/not inside repoRoot/);
  });

  it('refuses repoRoot /tmp itself at launch', async () => {
    const d = new LocalDriver({ stateDir, supervisorEntry: path.join(outside, 'checkout', 'apps', 'supervisor', 'main.mjs'), repoRoot: '/tmp' });
    await expect(d.create(spec('tmp-root'))).rejects.toThrow(/would show the host's \/tmp/);
    expect(fs.existsSync(sandboxDir('tmp-root'))).toBe(false);
  });
});

describe('LocalDriver sandbox lifetime', () => {
  it('outlives the process that created it (SIGKILLed), and is deleted via handle.json', async () => {
    const id = `orphan-1-${RUN}`;
    created.push(id);
    const creator = spawn(process.execPath, [createAndHang, stateDir, fakeSupervisor, id], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    creator.stdout!.on('data', (b: Buffer) => (out += b.toString()));
    const line = await waitFor('the handle from the creator', () => (out.includes('\n') ? out.split('\n')[0] : null), 15_000);
    const handle = JSON.parse(line);
    const bwrapStat = readStat(handle.pid)!;
    expect(bwrapStat.ppid).toBe(creator.pid); // still its child until the creator dies

    const creatorGone = new Promise((resolve) => creator.once('exit', resolve));
    process.kill(creator.pid!, 'SIGKILL');
    await creatorGone;
    await sleep(500);

    expect(await driver.inspect(id, handle)).toBe('running');
    expect(readStat(handle.pid)!.ppid).not.toBe(creator.pid); // re-parented, still alive
    const r = await waitFor('report.json', () => readReport(id));
    expect(r.credential).toBe('orphan-credential');

    const { pids } = sandboxProcesses(handle.pid);
    const starts = new Map(pids.map((p) => [p, readStat(p)!.startTime]));
    // No handle from Redis: the driver falls back to handle.json.
    expect(cgroupDirsOf(id).every((d) => fs.existsSync(d))).toBe(true);
    expect(await driver.delete(id, null)).toBe(true);
    expect(allGone([...pids, handle.pid], new Map([...starts, [handle.pid, handle.startTime]]))).toBe(true);
    expect(await driver.inspect(id, handle)).toBe('gone');
    expect(cgroupDirsOf(id).filter((d) => fs.existsSync(d))).toEqual([]);
  }, 30_000);

  it('finds and kills a sandbox even without any handle (crash before handle.json was written)', async () => {
    const id = `no-handle-1-${RUN}`;
    const handle = await driver.create(spec(id));
    await waitFor('report.json', () => readReport(id));
    fs.rmSync(path.join(sandboxDir(id), 'handle.json'));
    expect((await driver.list()).find((o) => o.sandboxId === id)).toEqual({ sandboxId: id, handle: {}, state: 'gone' });
    const { pids } = sandboxProcesses(handle.pid as number);
    const starts = new Map(pids.map((p) => [p, readStat(p)!.startTime]));
    expect(await driver.delete(id, null)).toBe(true);
    expect(allGone(pids, starts)).toBe(true);
    expect(isAlive(handle.pid as number, handle.startTime as number)).toBe(false);
    expect(fs.existsSync(sandboxDir(id))).toBe(false);
  }, 20_000);

  it('lists several sandboxes and replaces leftovers of a dead one with the same id', async () => {
    const a = await driver.create(spec(LIST_A));
    const b = await driver.create(spec(LIST_B));
    const listed = await driver.list();
    expect(listed).toContainEqual({ sandboxId: LIST_A, handle: a, state: 'running' });
    expect(listed).toContainEqual({ sandboxId: LIST_B, handle: b, state: 'running' });

    // Someone kills only the outer bwrap: inspect and list say gone …
    await waitFor('list-b report', () => readReport(LIST_B));
    const strays = sandboxProcesses(b.pid as number).pids;
    const strayStarts = new Map(strays.map((p) => [p, readStat(p)!.startTime]));
    process.kill(b.pid as number, 'SIGKILL');
    await waitFor('list-b to be gone', () => !isAlive(b.pid as number, b.startTime as number));
    expect(await driver.inspect(LIST_B, b)).toBe('gone');
    expect((await driver.list()).find((o) => o.sandboxId === LIST_B)?.state).toBe('gone');
    // … though the namespace (no --die-with-parent) lives on as strays, found by bwrap's argv …
    expect(allGone(strays, strayStarts)).toBe(false);
    // … which creating the same id again kills, along with the leftover directory.
    const b2 = await driver.create(spec(LIST_B));
    expect(allGone(strays, strayStarts)).toBe(true);
    expect(b2.pid).not.toBe(b.pid);
    expect(await driver.inspect(LIST_B, b2)).toBe('running');

    expect(await driver.delete(LIST_A, a)).toBe(true);
    expect(await driver.delete(LIST_B, b2)).toBe(true);
    const ids = (await driver.list()).map((o) => o.sandboxId);
    expect(ids).not.toContain(LIST_A);
    expect(ids).not.toContain(LIST_B);
  }, 20_000);
});

/**
 * The supervisor's workload wrapper as the design has it (join the workload cgroups, enter the
 * netns agent's namespace, drop to the workload's uid): run by the main process, which is the
 * fake supervisor's child and has exactly its capabilities, so it shows they are enough.
 */
const CONFINE_SCRIPT = `
unshare --net sh -c 'ip link set lo up && exec sleep 100000' & AG=$!
until [ "$(cat /proc/$AG/comm 2>/dev/null)" = sleep ]; do sleep 0.05; done
WRAP='for d in $(echo "$SANDGATE_WORKLOAD_CGROUPS" | tr : " "); do echo $$ > "$d/cgroup.procs" || exit 126; done
exec nsenter --net=/proc/'$AG'/ns/net -- setpriv --reuid "$SANDGATE_WORKLOAD_UID" --regid "$SANDGATE_WORKLOAD_GID" --clear-groups --no-new-privs -- "$@"'
sh -c "$WRAP" wrap sh -c '
  echo "uid=$(id -u)"; echo "user=$(id -un)"; echo "cap=$(grep CapEff /proc/self/status | cut -f2)"
  echo "workloadCgroups=$(grep -c "/workload$" /proc/self/cgroup)"
  cat /run/sandgate/credential >/dev/null 2>&1 && echo cred=readable || echo cred=denied
  echo "links=$(ip -o link | cut -d: -f2 | tr -d " " | tr "\\n" ,)"
  dd if=/dev/zero of=/dev/null bs=300M count=1 2>/dev/null; echo "dd=$?"
  echo "after=alive"
' > /sandbox/workload.txt 2>&1
sh -c "$WRAP" wrap sleep 100000 & W=$!
until grep -q "^Uid:.10001" /proc/$W/status 2>/dev/null; do sleep 0.05; done
{
  head -c 1 /proc/$W/environ > /dev/null && echo environ=ok
  kill -9 $W && echo kill=ok
} > /sandbox/supervisor.txt 2>&1
echo done > /sandbox/done
exec sleep 100000
`;

function readKv(id: string, name: string): Record<string, string> | null {
  const text = readWorkFile(id, name);
  if (!text) return null;
  return Object.fromEntries(text.split('\n').filter((l) => l.includes('=')).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
}

describe('LocalDriver confinement', () => {
  const id = `confine-${process.pid}`;
  const limits = { memoryBytes: 64 * 1024 * 1024, cpuMillis: 250, pids: 50 };
  let handle: Record<string, unknown>;

  const neighbour = `neighbour-${process.pid}`;
  afterAll(async () => {
    await cgroups.remove(neighbour);
  });

  it('runs the supervisor as root with exactly its capabilities, no_new_privs, in sandgate/<id>', async () => {
    await cgroups.create(neighbour, {});
    const memory = cgroups.hierarchies.find((h) => h.controllers.includes('memory'))!.mount;
    handle = await driver.create(
      spec(id, {
        limits,
        command: ['sh', '-c', CONFINE_SCRIPT],
        environment: {
          CGROUP_PROBE: path.join(memory, 'sandgate'),
          CGROUP_FILE_PROBE: path.join(memory, 'sandgate', id, 'workload', 'memory.limit_in_bytes'),
        },
      }),
    );
    const bwrap = handle.pid as number;
    const r = await waitFor('report.json', () => readReport(id));
    // Other sandboxes' cgroups are masked; its own limits stay readable where /proc/self/cgroup points.
    expect(r.cgroupProbe).toEqual([id]);
    expect(r.cgroupFileProbe).toBe(String(limits.memoryBytes));
    const sup = supervisorPid(bwrap);
    const mask = capMask(SUPERVISOR_CAPABILITIES);
    expect(statusField(sup, 'CapEff')).toBe(mask);
    expect(statusField(sup, 'CapPrm')).toBe(mask);
    expect(statusField(sup, 'NoNewPrivs')).toBe('1');
    expect(statusField(sup, 'Uid')!.split(/\s+/)).toEqual(['0', '0', '0', '0']);
    // bwrap (joined before it started), the namespace's init and the supervisor: sandgate/<id>.
    const init = readStat(sup)!.ppid;
    expect(readStat(init)!.ppid).toBe(bwrap);
    for (const pid of [bwrap, init, sup]) {
      expect(cgroupsOf(pid)).toEqual(cgroups.hierarchies.map(() => `/sandgate/${id}`));
    }
    const inHierarchy = (c: string) => cgroups.hierarchies.find((h) => h.controllers.includes(c as never))!.mount;
    for (const h of cgroups.hierarchies) {
      expect(fs.readFileSync(path.join(h.mount, 'sandgate', id, 'cgroup.procs'), 'utf8')).toContain(`${bwrap}\n`);
    }
    const wl = (c: string, f: string) => fs.readFileSync(path.join(inHierarchy(c), 'sandgate', id, 'workload', f), 'utf8').trim();
    expect(wl('memory', 'memory.limit_in_bytes')).toBe(String(limits.memoryBytes));
    expect(wl('cpu', 'cpu.cfs_quota_us')).toBe('25000');
    expect(wl('cpu', 'cpu.cfs_period_us')).toBe('100000');
    expect(wl('pids', 'pids.max')).toBe('50');
  }, 20_000);

  it('gives /sandbox to the workload uid and keeps the credential root\'s 0600', () => {
    const work = fs.statSync(path.join(sandboxDir(id), 'work'));
    expect([work.uid, work.gid]).toEqual([10001, 10001]);
    const cred = fs.statSync(path.join(sandboxDir(id), 'credential'));
    expect([cred.uid, cred.gid, cred.mode & 0o777]).toEqual([0, 0, 0o600]);
  });

  it('lets the supervisor confine a workload process: uid 10001, no capabilities, own network, limits', async () => {
    const w = await waitFor('workload.txt', () => {
      const kv = readKv(id, 'workload.txt');
      return kv?.after ? kv : null;
    }, 20_000);
    expect(w).toEqual({
      uid: '10001',
      user: 'sandbox',
      cap: '0000000000000000',
      workloadCgroups: String(cgroups.hierarchies.length),
      cred: 'denied',
      links: 'lo,',
      dd: '137', // the 300 MiB allocation was OOM-killed (SIGKILL) …
      after: 'alive', // … and the shell that ran it was not
    });
    // With its capabilities the supervisor reads and kills another uid's processes.
    expect(await waitFor('supervisor.txt', () => readKv(id, 'supervisor.txt')?.kill && readKv(id, 'supervisor.txt'))).toEqual({
      environ: 'ok',
      kill: 'ok',
    });
    await waitFor('done', () => readWorkFile(id, 'done'));
    expect(await driver.inspect(id, handle)).toBe('running');
  }, 30_000);

  it('removes the cgroups on stop, makes them again on start, and removes them on delete', async () => {
    await driver.stop(id, handle);
    expect(cgroupDirsOf(id).filter((d) => fs.existsSync(d))).toEqual([]);
    // A restart as another workload user: /sandbox follows.
    const h2 = await driver.start(spec(id, { limits, workloadUser: { uid: 10500, gid: 10501 } }), handle);
    const r = await waitFor('a new report', () => {
      const rep = readReport(id);
      return rep && rep.env.SANDGATE_WORKLOAD_UID === '10500' ? rep : null;
    });
    expect(r.sandboxOwner).toEqual({ uid: 10500, gid: 10501 });
    expect(r.passwdSandbox).toBe('sandbox:x:10500:10501:sandgate workload:/sandbox:/bin/sh');
    expect(cgroupDirsOf(id).every((d) => fs.existsSync(d))).toBe(true);
    expect(await driver.delete(id, h2)).toBe(true);
    expect(cgroupDirsOf(id).filter((d) => fs.existsSync(d))).toEqual([]);
  }, 30_000);

  it('refuses cgroups that still hold processes (a live sandbox elsewhere), and leaves them and it alone', async () => {
    const taken = `taken-${RUN}`;
    const made = await cgroups.create(taken, {});
    const sitter = spawn('/bin/sh', ['-c', 'echo $$ > "$1" && exec sleep 60', 'sitter', made.supervisorProcs[0]], { stdio: 'ignore' });
    try {
      await waitFor('the sitter in the cgroup', () => readCmdline(sitter.pid!)?.[0] === 'sleep');
      await expect(driver.create(spec(taken))).rejects.toThrow(/still have processes/);
      expect(sitter.exitCode).toBe(null);
      expect(sitter.signalCode).toBe(null);
      expect(cgroupDirsOf(taken).every((d) => fs.existsSync(d))).toBe(true);
      expect(fs.existsSync(sandboxDir(taken))).toBe(false);
    } finally {
      sitter.kill('SIGKILL');
      await cgroups.remove(taken);
    }
  });

  it('removes a leftover cgroup whose sandbox is gone (a crashed replica), from the id alone', async () => {
    const leftover = `leftover-${process.pid}`;
    created.push(leftover);
    await cgroups.create(leftover, limits);
    expect(cgroupDirsOf(leftover).every((d) => fs.existsSync(d))).toBe(true);
    const other = new LocalDriver({ stateDir, supervisorEntry: '/elsewhere/main.ts' });
    expect(await other.delete(leftover, null)).toBe(true);
    expect(cgroupDirsOf(leftover).filter((d) => fs.existsSync(d))).toEqual([]);
  });
});
