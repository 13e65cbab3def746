// The confining wrapper itself, both ways it can run: the native helper (native/sandgate-launch.c,
// what every sandbox uses when `npm install` built it) and the shell chain (bash, nsenter, setpriv,
// env -i). Each starts a real process as root on the host, in cgroups and a network namespace this
// test makes, with a stray descriptor open and a hostile environment around it, and checks what the
// process ends up with. The supervisor-level attacks are in workload.test.ts.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfinedLauncher, NATIVE_LAUNCHER, type LaunchCommand } from '../src/workload/launcher.ts';
import type { PipedChild } from '../src/workload/native-spawn.ts';

const UID = 10001;
const GID = 10002;
const NETNS = `sg-launcher-test-${process.pid}`;
let cgroupDirs: string[] = [];

beforeAll(() => {
  if (process.getuid?.() !== 0) throw new Error('launcher tests must run as root (cgroups, a network namespace, a uid drop)');
  if (!fs.existsSync(NATIVE_LAUNCHER)) throw new Error(`the native launcher was not built: ${NATIVE_LAUNCHER} (npm install runs apps/supervisor/native/build.sh)`);
  cgroupDirs = cgroupMounts().map((m) => path.join(m, `sg-launcher-test-${process.pid}`));
  for (const d of cgroupDirs) fs.mkdirSync(d);
  execFileSync('ip', ['netns', 'add', NETNS]);
});

afterAll(() => {
  for (const d of cgroupDirs) {
    try {
      fs.rmdirSync(d);
    } catch {
      // a process still inside: left for the next boot rather than failing the run
    }
  }
  execFileSync('ip', ['netns', 'delete', NETNS]);
});

/**
 * Where to make the test's cgroups, as the drivers give a workload: the v1 hierarchies of memory,
 * cpu and pids (as mounted, each once), or the cgroup2 mount when there are none.
 */
function cgroupMounts(): string[] {
  const v1 = new Set<string>();
  let v2 = '';
  for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const [pre, post] = line.split(' - ');
    if (!pre || !post) continue;
    const mountPoint = pre.split(' ')[4]!;
    const [fstype, , options] = post.split(' ');
    if (fstype === 'cgroup2') v2 ||= mountPoint;
    if (fstype === 'cgroup' && options!.split(',').some((o) => ['memory', 'cpu', 'pids'].includes(o))) v1.add(mountPoint);
  }
  if (v1.size > 0) return [...v1];
  if (v2) return [v2];
  throw new Error('no cgroup v1 hierarchy of memory, cpu or pids and no cgroup2 mount: the launcher joins workload cgroups');
}

/** Output and exit of a started process (spawned here, or a spare that took its command). */
function collect(child: PipedChild): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (err += c.toString()));
    child.once('error', reject);
    child.once('close', (code: number | null) => resolve({ code, out, err }));
  });
}

/** Runs the command with fd 3 open on a host file (a descriptor the workload must not get). */
function run(cmd: LaunchCommand): Promise<{ code: number | null; out: string; err: string }> {
  const stray = fs.openSync('/etc/hostname', 'r');
  const child = spawn(cmd.file, cmd.args, { env: cmd.env, stdio: ['ignore', 'pipe', 'pipe', stray] });
  fs.closeSync(stray);
  return collect(child);
}

const REPORT = [
  'echo "ids $(id -u) $(id -g) $(id -G)"',
  'grep -E "^(NoNewPrivs|CapEff|CapPrm|CapAmb|SigIgn|SigBlk):" /proc/self/status',
  'echo "oom $(cat /proc/self/oom_score_adj)"',
  'echo "netns $(readlink /proc/self/ns/net)"',
  'cat /proc/self/cgroup',
  'for f in /proc/$$/fd/*; do echo "fd ${f##*/} $(readlink $f)"; done',
  'echo "env"; env | sort',
].join('; ');

const REPORT_ENV = { PATH: '/usr/bin:/bin', HOME: '/sandbox', ODD_VALUE: 'a b=c' };

/** What REPORT printed, run with REPORT_ENV: the workload's ids for good, its cgroups and namespace, exactly its environment, no stray descriptor. */
function expectConfined(r: { code: number | null; out: string; err: string }): void {
  expect(r.code, r.err).toBe(0);
  expect(r.out).toContain(`ids ${UID} ${GID} ${GID}\n`); // no supplementary group besides the primary
  expect(r.out).toMatch(/^NoNewPrivs:\s+1$/m);
  for (const cap of ['CapEff', 'CapPrm', 'CapAmb']) expect(r.out).toMatch(new RegExp(`^${cap}:\\s+0+$`, 'm'));
  // Every signal at its default, none blocked, however the wrapper was started (a spare through
  // posix_spawn has glibc's internal signals ignored until the wrapper resets them).
  expect(r.out).toMatch(/^SigIgn:\s+0+$/m);
  expect(r.out).toMatch(/^SigBlk:\s+0+$/m);
  expect(r.out).toContain('oom 500\n');
  const inode = fs.statSync(`/run/netns/${NETNS}`).ino;
  expect(r.out).toContain(`netns net:[${inode}]\n`);
  for (const d of cgroupDirs) expect(fs.readFileSync(`${d}/cgroup.procs`, 'utf8')).toBe(''); // gone with the process
  const cgroupLines = r.out.split('\n').filter((l) => /^\d+:/.test(l));
  const name = `sg-launcher-test-${process.pid}`;
  expect(cgroupLines.filter((l) => l.endsWith(`/${name}`)).length).toBe(cgroupDirs.length);
  // The shell's own descriptors: nothing pointing at the host file open as fd 3 at the spawn.
  const fds = r.out.split('\n').filter((l) => l.startsWith('fd '));
  expect(fds.length).toBeGreaterThanOrEqual(3);
  expect(fds.filter((l) => l.includes('/etc/hostname'))).toEqual([]);
  const env = r.out.slice(r.out.indexOf('env\n') + 4).trim().split('\n');
  // The proxy variables the launcher adds, ours, and what sh itself sets (PWD, SHLVL): nothing of the supervisor's.
  const names = env.map((l) => l.slice(0, l.indexOf('='))).filter((n) => !['PWD', 'SHLVL', 'OLDPWD', '_'].includes(n));
  expect(names.sort()).toEqual(['ALL_PROXY', 'HOME', 'HTTPS_PROXY', 'HTTP_PROXY', 'NO_PROXY', 'ODD_VALUE', 'PATH', 'all_proxy', 'http_proxy', 'https_proxy', 'no_proxy'].sort());
  expect(env).toContain('ODD_VALUE=a b=c');
}

describe.each([
  { how: 'native helper', native: NATIVE_LAUNCHER as string | null },
  { how: 'shell chain', native: null },
])('the wrapper, as the $how', ({ native }) => {
  const launcher = () => new ConfinedLauncher({ uid: UID, gid: GID, isolateNetwork: true, cgroupDirs }, { netnsPath: `/run/netns/${NETNS}`, proxyPort: 3128 }, native);

  it('says which it is', () => {
    expect(launcher().kind).toBe(native ?? 'shell chain');
    expect(launcher().command(['true'], {}).file).toBe(native ?? '/bin/bash');
  });

  it('drops to the workload ids for good, in the cgroups and the namespace, with exactly its environment and no stray descriptor', async () => {
    expectConfined(await run(launcher().command(['/bin/sh', '-c', REPORT], REPORT_ENV)));
  });

  it('does not let the environment of the workload reach the root part (LD_PRELOAD)', async () => {
    const marker = path.join('/tmp', `sg-launcher-preload-${process.pid}-${native ? 'n' : 's'}`);
    const lib = `${marker}.so`;
    // A library that would create the marker file from any process that loads it as root.
    fs.writeFileSync(`${marker}.c`, `#include <stdio.h>\n__attribute__((constructor)) static void own(void) { FILE *f = fopen("${marker}", "a"); if (f) { fprintf(f, "loaded\\n"); fclose(f); } }\n`);
    execFileSync('cc', ['-shared', '-fPIC', '-o', lib, `${marker}.c`]);
    try {
      const r = await run(launcher().command(['/bin/true'], { PATH: '/usr/bin:/bin', LD_PRELOAD: lib }));
      expect(r.code, r.err).toBe(0);
      // /bin/true itself (as the workload) may load it: the file then exists but was written by uid 10001.
      if (fs.existsSync(marker)) expect(fs.statSync(marker).uid).toBe(UID);
    } finally {
      for (const f of [marker, lib, `${marker}.c`]) fs.rmSync(f, { force: true });
    }
  });

  it('runs a command whose name contains "=", and reports a missing command with 127', async () => {
    const dir = fs.mkdtempSync('/tmp/sg-launcher-');
    fs.chmodSync(dir, 0o755);
    const odd = path.join(dir, 'a=b');
    fs.writeFileSync(odd, '#!/bin/sh\necho odd ran\n', { mode: 0o755 });
    try {
      const r = await run(launcher().command([odd], { PATH: '/usr/bin:/bin' }));
      expect(r.code, r.err).toBe(0);
      expect(r.out).toBe('odd ran\n');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    const missing = await run(launcher().command(['no-such-command-here'], { PATH: '/usr/bin:/bin' }));
    expect(missing.code).toBe(127);
    expect(missing.err).toContain('no-such-command-here');
  });

  it('refuses to run anything when it cannot confine (a cgroup it cannot join): 125', async () => {
    const l = new ConfinedLauncher({ uid: UID, gid: GID, isolateNetwork: true, cgroupDirs }, { netnsPath: `/run/netns/${NETNS}`, proxyPort: 3128 }, native);
    const cmd = l.command(['/bin/sh', '-c', 'echo ran'], { PATH: '/usr/bin:/bin' });
    // The cgroup directory list is the 4th wrapper argument in both forms; point it somewhere unjoinable.
    const at = cmd.args.indexOf(cgroupDirs.join(':'));
    expect(at).toBeGreaterThan(-1);
    cmd.args[at] = '/nonexistent-cgroup';
    const r = await run(cmd);
    expect(r.code).toBe(125);
    expect(r.out).toBe('');
    expect(r.err).toContain('/nonexistent-cgroup');
  });
});

/** Pids of `sandgate-launch --spare` processes whose parent is `parent`. */
function sparesOf(parent: number): number[] {
  const pids: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const cmdline = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      if (ppid === parent && cmdline.startsWith(`${NATIVE_LAUNCHER}\0--spare\0`)) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/** Alive and not a zombie. */
function running(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !['Z', 'X'].includes(stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3));
  } catch {
    return false;
  }
}

async function until(what: string, check: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('a spare wrapper (started ahead of need, the native helper only)', () => {
  const launcher = () => new ConfinedLauncher({ uid: UID, gid: GID, isolateNetwork: true, cgroupDirs }, { netnsPath: `/run/netns/${NETNS}`, proxyPort: 3128 }, NATIVE_LAUNCHER);

  it('runs the command it is handed exactly as a freshly spawned wrapper would, in the working directory asked for', async () => {
    const l = launcher();
    try {
      // None kept yet: with posix_spawn one is started on the spot, no fork (the shell chain and
      // Node's spawn would answer null, and the caller spawns).
      const first = l.startInSpare(['/bin/true'], {}, '/');
      expect(first).not.toBeNull();
      expect((await collect(first!)).code).toBe(0);
      l.keepSpareReady();
      // Started through the addon (built at npm install), not by a fork of this process.
      expect(l.spareSpawner).toBe('posix_spawn');
      await until('a spare', () => sparesOf(process.pid).length === 1);
      const [spare] = sparesOf(process.pid);
      const child = l.startInSpare(['/bin/sh', '-c', `echo "cwd $(pwd)"; ${REPORT}`], REPORT_ENV, '/tmp')!;
      expect(child.pid).toBe(spare); // the waiting process itself, not a new fork
      const r = await collect(child);
      expectConfined(r);
      expect(r.out).toContain('cwd /tmp\n');
      // Its spec descriptor went with the confinement: only the three standard ones are sockets.
      const fds = r.out.split('\n').filter((l) => l.startsWith('fd '));
      expect(fds.filter((f) => !/^fd [012] /.test(f) && f.includes('socket:'))).toEqual([]);
      // The next one is started once this exec ended; a working directory that is gone fails it with 125.
      await until('the next spare', () => sparesOf(process.pid).length === 1);
      const bad = await collect(l.startInSpare(['/bin/true'], REPORT_ENV, '/nonexistent-dir')!);
      expect(bad.code).toBe(125);
      expect(bad.err).toContain('/nonexistent-dir');
    } finally {
      l.close();
    }
  });

  it('starts one on the spot for an exec that finds none waiting (posix_spawn): execs at once all run in spares, confined', async () => {
    const l = launcher();
    try {
      l.keepSpareReady();
      await until('a spare', () => sparesOf(process.pid).length === 1);
      // Three at once: the first takes the waiting spare, the others get fresh ones, not null.
      const children = [0, 1, 2].map(() => l.startInSpare(['/bin/sh', '-c', REPORT], REPORT_ENV, '/'));
      expect(children.every((c) => c !== null)).toBe(true);
      for (const r of await Promise.all(children.map((c) => collect(c!)))) expectConfined(r);
    } finally {
      l.close();
    }
  });

  it('is retired by close(): it exits and no new one is started', async () => {
    const l = launcher();
    l.keepSpareReady();
    await until('a spare', () => sparesOf(process.pid).length === 1);
    const [spare] = sparesOf(process.pid);
    l.close();
    await until(`spare ${spare} to exit`, () => !running(spare!));
    expect(l.startInSpare(['/bin/true'], {}, '/')).toBeNull();
    await new Promise((r) => setTimeout(r, 100));
    expect(sparesOf(process.pid)).toEqual([]);
  });

  it.each(['posix_spawn', 'node'])('never outlives its supervisor: a kill -9 of the process that keeps it ends it too (spawned by %s)', async (spawner) => {
    const spareModule = path.resolve(import.meta.dirname, '../src/workload/spare.ts');
    const nativeSpawnModule = path.resolve(import.meta.dirname, '../src/workload/native-spawn.ts');
    const keeper = spawn(process.execPath, [
      '--input-type=module',
      '-e',
      `const { SpareWrapper } = await import(${JSON.stringify(spareModule)});
       const { loadNativeSpawn } = await import(${JSON.stringify(nativeSpawnModule)});
       const spare = new SpareWrapper(${JSON.stringify(NATIVE_LAUNCHER)}, { PATH: '/usr/bin:/bin' }, ${spawner === 'node' ? 'null' : 'loadNativeSpawn()'});
       spare.fill();
       process.stdout.write(spare.spawner + '\\n');
       setInterval(() => {}, 1000);`,
    ], { stdio: ['ignore', 'pipe', 'ignore'] });
    let said = '';
    keeper.stdout!.on('data', (c: Buffer) => (said += c.toString()));
    try {
      await until("the keeper's word on how it spawned", () => said.endsWith('\n'), 10_000);
      expect(said.trim()).toBe(spawner);
      await until('the keeper\'s spare', () => sparesOf(keeper.pid!).length === 1, 10_000);
      const [spare] = sparesOf(keeper.pid!);
      keeper.kill('SIGKILL');
      await until(`spare ${spare} to exit after its keeper's kill -9`, () => !running(spare!));
    } finally {
      keeper.kill('SIGKILL');
    }
  });
});
