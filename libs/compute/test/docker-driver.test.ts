// The docker driver against a real Docker engine (no mocks). Fails — never skips — when no engine
// answers: run scripts/ensure-docker.sh first (.ci/run does). The default sandbox image is built
// by scripts/build-sandbox-image.sh (quick when it exists); an image that cannot run Node is
// imported here from a tarball holding one text file.
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SUPERVISOR_NODE_FLAGS, type LaunchSpec } from '../src/driver.ts';
import { DockerDriver, type DockerHandle } from '../src/docker-driver.ts';
import { buildContainerCreateOptions, buildContainerEnv, DEFAULT_IMAGE, SUPERVISOR_CAPABILITIES } from '../src/docker/launch.ts';
import { endpointsForBridge } from '../src/docker/network.ts';
import { demuxDockerStream, describeFailure, elfInterpreter } from '../src/docker/diagnose.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(here, '../../..');
const fakeSupervisor = path.join(here, 'docker-fake-supervisor.mjs');
const realSupervisor = path.join(repoRoot, 'apps', 'supervisor', 'src', 'main.ts');
const NO_NODE_IMAGE = 'sandgate-test-nonode:latest';
const NO_LIBSTDCXX_IMAGE = 'sandgate-test-nolibstdcxx:latest';
// The default image with `ENV NODE_COMPILE_CACHE` naming a directory its workload can write.
const CACHE_ENV_IMAGE = 'sandgate-test-cache-env:latest';
const IMAGE_NODE_COMPILE_CACHE = '/sandbox/planted-cache';
// Every sandbox id of this run starts with this, so checks for leftovers ignore other runs.
const PREFIX = `dt${process.pid}-`;
// A sandbox network of this run's own: created by the driver, removed in afterAll.
const NETWORK = `sgt-net-${process.pid}`;
/** CapEff of a process holding exactly SUPERVISOR_CAPABILITIES (DAC_READ_SEARCH 2, KILL 5, SETGID 6, SETUID 7, NET_ADMIN 12, SYS_PTRACE 19, SYS_ADMIN 21). */
const SUPERVISOR_CAP_MASK = '00000000002810e4';

const docker = new Docker();
let stateDir: string;
let driver: DockerDriver;
let realDriver: DockerDriver;
const created = new Set<string>();

function spec(suffix: string, over: Partial<LaunchSpec> = {}): LaunchSpec {
  const sandboxId = PREFIX + suffix;
  created.add(sandboxId);
  return {
    sandboxId,
    command: ['sleep', '100000'],
    tty: false,
    environment: {},
    image: DEFAULT_IMAGE,
    gatewayEndpoints: '127.0.0.1:1',
    credential: `cred-${sandboxId}-s3cr3t`,
    logLevel: 'info',
    ...over,
  };
}

function dockerExec(container: string, argv: string[]): string {
  return execFileSync('docker', ['exec', container, ...argv], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/**
 * How many archive uploads (`docker cp` into it, the driver's owner change of /sandbox) the engine
 * saw for a container since `sinceMs`: its own `extract-to-dir` events.
 */
function archiveUploads(containerId: string, sinceMs: number): number {
  const seconds = (ms: number) => (ms / 1000).toFixed(3);
  const out = execFileSync(
    'docker',
    ['events', '--since', seconds(sinceMs), '--until', seconds(Date.now()), '--filter', `container=${containerId}`, '--filter', 'event=extract-to-dir', '--format', '{{.Action}}'],
    { encoding: 'utf8' },
  );
  return out.split('\n').filter((l) => l.startsWith('extract-to-dir')).length;
}

/** Runs argv in the container as the workload's uid (what the supervisor's wrapper does, minus the netns). */
function asWorkload(container: string, argv: string[]): { status: number | null; out: string } {
  const r = spawnSync('docker', ['exec', '--user', '10001:10001', container, ...argv], { encoding: 'utf8' });
  return { status: r.status, out: r.stdout + r.stderr };
}

async function waitFor<T>(what: string, fn: () => Promise<T | null | undefined | false>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
    await sleep(50);
  }
}

/** The fake supervisor's report, read from inside the container. */
async function report(container: string, timeoutMs = 15_000): Promise<Record<string, any>> {
  return waitFor(`report in ${container}`, async () => JSON.parse(dockerExec(container, ['cat', '/run/sandgate-report.json'])), timeoutMs);
}

async function labelled(kind: 'containers' | 'volumes'): Promise<string[]> {
  if (kind === 'containers') {
    const cs = await docker.listContainers({ all: true, filters: { label: ['sandgate.managed=true'] } });
    return cs.map((c) => c.Labels['sandgate.sandbox-id']).filter((id) => id?.startsWith(PREFIX));
  }
  const vs = await docker.listVolumes({ filters: { label: ['sandgate.managed=true'] } });
  return (vs.Volumes ?? []).map((v) => v.Labels?.['sandgate.sandbox-id']).filter((id) => id?.startsWith(PREFIX));
}

beforeAll(async () => {
  // Loud failure, not a skip: the docker driver is a first-class driver and CI must test it.
  const info = spawnSync('docker', ['info', '--format', '{{.ServerVersion}}'], { encoding: 'utf8' });
  if (info.status !== 0) {
    throw new Error(
      `no Docker engine answers (docker info: ${(info.stderr || info.error?.message || '').trim()}); ` +
        'run scripts/ensure-docker.sh (installs docker.io and starts dockerd)',
    );
  }
  await docker.ping();
  const build = spawnSync('bash', [path.join(repoRoot, 'scripts', 'build-sandbox-image.sh')], { encoding: 'utf8' });
  if (build.status !== 0) throw new Error(`scripts/build-sandbox-image.sh failed: ${build.stderr}`);
  // An image with no loader, no libc, no shell: Node cannot run in it.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sg-nonode-'));
  fs.mkdirSync(path.join(dir, 'etc'));
  fs.writeFileSync(path.join(dir, 'etc', 'README'), 'an image without a C library\n');
  const tar = spawnSync('tar', ['-C', dir, '-c', '.'], { maxBuffer: 1 << 20 });
  const imp = spawnSync('docker', ['import', '-', NO_NODE_IMAGE], { input: tar.stdout, encoding: 'utf8' });
  fs.rmSync(dir, { recursive: true, force: true });
  if (imp.status !== 0) throw new Error(`docker import failed: ${imp.stderr}`);

  // glibc without libstdc++: the loader runs, then node's libraries are missing.
  const node = fs.realpathSync(process.execPath);
  const libs = execFileSync('ldd', [node], { encoding: 'utf8' })
    .split('\n')
    .map((l) => /(\/\S+) \(0x/.exec(l)?.[1])
    .filter((p): p is string => p !== undefined && !/libstdc\+\+|libgcc_s/.test(p));
  const interp = elfInterpreter(node);
  if (!interp) throw new Error(`${node} has no ELF interpreter`);
  const paths = [...new Set([...libs, interp].map((p) => fs.realpathSync(p)).concat(libs, [interp]))];
  const tar2 = spawnSync('tar', ['-C', '/', '-c', '--dereference', ...paths.map((p) => p.slice(1))], { maxBuffer: 64 << 20 });
  if (tar2.status !== 0) throw new Error(`tar failed: ${tar2.stderr}`);
  const imp2 = spawnSync('docker', ['import', '-', NO_LIBSTDCXX_IMAGE], { input: tar2.stdout, encoding: 'utf8' });
  if (imp2.status !== 0) throw new Error(`docker import failed: ${imp2.stderr}`);
  const derived = spawnSync('docker', ['build', '-q', '-t', CACHE_ENV_IMAGE, '-'], { input: `FROM ${DEFAULT_IMAGE}\nENV NODE_COMPILE_CACHE=${IMAGE_NODE_COMPILE_CACHE}\n`, encoding: 'utf8' });
  if (derived.status !== 0) throw new Error(`docker build of ${CACHE_ENV_IMAGE} failed: ${derived.stderr}`);

  stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sg-docker-'));
  driver = new DockerDriver({ stateDir, repoRoot, supervisorEntry: fakeSupervisor, network: NETWORK });
  realDriver = new DockerDriver({ stateDir, repoRoot, supervisorEntry: realSupervisor, network: NETWORK });
}, 180_000);

afterAll(async () => {
  if (driver) {
    await Promise.all([...created].map((id) => driver.delete(id, null).catch(() => false)));
  }
  if (stateDir) fs.rmSync(stateDir, { recursive: true, force: true });
  spawnSync('docker', ['rmi', NO_NODE_IMAGE, NO_LIBSTDCXX_IMAGE, CACHE_ENV_IMAGE], { encoding: 'utf8' });
  spawnSync('docker', ['network', 'rm', NETWORK], { encoding: 'utf8' });
}, 120_000);

describe('container definition (pure)', () => {
  it('writes only HOME and the sandgate variables: never the sandbox\'s own (a file), never the credential', () => {
    const s: LaunchSpec = {
      sandboxId: 'abc',
      command: ['true'],
      tty: false,
      environment: { FOO: 'bar', SANDGATE_GATEWAY: 'evil:1', SANDGATE_MAIN_TTY: '1', LD_PRELOAD: '/sandbox/x.so', NODE_OPTIONS: '--require /sandbox/x.js' },
      image: 'x',
      gatewayEndpoints: 'lb:8080',
      credential: 'TOPSECRET',
      logLevel: '',
    };
    const workload = { uid: 10001, gid: 10001, isolateNetwork: true, cgroupDirs: [] };
    const env = buildContainerEnv(s, workload);
    expect(env).toEqual([
      'HOME=/sandbox',
      'SANDGATE_GATEWAY=lb:8080',
      'SANDGATE_SANDBOX_ID=abc',
      'SANDGATE_CREDENTIAL_FILE=/run/sandgate/credential',
      'SANDGATE_ENVIRONMENT_FILE=/run/sandgate/environment.json',
      'SANDGATE_MAIN_TTY=0',
      'SANDGATE_LOG_LEVEL=info',
      'SANDGATE_DEBUG_BREAK=',
      'SANDGATE_DEBUG_UNSAFE=0',
      'SANDGATE_WORKLOAD_UID=10001',
      'SANDGATE_WORKLOAD_GID=10001',
      'SANDGATE_NETWORK_ISOLATION=1',
      'SANDGATE_WORKLOAD_CGROUPS=',
      'SANDGATE_POLICY=',
      'SANDGATE_GATEWAY_CA_FILE=',
      'SANDGATE_GATEWAY_TLS_NAME=',
      'SANDGATE_COMPILE_CACHE=',
      'NODE_COMPILE_CACHE=',
      'SANDGATE_DEFER_MAIN=0',
    ]);
    const launch = {
      spec: s,
      image: 'x',
      command: ['true'],
      nodeHostPath: '/opt/node/bin/node',
      appHostPath: '/repo',
      supervisorRelPath: 'apps/supervisor/src/main.ts',
      credentialHostPath: '/state/docker/abc/credential',
      environmentHostPath: '/state/docker/abc/environment.json',
      network: 'sandgate',
      workload,
    };
    const opts = buildContainerCreateOptions({ ...launch, limits: { cpuMillis: 1500, memoryBytes: 512 * 1024 * 1024 } });
    expect(JSON.stringify(opts)).not.toContain('TOPSECRET');
    expect(opts.Entrypoint).toEqual(['/opt/sandgate/node/bin/node', ...SUPERVISOR_NODE_FLAGS, '/opt/sandgate/app/apps/supervisor/src/main.ts', '--']);
    expect(opts.User).toBe('0:0');
    const hc = opts.HostConfig!;
    expect(hc.NetworkMode).toBe('sandgate');
    expect(hc.CapDrop).toEqual(['ALL']);
    expect(hc.CapAdd).toEqual(['CAP_SYS_ADMIN', 'CAP_NET_ADMIN', 'CAP_SETUID', 'CAP_SETGID', 'CAP_KILL', 'CAP_SYS_PTRACE', 'CAP_DAC_READ_SEARCH']);
    expect(hc.SecurityOpt).toEqual(['no-new-privileges']);
    expect(hc.OomScoreAdj).toBe(0);
    expect(hc.Privileged).toBeUndefined();
    expect(hc.NanoCpus).toBe(1_500_000_000);
    expect(hc.Memory).toBe(536870912);
    expect(hc.MemorySwap).toBe(536870912);
    expect(hc.PidsLimit).toBe(1024); // DEFAULT_PIDS_LIMIT of driver.ts
    // Nothing but the runtime, the credential and the volume: no Docker socket, no host path.
    expect(hc.Mounts?.map((m) => m.Target)).toEqual(['/opt/sandgate/node/bin/node', '/opt/sandgate/app', '/run/sandgate/credential', '/run/sandgate/environment.json', '/sandbox']);
    expect(JSON.stringify(opts)).not.toMatch(/docker\.sock/);
    expect(hc.Binds).toBeUndefined();
    const noLimits = buildContainerCreateOptions({ ...launch, limits: { pids: 64 } }).HostConfig!;
    expect([noLimits.NanoCpus, noLimits.Memory, noLimits.MemorySwap, noLimits.PidsLimit]).toEqual([undefined, undefined, undefined, 64]);

    // With workload cgroups the limits are theirs: none on the container, which holds the supervisor.
    const dirs = [{ hostDir: '/sys/fs/cgroup/memory/sandgate-docker/abc/workload', containerDir: '/run/sandgate/cgroup/memory' }];
    const cg = buildContainerCreateOptions({
      ...launch,
      limits: { cpuMillis: 1500, memoryBytes: 512 * 1024 * 1024, pids: 64 },
      cgroups: { parent: '/sandgate-docker/abc', dirs, hostNamespace: false },
    }).HostConfig!;
    expect(cg.CgroupParent).toBe('/sandgate-docker/abc');
    expect([cg.NanoCpus, cg.Memory, cg.MemorySwap, cg.PidsLimit]).toEqual([undefined, undefined, undefined, 1024]);
    expect(cg.Mounts?.at(-1)).toEqual({ Type: 'bind', Source: dirs[0]!.hostDir, Target: '/run/sandgate/cgroup/memory', ReadOnly: false });
    expect((cg as Record<string, unknown>).CgroupnsMode).toBeUndefined();
  });

  it('rewrites loopback gateway endpoints to the bridge gateway, leaves the others', () => {
    expect(endpointsForBridge('127.0.0.1:7001, localhost:7002,[::1]:7003,127.9.9.9:7004', '172.30.0.1')).toBe(
      '172.30.0.1:7001,172.30.0.1:7002,172.30.0.1:7003,172.30.0.1:7004',
    );
    expect(endpointsForBridge('lb.example:443,10.0.0.5:8080,172.30.0.1:9', '172.30.0.1')).toBe('lb.example:443,10.0.0.5:8080,172.30.0.1:9');
  });

  it('decodes docker log frames and finds the node binary loader', () => {
    const frame = (t: number, s: string) => {
      const b = Buffer.from(s);
      const h = Buffer.alloc(8);
      h[0] = t;
      h.writeUInt32BE(b.length, 4);
      return Buffer.concat([h, b]);
    };
    expect(demuxDockerStream(Buffer.concat([frame(1, 'out\n'), frame(2, 'err\n')]))).toBe('out\nerr\n');
    expect(demuxDockerStream(Buffer.from('plain tty text'))).toBe('plain tty text');
    const interp = elfInterpreter(fs.realpathSync(process.execPath));
    expect(interp).toMatch(/^\/lib.*\/ld-linux.*\.so\.\d$/);
    expect(
      describeFailure({
        image: 'alpine',
        exitCode: 127,
        oomKilled: false,
        dockerError: '',
        ranMs: 20,
        logTail: '',
        loader: interp,
        imageHasLoader: false,
        imageUser: '',
      }),
    ).toMatch(/^supervisor could not start in image alpine: exit code 127: the image has no glibc dynamic loader/);
  });
});

describe('docker driver (real dockerd)', () => {
  it('creates a confined container: labels, read-only mounts, init, its own network, few capabilities, the credential as a root-only file', async () => {
    const s = spec('basic', {
      environment: { FOO: 'bar', SANDGATE_GATEWAY: 'evil:1', SANDGATE_CREDENTIAL_FILE: '/etc/passwd' },
    });
    // How long a create takes is measured by load-tests/docker-create.ts, not asserted here.
    const createdAt = Date.now() - 1000;
    const handle = (await driver.create(s)) as unknown as DockerHandle;
    expect(handle.container).toBe(`sandgate-${s.sandboxId}`);
    expect(await driver.inspect(s.sandboxId, handle as any)).toBe('running');

    const info = await docker.getContainer(handle.containerId).inspect();
    expect(info.Config.Labels).toMatchObject({ 'sandgate.managed': 'true', 'sandgate.sandbox-id': s.sandboxId });
    expect(info.HostConfig.Init).toBe(true);
    expect(info.HostConfig.RestartPolicy?.Name).toBe('no');
    // Its own bridge, made by the driver with inter-container traffic off; never the host's.
    expect(info.HostConfig.NetworkMode).toBe(NETWORK);
    expect(Object.keys(info.NetworkSettings.Networks)).toEqual([NETWORK]);
    const net = await docker.getNetwork(NETWORK).inspect();
    expect(net.Driver).toBe('bridge');
    expect(net.Options).toMatchObject({ 'com.docker.network.bridge.enable_icc': 'false' });
    expect(net.Labels).toMatchObject({ 'sandgate.managed': 'true' });
    expect(info.HostConfig.CapDrop).toEqual(['ALL']);
    expect([...(info.HostConfig.CapAdd ?? [])].sort()).toEqual([...SUPERVISOR_CAPABILITIES].sort());
    expect(info.HostConfig.SecurityOpt).toEqual(['no-new-privileges']);
    expect(info.HostConfig.Privileged).toBe(false);
    expect(info.HostConfig.PidsLimit).toBe(1024);
    expect(info.Config.User).toBe('0:0');
    const mounts = Object.fromEntries(info.Mounts.map((m) => [m.Destination, m]));
    // No Docker socket (nor any other host path) inside.
    expect(Object.keys(mounts).sort()).toEqual([
      '/opt/sandgate/app',
      '/opt/sandgate/node/bin/node',
      '/run/sandgate/cgroup/cpu',
      '/run/sandgate/cgroup/memory',
      '/run/sandgate/cgroup/pids',
      '/run/sandgate/compile-cache',
      '/run/sandgate/credential',
      '/run/sandgate/environment.json',
      '/sandbox',
    ]);
    expect(mounts['/run/sandgate/compile-cache']).toMatchObject({ Type: 'bind', RW: false });
    expect(mounts['/run/sandgate/environment.json']).toMatchObject({ Type: 'bind', RW: false });
    // The workload cgroup binds are this sandbox's own cgroup directories, nothing else of the host's.
    for (const c of ['cpu', 'memory', 'pids']) {
      expect(mounts[`/run/sandgate/cgroup/${c}`]!.Source).toMatch(new RegExp(`^/sys/fs/cgroup/[a-z,]+/sandgate-docker/${s.sandboxId}/workload$`));
    }
    expect(info.HostConfig.Binds ?? []).toEqual([]);
    expect(mounts['/opt/sandgate/node/bin/node']).toMatchObject({ Type: 'bind', RW: false });
    expect(mounts['/opt/sandgate/app']).toMatchObject({ Type: 'bind', RW: false, Source: fs.realpathSync(repoRoot) });
    expect(mounts['/run/sandgate/credential']).toMatchObject({ Type: 'bind', RW: false });
    expect(mounts['/sandbox']).toMatchObject({ Type: 'volume', Name: `sandgate-${s.sandboxId}`, RW: true });
    const vol = await docker.getVolume(`sandgate-${s.sandboxId}`).inspect();
    expect(vol.Labels).toMatchObject({ 'sandgate.managed': 'true', 'sandgate.sandbox-id': s.sandboxId });
    // The credential never appears in the container's configuration.
    expect(JSON.stringify(info.Config)).not.toContain(s.credential);
    const credFile = mounts['/run/sandgate/credential'].Source;
    expect(fs.statSync(credFile).mode & 0o777).toBe(0o600);
    expect(fs.statSync(credFile).uid).toBe(0);
    expect(credFile.startsWith(fs.realpathSync(stateDir) + '/docker/') || credFile.startsWith(stateDir + '/docker/')).toBe(true);

    const r = await report(handle.container);
    // The supervisor: root, exactly the supervisor's capabilities, no-new-privileges, seccomp on.
    expect(r.uid).toBe(0);
    expect(r.capEff).toBe(SUPERVISOR_CAP_MASK);
    expect(r.capBnd).toBe(SUPERVISOR_CAP_MASK);
    expect(r.noNewPrivs).toBe('1');
    expect(r.seccomp).toBe('2');
    expect(r.oomScoreAdj).toBe(0);
    expect(r.credential).toBe(s.credential);
    expect(r.credentialWrite).toBe('EROFS');
    // /sandbox is the workload's: root without CAP_DAC_OVERRIDE cannot write there, uid 10001 can.
    expect(r.sandboxWrite).toBe('EACCES');
    expect(dockerExec(handle.container, ['stat', '-c', '%u:%g %a', '/sandbox']).trim()).toBe('10001:10001 755');
    // …and it came from the default image (its sandgate.sandbox-owner label): no archive upload.
    expect((await docker.getImage(DEFAULT_IMAGE).inspect()).Config.Labels).toMatchObject({ 'sandgate.sandbox-owner': '10001:10001' });
    expect(archiveUploads(handle.containerId, createdAt)).toBe(0);
    expect(asWorkload(handle.container, ['sh', '-c', 'echo mine > /sandbox/w && cat /sandbox/w'])).toEqual({ status: 0, out: 'mine\n' });
    // The workload's uid cannot read the credential (root 0600), nor the supervisor's /proc.
    const cred = asWorkload(handle.container, ['cat', '/run/sandgate/credential']);
    expect(cred.status).not.toBe(0);
    expect(cred.out).toMatch(/Permission denied/);
    expect(cred.out).not.toContain(s.credential);
    const environ = asWorkload(handle.container, ['cat', `/proc/${r.pid}/environ`]);
    expect(environ.status).not.toBe(0);
    expect(asWorkload(handle.container, ['sh', '-c', 'test -e /var/run/docker.sock || test -e /run/docker.sock; echo $?']).out.trim()).toBe('1');
    expect(r.cwd).toBe('/sandbox');
    expect(r.argv.slice(1)).toEqual(['/opt/sandgate/app/libs/compute/test/docker-fake-supervisor.mjs', '--', 'sleep', '100000']);
    expect(r.env.FOO).toBeUndefined(); // not in the supervisor's environment…
    expect(JSON.parse(r.sandboxEnvFile).FOO).toBe('bar'); // …but in the file it hands to workloads
    expect(r.env.SANDGATE_ENVIRONMENT_FILE).toBe('/run/sandgate/environment.json');
    // Loopback endpoints are the host's: rewritten to the bridge's gateway address.
    const bridgeGateway = net.IPAM?.Config?.[0]?.Gateway;
    expect(bridgeGateway).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    expect(r.env.SANDGATE_GATEWAY).toBe(`${bridgeGateway}:1`);
    expect(r.env.SANDGATE_WORKLOAD_UID).toBe('10001');
    expect(r.env.SANDGATE_WORKLOAD_GID).toBe('10001');
    expect(r.env.SANDGATE_NETWORK_ISOLATION).toBe('1');
    expect(r.env.SANDGATE_WORKLOAD_CGROUPS).toMatch(/^\/run\/sandgate\/cgroup\//);
    expect(r.env.SANDGATE_CREDENTIAL_FILE).toBe('/run/sandgate/credential');
    expect(r.env.SANDGATE_SANDBOX_ID).toBe(s.sandboxId);
    expect(r.env.SANDGATE_MAIN_TTY).toBe('0');
    expect(Object.values(r.env)).not.toContain(s.credential);
    // Docker's init is PID 1 and the supervisor its child; a network namespace that is not the host's.
    expect(r.pid).not.toBe(1);
    expect(dockerExec(handle.container, ['cat', '/proc/1/cmdline']).split('\0')[0]).toBe('/sbin/docker-init');
    const ps = dockerExec(handle.container, ['ps', '-eo', 'pid,args']);
    expect(ps).toMatch(/fake-supervisor\.mjs -- sleep 100000/);
    expect(ps).toMatch(/\bsleep 100000/);
    expect(fs.readlinkSync('/proc/self/ns/net')).not.toBe(
      (await waitFor('net ns', async () => dockerExec(handle.container, ['readlink', '/proc/self/ns/net']).trim())),
    );

    expect((await driver.list()).find((o) => o.sandboxId === s.sandboxId)?.state).toBe('running');
    await expect(driver.create(s)).rejects.toThrow(/already exists/);
  });

  it('fills the supervisors\' compile cache in a container of the default image (never a caller\'s) and shows it read-only: nothing in a sandbox can plant code there', async () => {
    const s = spec('cache');
    const handle = (await driver.create(s)) as unknown as DockerHandle;
    // The fill ran in its own container (the fake supervisor's --fill-compile-cache writes one entry).
    const entry = path.join(fs.realpathSync(stateDir), 'docker-compile-cache', 'fake-entry');
    await waitFor('the fill to write its entry', async () => fs.existsSync(entry), 30_000);
    const later = spec('cache-later');
    const h2 = (await driver.create(later)) as unknown as DockerHandle;
    const r = await report(h2.container);
    expect(r.env.SANDGATE_COMPILE_CACHE).toBe('/run/sandgate/compile-cache');
    expect(r.env.NODE_COMPILE_CACHE).toBe('/run/sandgate/compile-cache'); // Node's own, from its start
    expect(r.compileCacheEntry).toBe('cached');
    expect(r.compileCacheWrite).toBe('EROFS'); // the attack: code planted for the next supervisor (root in the container)
    expect(fs.existsSync(path.join(path.dirname(entry), 'planted'))).toBe(false);
    // The fill container removed itself; it is never one of the driver's sandboxes.
    const fills = await docker.listContainers({ all: true, filters: { label: ['sandgate.managed=compile-cache'] } });
    expect(fills).toEqual([]);
    for (const [id, h] of [[s.sandboxId, handle], [later.sandboxId, h2]] as const) expect(await driver.delete(id, h as any)).toBe(true);

    // The attack: a caller's image is the first a fresh driver starts. Node would run on that
    // image's libraries while writing code for every later supervisor; the fill must use the
    // operator's default image (here an image that cannot run node at all: a fill with it would
    // write nothing).
    const fresh = fs.mkdtempSync(path.join(os.tmpdir(), 'sg-docker-cache-'));
    const first = new DockerDriver({ stateDir: fresh, repoRoot, supervisorEntry: fakeSupervisor, network: NETWORK });
    const theirs = spec('cache-their-image', { image: NO_NODE_IMAGE, command: ['sleep', '1000'] });
    const h4 = await first.create(theirs);
    await waitFor('the fill (default image) to write its entry', async () => fs.existsSync(path.join(fs.realpathSync(fresh), 'docker-compile-cache', 'fake-entry')), 30_000);
    expect(await first.delete(theirs.sandboxId, h4)).toBe(true);
    fs.rmSync(fresh, { recursive: true, force: true });

    const off = new DockerDriver({ stateDir, repoRoot, supervisorEntry: fakeSupervisor, network: NETWORK, compileCache: false });
    const plain = spec('cache-off');
    const h3 = (await off.create(plain)) as unknown as DockerHandle;
    const r3 = await report(h3.container);
    expect(r3.env.SANDGATE_COMPILE_CACHE).toBe('');
    expect(r3.env.NODE_COMPILE_CACHE).toBe('');
    expect(r3.compileCacheEntry).toMatch(/^ERR:/);
    const info = await docker.getContainer(h3.containerId).inspect();
    expect(info.Mounts.map((m) => m.Destination)).not.toContain('/run/sandgate/compile-cache');
    expect(await off.delete(plain.sandboxId, h3 as any)).toBe(true);
  });

  it('starts a warm-pool member only once the compile cache is filled', async () => {
    // A fresh driver's first sandbox is a member: its launch waits for the fill's container,
    // which takes a second here (fixtures/fake-supervisor.mjs), so the member starts with the cache whole.
    const fresh = fs.mkdtempSync(path.join(os.tmpdir(), 'sg-docker-fill-'));
    const d = new DockerDriver({ stateDir: fresh, repoRoot, supervisorEntry: fakeSupervisor, network: NETWORK });
    const member = spec('fill-member', { deferMain: true });
    const h = (await d.create(member)) as unknown as DockerHandle;
    expect(fs.existsSync(path.join(fs.realpathSync(fresh), 'docker-compile-cache', 'fake-entry')), 'the fill ended before the member was started').toBe(true);
    expect((await report(h.container)).compileCacheEntry).toBe('cached');
    expect(await d.delete(member.sandboxId, h as any)).toBe(true);
    fs.rmSync(fresh, { recursive: true, force: true });
  });

  it("an image's ENV NODE_COMPILE_CACHE never reaches the supervisor's Node (a cache its workload could write), and still reaches the workload", async () => {
    for (const [label, d, supervisorSees] of [['cache on', driver, '/run/sandgate/compile-cache'], ['cache off', new DockerDriver({ stateDir, repoRoot, supervisorEntry: fakeSupervisor, network: NETWORK, compileCache: false }), '']] as const) {
      // The attack: a workload-writable directory as the cache Node reads compiled code from at
      // the supervisor's start (root in the container, the supervisor's capabilities).
      const s = spec(`cache-env-${label.replace(' ', '-')}`, { image: CACHE_ENV_IMAGE });
      const h = (await d.create(s)) as unknown as DockerHandle;
      const r = await report(h.container);
      expect(r.env.NODE_COMPILE_CACHE, label).toBe(supervisorSees);
      expect(JSON.parse(r.sandboxEnvFile).NODE_COMPILE_CACHE, label).toBe(IMAGE_NODE_COMPILE_CACHE); // the image's, for its workload
      expect(await d.delete(s.sandboxId, h as any)).toBe(true);
    }
    // The sandbox's own variable wins over the image's.
    const own = spec('cache-env-own', { image: CACHE_ENV_IMAGE, environment: { NODE_COMPILE_CACHE: '/tmp/mine' } });
    const h = (await driver.create(own)) as unknown as DockerHandle;
    expect(JSON.parse((await report(h.container)).sandboxEnvFile).NODE_COMPILE_CACHE).toBe('/tmp/mine');
    expect(await driver.delete(own.sandboxId, h as any)).toBe(true);
  });

  it('puts the limits on the workload cgroups (cgroupfs engines), falls back to the image command, removes the cgroups on delete', async () => {
    const s = spec('limits', { command: [] });
    const handle = (await driver.create({ ...s, limits: { cpuMillis: 500, memoryBytes: 256 * 1024 * 1024, pids: 128 } })) as unknown as DockerHandle;
    const info = await docker.getContainer(handle.containerId).inspect();
    expect(info.Config.Cmd).toEqual(['/bin/bash']); // the sandbox image's CMD
    expect(info.HostConfig.CgroupParent).toBe(`/sandgate-docker/${s.sandboxId}`);
    // The container (the supervisor) is not limited by them…
    expect(info.HostConfig.Memory ?? 0).toBe(0);
    expect(info.HostConfig.NanoCpus ?? 0).toBe(0);
    // …its workload cgroups are, and the supervisor is told to put workload processes there.
    const cg = (c: string, f: string) => fs.readFileSync(`/sys/fs/cgroup/${c}/sandgate-docker/${s.sandboxId}/workload/${f}`, 'utf8').trim();
    expect(cg('memory', 'memory.limit_in_bytes')).toBe(String(256 * 1024 * 1024));
    expect(cg('memory', 'memory.memsw.limit_in_bytes')).toBe(String(256 * 1024 * 1024));
    expect(cg('cpu', 'cpu.cfs_quota_us')).toBe('50000');
    expect(cg('cpu', 'cpu.cfs_period_us')).toBe('100000');
    expect(cg('pids', 'pids.max')).toBe('128');
    const r = await report(handle.container);
    expect(r.env.SANDGATE_WORKLOAD_CGROUPS.split(':').sort()).toEqual(['/run/sandgate/cgroup/cpu', '/run/sandgate/cgroup/memory', '/run/sandgate/cgroup/pids']);
    expect(dockerExec(handle.container, ['cat', '/run/sandgate/cgroup/memory/memory.limit_in_bytes']).trim()).toBe(String(256 * 1024 * 1024));
    // The workload's uid cannot change them.
    expect(asWorkload(handle.container, ['sh', '-c', 'echo 999999999 > /run/sandgate/cgroup/memory/memory.limit_in_bytes']).status).not.toBe(0);
    // Container and volume removed behind the driver's back: the cgroups left are reported gone…
    execFileSync('docker', ['rm', '-f', handle.container]);
    execFileSync('docker', ['volume', 'rm', '-f', `sandgate-${s.sandboxId}`]);
    expect((await driver.list()).find((o) => o.sandboxId === s.sandboxId)?.state).toBe('gone');
    // …and reconciliation's delete removes them, in every hierarchy.
    await driver.delete(s.sandboxId, null);
    const left = execFileSync('sh', ['-c', `ls -d /sys/fs/cgroup/*/sandgate-docker/${s.sandboxId} 2>/dev/null || true`], { encoding: 'utf8' });
    expect(left).toBe('');
  });

  it("the policy's workload user: /sandbox is given to it and the supervisor is told; root is refused", async () => {
    const s = spec('user', { workloadUser: { uid: 12345, gid: 23456 } });
    const createdAt = Date.now() - 1000;
    const handle = (await driver.create(s)) as unknown as DockerHandle;
    const r = await report(handle.container);
    expect([r.env.SANDGATE_WORKLOAD_UID, r.env.SANDGATE_WORKLOAD_GID]).toEqual(['12345', '23456']);
    expect(dockerExec(handle.container, ['stat', '-c', '%u:%g', '/sandbox']).trim()).toBe('12345:23456');
    // The image's label names another owner: the driver changed it, through one archive upload.
    expect(archiveUploads(handle.containerId, createdAt)).toBe(1);
    expect(await driver.delete(s.sandboxId, handle as any)).toBe(true);
    await expect(driver.create(spec('root', { workloadUser: { uid: 0, gid: 0 } }))).rejects.toThrow(/workloadUser\.uid must be a numeric id other than 0/);
  });

  it('limitsOn container: the limits are HostConfig limits on the whole container', async () => {
    const whole = new DockerDriver({ stateDir, repoRoot, supervisorEntry: fakeSupervisor, network: NETWORK, limitsOn: 'container' });
    const s = spec('whole');
    const handle = (await whole.create({ ...s, limits: { cpuMillis: 500, memoryBytes: 256 * 1024 * 1024, pids: 128 } })) as unknown as DockerHandle;
    const info = await docker.getContainer(handle.containerId).inspect();
    expect(info.HostConfig.NanoCpus).toBe(500_000_000);
    expect(info.HostConfig.Memory).toBe(256 * 1024 * 1024);
    expect(info.HostConfig.MemorySwap).toBe(256 * 1024 * 1024);
    expect(info.HostConfig.PidsLimit).toBe(128);
    expect(info.HostConfig.CgroupParent ?? '').toBe('');
    expect((await report(handle.container)).env.SANDGATE_WORKLOAD_CGROUPS).toBe('');
    // Usage from the engine's one-shot stats: the running supervisor has used CPU and memory.
    const usage = await whole.usage(s.sandboxId, handle as any);
    expect(usage!.cpuSeconds).toBeGreaterThan(0);
    expect(usage!.memoryBytes).toBeGreaterThan(0);
    expect(usage!.memoryBytes).toBeLessThanOrEqual(256 * 1024 * 1024);
    expect(await whole.delete(s.sandboxId, handle as any)).toBe(true);
    expect(await whole.usage(s.sandboxId, handle as any)).toBeNull();
  });

  it('stop keeps the files, start finds them with a new credential, delete removes container and volume', async () => {
    const s = spec('lifecycle');
    const handle = (await driver.create(s)) as unknown as DockerHandle;
    await report(handle.container);
    expect(asWorkload(handle.container, ['sh', '-c', 'echo kept > /sandbox/keep.txt']).status).toBe(0);
    dockerExec(handle.container, ['sh', '-c', 'echo layer > /root/layer.txt']);

    await driver.stop(s.sandboxId, handle as any);
    expect(await driver.inspect(s.sandboxId, handle as any)).toBe('stopped');
    expect(await driver.failureReason(s.sandboxId, handle as any)).toBeNull();
    await driver.stop(s.sandboxId, handle as any); // idempotent

    const h2 = (await driver.start({ ...s, credential: 'second-credential' }, handle as any)) as unknown as DockerHandle;
    expect(h2.containerId).toBe(handle.containerId);
    expect(await driver.inspect(s.sandboxId, h2 as any)).toBe('running');
    expect(dockerExec(h2.container, ['cat', '/sandbox/keep.txt']).trim()).toBe('kept');
    expect(dockerExec(h2.container, ['cat', '/root/layer.txt']).trim()).toBe('layer');
    expect(dockerExec(h2.container, ['cat', '/run/sandgate/credential'])).toBe('second-credential');

    // A new gateway endpoint cannot be patched into a container: a new one on the kept volume.
    const h3 = (await driver.start({ ...s, credential: 'third', gatewayEndpoints: '127.0.0.1:2' }, h2 as any)) as unknown as DockerHandle;
    expect(h3.containerId).not.toBe(handle.containerId);
    expect(dockerExec(h3.container, ['cat', '/sandbox/keep.txt']).trim()).toBe('kept');
    expect(dockerExec(h3.container, ['sh', '-c', 'echo $SANDGATE_GATEWAY']).trim()).toMatch(/^\d+\.\d+\.\d+\.\d+:2$/);
    // The kept volume still belongs to the workload's uid in the new container.
    expect(dockerExec(h3.container, ['stat', '-c', '%u:%g', '/sandbox']).trim()).toBe('10001:10001');

    expect(await driver.delete(s.sandboxId, h3 as any)).toBe(true);
    await expect(docker.getContainer(h3.containerId).inspect()).rejects.toMatchObject({ statusCode: 404 });
    await expect(docker.getVolume(`sandgate-${s.sandboxId}`).inspect()).rejects.toMatchObject({ statusCode: 404 });
    expect(await driver.inspect(s.sandboxId, h3 as any)).toBe('gone');
    expect(await driver.delete(s.sandboxId, h3 as any)).toBe(false);
    await driver.stop(s.sandboxId, h3 as any); // nothing to stop: no error
    await expect(driver.start(s, h3 as any)).rejects.toThrow(/nothing to start/);
    expect(fs.existsSync(path.join(stateDir, 'docker', s.sandboxId))).toBe(false);
  });

  it('an image that cannot run node: create returns, failureReason names the problem within seconds', async () => {
    const s = spec('nonode', { image: NO_NODE_IMAGE, command: ['sleep', '1000'] });
    const t0 = Date.now();
    const handle = await driver.create(s);
    const reason = await waitFor('failure reason', () => driver.failureReason(s.sandboxId, handle), 5_000);
    const elapsed = Date.now() - t0;
    expect(elapsed).toBeLessThan(5_000);
    expect(reason).toMatch(new RegExp(`^supervisor could not start in image ${NO_NODE_IMAGE}: exit code 127`));
    expect(reason).toMatch(/no glibc dynamic loader/);
    expect(reason).toMatch(/exec \/opt\/sandgate\/node\/bin\/node failed: No such file or directory/);
    expect(await driver.inspect(s.sandboxId, handle)).toBe('stopped');
    expect(await driver.delete(s.sandboxId, handle)).toBe(true);
  });

  it('says so when no Docker engine answers', async () => {
    const nowhere = new Docker({ socketPath: path.join(stateDir, 'no-engine.sock') });
    const down = new DockerDriver({ stateDir, repoRoot, supervisorEntry: fakeSupervisor, docker: nowhere });
    await expect(down.create(spec('noengine'))).rejects.toThrow(/no Docker engine answers.*ensure-docker\.sh/);
    expect(fs.existsSync(path.join(stateDir, 'docker', 'noengine'))).toBe(false);
  });

  it('a glibc image without libstdc++: failureReason names the missing library', async () => {
    const s = spec('nolibstdcxx', { image: NO_LIBSTDCXX_IMAGE, command: ['sleep', '1000'] });
    const handle = await driver.create(s);
    const reason = await waitFor('failure reason', () => driver.failureReason(s.sandboxId, handle), 5_000);
    expect(reason).toMatch(new RegExp(`^supervisor could not start in image ${NO_LIBSTDCXX_IMAGE}: exit code 127`));
    expect(reason).toMatch(/the image lacks libstdc\+\+\.so\.6/);
    expect(reason).toMatch(/error while loading shared libraries/);
    expect(await driver.delete(s.sandboxId, handle)).toBe(true);
  });

  it('refuses a missing image and invalid ids with clear messages', async () => {
    await expect(driver.create(spec('noimage', { image: 'sandgate-no-such-image:latest' }))).rejects.toThrow(
      /docker image sandgate-no-such-image:latest is not available.*build-sandbox-image\.sh/,
    );
    expect(await labelled('containers')).not.toContain(PREFIX + 'noimage');
    await expect(driver.create({ ...spec('x'), sandboxId: '../etc' })).rejects.toThrow(/invalid sandbox id/);
    await expect(driver.inspect('a/b', null)).rejects.toThrow(/invalid sandbox id/);
    await expect(driver.delete('', null)).rejects.toThrow(/invalid sandbox id/);
  });

  it('20 sandboxes created concurrently all run and delete cleanly', async () => {
    const specs = Array.from({ length: 20 }, (_, i) => spec(`many-${i}`));
    const handles = await Promise.all(specs.map((s) => driver.create(s)));
    await Promise.all(
      specs.map((s, i) => waitFor(`${s.sandboxId} running`, async () => (await driver.inspect(s.sandboxId, handles[i])) === 'running')),
    );
    const listed = new Map((await driver.list()).map((o) => [o.sandboxId, o.state]));
    for (const s of specs) expect(listed.get(s.sandboxId)).toBe('running');
    // Each one's supervisor actually ran in its own container.
    // 20 node processes starting at once on a small machine: generous.
    await Promise.all(specs.map(async (s) => expect((await report(`sandgate-${s.sandboxId}`, 90_000)).env.SANDGATE_SANDBOX_ID).toBe(s.sandboxId)));
    const deleted = await Promise.all(specs.map((s, i) => driver.delete(s.sandboxId, handles[i])));
    expect(deleted.every(Boolean)).toBe(true);
    const left = [...(await labelled('containers')), ...(await labelled('volumes'))].filter((id) => id.includes('many-'));
    expect(left).toEqual([]);
  }, 240_000);

  it('runs the real supervisor: node, node_modules and node-pty work inside the image', async () => {
    const s = spec('real', { command: ['sh', '-c', 'tty > /tmp/tty.txt; exec sleep 100000'], tty: true, logLevel: 'debug' });
    const handle = (await realDriver.create(s)) as unknown as DockerHandle;
    // No gateway listens on 127.0.0.1:1: the supervisor keeps dialling and stays up.
    const logs = await waitFor(
      'dial failures in the supervisor log',
      async () => {
        // docker logs replays the container's stdout and stderr on its own stdout and stderr.
        const r = spawnSync('docker', ['logs', handle.container], { encoding: 'utf8' });
        const out = r.stdout + r.stderr;
        return (out.match(/control session attempt failed/g) ?? []).length >= 3 ? out : null;
      },
      15_000,
    );
    expect(logs).toMatch(/"msg":"supervisor starting"/);
    expect(logs).toMatch(/ECONNREFUSED \d+\.\d+\.\d+\.\d+:1\b/);
    // The main process got a PTY from node-pty.
    expect(await waitFor('tty.txt', async () => dockerExec(handle.container, ['cat', '/tmp/tty.txt']).trim())).toMatch(/^\/dev\/pts\/\d+$/);
    expect(await realDriver.inspect(s.sandboxId, handle as any)).toBe('running');
    expect(await realDriver.failureReason(s.sandboxId, handle as any)).toBeNull();
    // The real supervisor shuts down cleanly on docker stop.
    await realDriver.stop(s.sandboxId, handle as any);
    const info = await docker.getContainer(handle.containerId).inspect();
    expect(info.State.ExitCode).toBe(0);
    expect(await realDriver.failureReason(s.sandboxId, handle as any)).toBeNull();
    expect(await realDriver.delete(s.sandboxId, handle as any)).toBe(true);
  }, 60_000);

  it('leaves nothing labelled behind', async () => {
    await Promise.all([...created].map((id) => driver.delete(id, null)));
    expect(await labelled('containers')).toEqual([]);
    expect(await labelled('volumes')).toEqual([]);
  });
});
