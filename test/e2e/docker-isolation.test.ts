// Issue 12 on the docker driver: a sandbox container holds its workload in. Every attack is tried
// for real through `sandbox exec` (the workload's path: the supervisor's wrapper, the workload's
// uid, its own network namespace) against a real dockerd, a real Redis and real replicas; each
// expectation fails if the attack works. Fails loudly (never skips) without an engine.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { spawn, type ChildProcess } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Docker from 'dockerode';
import { DEFAULT_DOCKER_NETWORK, DockerDriver, ensureSandboxNetwork } from '@sandgate/compute';
import { Cluster, repoRoot, runCli } from '../harness/cluster.ts';
import { startRedis, type TestRedis } from '../harness/redis.ts';
import { waitFor } from '../harness/wait.ts';

let redis: TestRedis;
let cluster: Cluster;
let bridge: string;
const ids: string[] = [];
// A test network namespace (only this file's) holding the egress targets: a veth pair in
// 10.233.<n>.0/30, host side .1, namespace side .2. Never any outside address.
const NETNS = `sgdk${process.pid % 100000}`;
const VETH = `vdk${process.pid % 100000}`;
const SUBNET = `10.233.${process.pid % 250}`;
const TARGET = `${SUBNET}.2`;
let nsServer: ChildProcess | undefined;
let tmp: string;

const docker = (...args: string[]) => execFileSync('docker', args, { encoding: 'utf8' }).trim();
const containerOf = (id: string) => docker('ps', '-q', '--filter', `label=sandgate.sandbox-id=${id}`);
/**
 * What holds a sandbox container's network namespace: the container itself when it has its own
 * endpoint on the sandbox network, or the holder it was started in (a namespace the replica kept
 * ready, libs/compute/src/docker/netns-holders.ts), which must then be named for that sandbox
 * and be on the sandbox network: never another sandbox's, never the host's.
 */
function networkHolderOf(id: string, container: string): string {
  const mode = docker('inspect', '-f', '{{.HostConfig.NetworkMode}}', container);
  if (mode === DEFAULT_DOCKER_NETWORK) return container;
  expect(mode).toMatch(/^container:[0-9a-f]{64}$/);
  const holder = mode.slice('container:'.length);
  expect(docker('inspect', '-f', '{{.Name}} {{.HostConfig.NetworkMode}}', holder)).toBe(`/sandgate-netns-${id} ${DEFAULT_DOCKER_NETWORK}`);
  return holder;
}
const gw = () => cluster.replicas[0]!.grpcAddress;

interface SandboxJson {
  metadata: { id: string; name: string };
  status: { phase: string };
}

async function create(name: string, args: string[]): Promise<SandboxJson> {
  const res = await runCli(['sandbox', 'create', '--name', name, '--detach', '-o', 'json', ...args], { gateway: gw(), timeoutMs: 120_000 });
  expect(res.code, res.stderr).toBe(0);
  const sb = JSON.parse(res.stdout.toString()) as SandboxJson;
  ids.push(sb.metadata.id);
  expect(sb.status.phase).toBe('SANDBOX_PHASE_READY');
  return sb;
}

async function exec(name: string, script: string): Promise<{ code: number | null; out: string }> {
  const res = await runCli(['sandbox', 'exec', name, '--', 'bash', '-c', script], { gateway: gw(), timeoutMs: 90_000 });
  return { code: res.code, out: res.stdout.toString() + res.stderr };
}

/** A TCP connect from inside the sandbox (bash's /dev/tcp): `connected`, or why not. */
async function probe(name: string, host: string, port: number): Promise<string> {
  const r = await exec(name, `timeout 2 bash -c 'exec 3<>/dev/tcp/${host}/${port}' 2>&1 && echo connected || echo "failed $?"`);
  return r.out.trim();
}

beforeAll(async () => {
  docker('info', '--format', '{{.ServerVersion}}');
  execFileSync('bash', [`${repoRoot}/scripts/build-sandbox-image.sh`], { stdio: 'ignore' });
  redis = await startRedis();
  bridge = (await ensureSandboxNetwork(new Docker(), DEFAULT_DOCKER_NETWORK)).gateway;
  cluster = await Cluster.start({ redisUrl: redis.url, replicas: 2, driver: 'docker', host: bridge });
  tmp = mkdtempSync(path.join(os.tmpdir(), 'sg-dki-'));
  const sh = (cmd: string) => execFileSync('sh', ['-c', cmd], { stdio: 'pipe' });
  sh(`ip netns add ${NETNS}`);
  sh(`ip link add ${VETH}a type veth peer name ${VETH}b && ip link set ${VETH}b netns ${NETNS}`);
  sh(`ip addr add ${SUBNET}.1/30 dev ${VETH}a && ip link set ${VETH}a up`);
  sh(`ip netns exec ${NETNS} sh -c 'ip addr add ${TARGET}/30 dev ${VETH}b && ip link set ${VETH}b up && ip link set lo up'`);
  // Two servers in the namespace: 8443 (the policy allows it) and 8444 (it does not). A socket's
  // 'error' is swallowed: the readiness probe below connects and closes at once, and the reset it
  // causes, unhandled, killed the server (the test then saw ECONNREFUSED through the proxy).
  nsServer = spawn('ip', ['netns', 'exec', NETNS, process.execPath, '-e',
    "for (const p of [8443, 8444]) require('net').createServer((s) => { s.on('error', () => {}); s.end('hello-egress-' + p + '\\n'); }).listen(p, '0.0.0.0');"], { stdio: 'ignore' });
  await waitFor('test netns servers', () => spawnSync('bash', ['-c', `exec 3<>/dev/tcp/${TARGET}/8443`]).status === 0, 10_000);
}, 180_000);

afterAll(async () => {
  if (cluster) {
    for (const name of ['dki-a', 'dki-b', 'dki-oom', 'dki-egress']) await runCli(['sandbox', 'delete', name], { gateway: gw() }).catch(() => undefined);
    await cluster.stop();
  }
  // Whatever a failed delete left (container, volume, workload cgroups), through the driver.
  if (cluster) {
    const driver = new DockerDriver({ stateDir: cluster.stateDir, repoRoot, supervisorEntry: `${repoRoot}/apps/supervisor/src/main.ts` });
    for (const id of ids) await driver.delete(id, null).catch(() => false);
  }
  cluster?.cleanup();
  await redis?.stop();
  nsServer?.kill('SIGKILL');
  spawnSync('ip', ['link', 'del', `${VETH}a`]);
  spawnSync('ip', ['netns', 'del', NETNS]);
  if (tmp) rmSync(tmp, { recursive: true, force: true });
}, 120_000);

describe('docker sandboxes hold their workload in', () => {
  it('the container: its own network, the supervisor capabilities only, no Docker socket; the workload: uid 10001, no credential', async () => {
    const a = await create('dki-a', ['--', 'sleep', 'infinity']);
    const c = containerOf(a.metadata.id);
    const hc = JSON.parse(docker('inspect', '-f', '{{json .HostConfig}}', c)) as Record<string, any>;
    networkHolderOf(a.metadata.id, c);
    expect(hc.NetworkMode).not.toBe('host');
    expect(hc.CapDrop).toEqual(['ALL']);
    expect([...hc.CapAdd].sort()).toEqual(['CAP_DAC_READ_SEARCH', 'CAP_KILL', 'CAP_NET_ADMIN', 'CAP_SETGID', 'CAP_SETUID', 'CAP_SYS_ADMIN', 'CAP_SYS_PTRACE']);
    expect(hc.SecurityOpt).toEqual(['no-new-privileges']);
    expect(hc.Privileged).toBe(false);
    expect(hc.PidsLimit).toBe(1024);
    expect(docker('inspect', '-f', '{{json .Mounts}}', c)).not.toMatch(/docker\.sock/);

    expect((await exec('dki-a', 'id -u; id -g')).out).toBe('10001\n10001\n');
    expect((await exec('dki-a', 'grep CapEff /proc/self/status')).out).toMatch(/CapEff:\s+0000000000000000/);
    // Confined by the native wrapper from the checkout the container shows read-only (static, so
    // whatever the image's libc), not the shell chain.
    const confined = execFileSync('sh', ['-c', `docker logs ${c} 2>&1`], { encoding: 'utf8' })
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { msg?: string; launcher?: string; spare_spawner?: string; pty_spawner?: string })
      .find((l) => l.msg === 'workload confined');
    expect(confined?.launcher).toMatch(/\/apps\/supervisor\/native\/build\/sandgate-launch$/);
    // The addon loads and starts spares in the container too (pidfd_open allowed by its seccomp profile).
    expect(confined?.spare_spawner).toBe('posix_spawn');
    // And its terminals: a PTY exec runs on a terminal of its own, confined, started by the addon.
    expect(confined?.pty_spawner).toBe('posix_spawn');
    const onTty = await runCli(['sandbox', 'exec', 'dki-a', '--tty', '--', 'bash', '-c', 'tty; id -u'], { gateway: gw(), timeoutMs: 90_000 });
    expect(onTty.code).toBe(0);
    expect(onTty.stdout.toString()).toMatch(/^\/dev\/pts\/\d+\r\n10001\r\n$/);
    const cred = await exec('dki-a', 'cat /run/sandgate/credential');
    expect(cred.code).not.toBe(0);
    expect(cred.out).toMatch(/Permission denied/);
    const sup = await exec('dki-a', 'cat /proc/$(pgrep -f apps/supervisor/src/main.ts | head -1)/environ');
    expect(sup.code).not.toBe(0);
    expect(sup.out).toMatch(/Permission denied/);
    expect((await exec('dki-a', 'ls -ld /var/run/docker.sock /run/docker.sock 2>&1; echo rc=$?')).out).toMatch(/No such file/);
    // The workload's own files: /sandbox is its uid's.
    expect((await exec('dki-a', 'echo mine > /sandbox/f && stat -c %u /sandbox /sandbox/f')).out).toBe('10001\n10001\n');
  });

  it('connections to Redis, the replicas and another sandbox are refused from inside; the sandbox loopback works', async () => {
    // Each replica keeps two network namespaces ready from its start (made in about a second; the
    // replicas started well before this test): B is created in one, the path most creates take.
    await waitFor('the replicas’ spare namespaces', () => docker('ps', '-q', '--filter', 'label=sandgate.managed=netns-holder', '--filter', 'name=sandgate-netns-spare-').split('\n').filter(Boolean).length >= 2, 60_000);
    await create('dki-b', ['--', 'sleep', 'infinity']);
    expect(docker('inspect', '-f', '{{.HostConfig.NetworkMode}}', containerOf(ids[ids.length - 1]!))).toMatch(/^container:/);
    // A server in sandbox B's container (its supervisor's side, as root): the host reaches it, A must not.
    const b = containerOf(ids[ids.length - 1]!);
    const ipB = docker('inspect', '-f', `{{ (index .NetworkSettings.Networks "${DEFAULT_DOCKER_NETWORK}").IPAddress }}`, networkHolderOf(ids[ids.length - 1]!, b));
    expect(ipB).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    // A's namespace is not B's.
    const a = ids.find((id) => containerOf(id) && id !== ids[ids.length - 1]);
    if (a) expect(networkHolderOf(a, containerOf(a))).not.toBe(networkHolderOf(ids[ids.length - 1]!, b));
    spawnSync('docker', ['exec', '-d', b, '/opt/sandgate/node/bin/node', '-e', "require('net').createServer((s)=>{s.on('error',()=>{});s.end('B\\n')}).listen(7000,'0.0.0.0')"]);
    await waitFor('B serving to the host', () => spawnSync('bash', ['-c', `exec 3<>/dev/tcp/${ipB}/7000`]).status === 0, 15_000);

    const targets: [string, string, number][] = [
      ['redis on loopback', '127.0.0.1', redis.port],
      ['redis via the bridge', bridge, redis.port],
      ['replica gRPC', bridge, cluster.replicas[0]!.grpcPort],
      ['replica HTTP', bridge, cluster.replicas[0]!.httpPort],
      ['replica peer', bridge, cluster.replicas[1]!.peerPort],
      ['replica gRPC on loopback', '127.0.0.1', cluster.replicas[0]!.grpcPort],
      ['sandbox B', ipB, 7000],
    ];
    for (const [what, host, port] of targets) {
      const r = await probe('dki-a', host, port);
      expect(r, `${what} (${host}:${port})`).not.toContain('connected');
      // Refused or unreachable at once, not a 2 s hang (timeout's status 124).
      expect(r, `${what} (${host}:${port}) must fail fast`).not.toContain('failed 124');
    }
    // The sandbox's own loopback works: a server inside it is reachable from inside it.
    const own = await exec(
      'dki-a',
      "/opt/sandgate/node/bin/node -e \"require('net').createServer((s)=>s.end('own\\n')).listen(7100,'127.0.0.1',()=>{require('net').connect(7100,'127.0.0.1').on('data',(d)=>{process.stdout.write(d);process.exit(0)})})\"",
    );
    expect(own.out).toBe('own\n');
  });

  it('egress only per policy: through the proxy, an allowed server in a test netns is reached, another port is refused at once', async () => {
    const policy = path.join(tmp, 'policy.yaml');
    writeFileSync(policy, `network_policies:\n  test:\n    name: test\n    endpoints:\n      - host: "${TARGET}"\n        port: 8443\n`);
    await create('dki-egress', ['--policy', policy, '--', 'sleep', 'infinity']);
    // CONNECT through the proxy the workload is given (HTTP_PROXY), with bash alone.
    const connect = (port: number) =>
      exec(
        'dki-egress',
        `p=\${HTTP_PROXY##*:}; p=\${p%%/*}; exec 3<>/dev/tcp/127.0.0.1/$p || exit 9; ` +
          `printf 'CONNECT ${TARGET}:${port} HTTP/1.1\\r\\nHost: ${TARGET}:${port}\\r\\n\\r\\n' >&3; timeout 5 head -c 300 <&3`,
      );
    const allowed = await connect(8443);
    expect(allowed.out).toMatch(/^HTTP\/1\.1 200/);
    expect(allowed.out).toContain('hello-egress-8443');
    // Refused with a status line (not a hang: `timeout 5` would leave the output empty).
    const denied = await connect(8444);
    expect(denied.out).toMatch(/^HTTP\/1\.1 403/);
    expect(denied.out).not.toContain('hello-egress');
    // Directly, without the proxy, not even the allowed server: the workload has no route out.
    expect(await probe('dki-egress', TARGET, 8443)).not.toContain('connected');
  });

  it('--memory 64Mi: a 300 MiB allocation is OOM-killed (exit 137), the sandbox keeps serving', async () => {
    const sb = await create('dki-oom', ['--memory', '64Mi', '--cpu', '0.5', '--', 'sleep', 'infinity']);
    const c = containerOf(sb.metadata.id);
    // The limits hold the workload's cgroups (this engine has the cgroupfs driver), not the supervisor's container.
    const cg = (ctl: string, f: string) => readFileSync(`/sys/fs/cgroup/${ctl}/sandgate-docker/${sb.metadata.id}/workload/${f}`, 'utf8').trim();
    expect(cg('memory', 'memory.limit_in_bytes')).toBe(String(64 * 1024 * 1024));
    expect(cg('cpu', 'cpu.cfs_quota_us')).toBe('50000');
    expect(cg('pids', 'pids.max')).toBe('1024');
    expect((await exec('dki-oom', 'cat /proc/self/cgroup')).out).toMatch(new RegExp(`memory:/sandgate-docker/${sb.metadata.id}/workload`));
    const hog = await exec('dki-oom', 'head -c 314572800 /dev/zero | tail > /dev/null');
    expect(hog.code).toBe(137);
    expect(cg('memory', 'memory.oom_control')).toMatch(/oom_kill [1-9]/);
    expect((await exec('dki-oom', 'echo still here')).out).toBe('still here\n');
    expect(docker('inspect', '-f', '{{.HostConfig.Memory}}', c)).toBe('0');
  });
});
