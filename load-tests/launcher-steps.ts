// Issue 16, item 1: where an exec's process start goes. Every workload process starts through the
// confining wrapper (apps/supervisor/src/workload/launcher.ts): bash joins the workload cgroups and
// closes stray descriptors, then execs nsenter (network namespace), setpriv (uid/gid drop,
// no_new_privs) and `env -i` (the workload's environment) before the command itself. This spawns
// each step alone in front of `/bin/true`, the whole wrapper as the supervisor builds it, and the
// bare `/bin/true`, and the native helper (native/sandgate-launch.c: the same steps in one execve), from Node's child_process.spawn (what the supervisor uses), round-robin in one
// run so the machine's noise hits every path alike. Each step's cost is its time minus the bare
// spawn's; their sum next to the whole wrapper's shows whether the chain of execs is the cost.
//
// Runs as root on the host: the wrapper's cgroups are made for the run (under every v1 hierarchy
// of memory, cpu and pids, or the cgroup2 mount) and removed after; the namespace entered is a
// network namespace made for the run (`ip netns add`), removed after.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { ConfinedLauncher, NATIVE_LAUNCHER } from '@sandgate/supervisor';
import { findHierarchies, parseMountinfo } from '@sandgate/compute';
import { COMMON_OPTIONS, emitReport, now, onCleanup, runMain, type BenchReport } from './bench.ts';
import { ms, summarise } from './stats.ts';

const { values } = parseArgs({
  options: {
    iterations: { type: 'string', default: '200' },
    warmup: { type: 'string', default: '10' },
    ...COMMON_OPTIONS,
  },
});
const iterations = Number(values.iterations);
const warmup = Number(values.warmup);

/** Spawns `file args` with `env`, resolves with the ms until it exited; rejects unless it exited 0. */
function timedSpawn(file: string, args: string[], env: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = now();
    const child = spawn(file, args, { env, stdio: 'ignore' });
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      const elapsed = now() - t0;
      if (code === 0) resolve(elapsed);
      else reject(new Error(`${file} ${args.join(' ')} exited ${code ?? signal}`));
    });
  });
}

function which(tool: string): string {
  for (const dir of ['/usr/bin', '/bin', '/usr/sbin', '/sbin']) if (fs.existsSync(`${dir}/${tool}`)) return `${dir}/${tool}`;
  throw new Error(`${tool} not found (util-linux / coreutils)`);
}

/** One cgroup per hierarchy for the run, as the local driver gives a sandbox's workload. */
function makeCgroups(): string[] {
  const mounts = parseMountinfo(fs.readFileSync('/proc/self/mountinfo', 'utf8'));
  const hierarchies = findHierarchies(mounts, (m) => {
    try {
      return fs.readFileSync(`${m}/cgroup.controllers`, 'utf8').trim().split(/\s+/);
    } catch {
      return null;
    }
  });
  const dirs = hierarchies.map((h) => path.join(h.mount, `sandgate-launcher-bench-${process.pid}`));
  for (const d of dirs) {
    fs.mkdirSync(d);
    onCleanup(`remove cgroup ${d}`, () => fs.rmdirSync(d));
  }
  return dirs;
}

function makeNetns(): string {
  const name = `sg-launcher-bench-${process.pid}`;
  const add = spawnSync('ip', ['netns', 'add', name], { encoding: 'utf8' });
  if (add.status !== 0) throw new Error(`ip netns add ${name} failed: ${add.stderr}`);
  onCleanup(`remove netns ${name}`, () => spawnSync('ip', ['netns', 'delete', name]));
  return `/run/netns/${name}`;
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('run as root: the wrapper joins cgroups and enters a network namespace');
  const started = now();
  const cgroupDirs = makeCgroups();
  const netnsPath = makeNetns();
  if (!fs.existsSync(NATIVE_LAUNCHER)) throw new Error(`${NATIVE_LAUNCHER} not built (npm install runs apps/supervisor/native/build.sh)`);
  const wrapper = (nativeLauncher: string | null) =>
    new ConfinedLauncher({ uid: 10001, gid: 10001, isolateNetwork: true, cgroupDirs }, { netnsPath, proxyPort: 3128 }, nativeLauncher).command(['/bin/true'], {
      PATH: '/usr/bin:/bin',
      HOME: '/sandbox',
    });
  const chain = wrapper(null);
  const native = wrapper(NATIVE_LAUNCHER);
  const plain = { PATH: '/usr/bin:/bin' };
  const bash = fs.existsSync('/bin/bash') ? '/bin/bash' : '/bin/sh';
  const paths: { name: string; file: string; args: string[]; env: Record<string, string> }[] = [
    { name: 'bare spawn of /bin/true (the floor)', file: '/bin/true', args: [], env: plain },
    { name: `${bash} -c 'exec /bin/true'`, file: bash, args: ['-c', 'exec /bin/true'], env: plain },
    { name: 'nsenter --net=<netns> -- /bin/true', file: which('nsenter'), args: [`--net=${netnsPath}`, '--', '/bin/true'], env: plain },
    {
      name: 'setpriv --reuid --regid --clear-groups --no-new-privs -- /bin/true',
      file: which('setpriv'),
      args: ['--reuid=10001', '--regid=10001', '--clear-groups', '--no-new-privs', '--', '/bin/true'],
      env: plain,
    },
    { name: 'env -i -- K=V… /bin/true', file: which('env'), args: ['-i', '--', 'PATH=/usr/bin:/bin', 'HOME=/sandbox', '/bin/true'], env: plain },
    { name: 'the whole wrapper as the shell chain running /bin/true', file: chain.file, args: chain.args, env: chain.env },
    { name: 'the whole wrapper as the native helper running /bin/true', file: native.file, args: native.args, env: native.env },
  ];
  const samples: number[][] = paths.map(() => []);
  for (let i = 0; i < warmup + iterations; i++) {
    // Round-robin, the order rotated every iteration so no path always follows the same one.
    for (let k = 0; k < paths.length; k++) {
      const j = (i + k) % paths.length;
      const p = paths[j]!;
      const elapsed = await timedSpawn(p.file, p.args, p.env);
      if (i >= warmup) samples[j]!.push(elapsed);
    }
  }
  const stats = samples.map(summarise);
  const floor = stats[0]!.p50;
  const stepCosts = stats.slice(1, 5).map((s) => s.p50 - floor);
  const wholeCost = stats[5]!.p50 - floor;
  const nativeCost = stats[6]!.p50 - floor;
  const report: BenchReport = {
    id: 'launcher-steps',
    title: "Where a workload process's start goes: the wrapper's steps",
    command: `node load-tests/launcher-steps.ts --iterations ${iterations} --warmup ${warmup}`,
    tables: [
      {
        caption: `Node child_process.spawn until exit, ${iterations} of each after ${warmup} warm-up rounds, round-robin; run as root on the host (cgroups and a network namespace made for the run)`,
        headers: ['path', 'p50', 'p90', 'p99', 'mean', 'p50 / floor', 'p50 − floor'],
        rows: paths.map((p, j) => [p.name, ms(stats[j]!.p50), ms(stats[j]!.p90), ms(stats[j]!.p99), ms(stats[j]!.mean), (stats[j]!.p50 / floor).toFixed(2), j === 0 ? '—' : ms(stats[j]!.p50 - floor)]),
      },
    ],
    notes: [
      `the four steps alone add ${stepCosts.map((c) => c.toFixed(2)).join(' + ')} = ${stepCosts.reduce((a, b) => a + b, 0).toFixed(2)} ms at p50; the shell chain adds ${wholeCost.toFixed(2)} ms (it also joins ${cgroupDirs.length} cgroups, sets oom_score_adj and closes descriptors in bash)`,
      `the native helper (same steps, one execve) adds ${nativeCost.toFixed(2)} ms: native / shell chain at p50 = ${(stats[6]!.p50 / stats[5]!.p50).toFixed(2)}; the shell chain is ${(stats[5]!.p50 / floor).toFixed(2)}× the bare spawn, the native helper ${(stats[6]!.p50 / floor).toFixed(2)}×`,
    ],
    durationMs: now() - started,
  };
  emitReport(report, values['report-json']);
}

await runMain(main);
