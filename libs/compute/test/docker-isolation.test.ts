// The docker driver's confinement, attacked for real on a real Docker engine (no mocks): what a
// workload process in a sandbox container can reach and use. Workload processes are simulated with
// `docker exec --user 10001` (the workload's uid, no capabilities): that is the container's own
// network namespace, one step *less* confined than the supervisor's real workload namespace, so
// whatever fails from here fails from there too. Fails — never skips — without an engine.
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LaunchSpec } from '../src/driver.ts';
import { DockerDriver, type DockerHandle } from '../src/docker-driver.ts';
import { DEFAULT_IMAGE, NODE_IN_CONTAINER } from '../src/docker/launch.ts';
import { ensureSandboxNetwork } from '../src/docker/network.ts';
import { connectFrom } from './docker-probe.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(here, '../../..');
const fakeSupervisor = path.join(here, 'docker-fake-supervisor.mjs');
const PREFIX = `di${process.pid}-`;
const NETWORK = `sgi-net-${process.pid}`;

const docker = new Docker();
let stateDir: string;
let driver: DockerDriver;
let bridgeGateway: string;
const servers: net.Server[] = [];
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
    credential: `cred-${sandboxId}`,
    logLevel: 'info',
    ...over,
  };
}

/** A TCP server on host:port (0: any) that greets every connection; closed in afterAll. */
async function listen(host: string): Promise<number> {
  // Probes drop their connections at once: a reset is expected, not an error.
  const srv = net.createServer((s) => s.on('error', () => undefined).end('hello\n'));
  servers.push(srv);
  await new Promise<void>((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(0, host, resolve);
  });
  return (srv.address() as net.AddressInfo).port;
}

async function waitFor<T>(what: string, fn: () => Promise<T | null | undefined | false> | T | null | undefined | false, timeoutMs = 15_000): Promise<T> {
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
    await sleep(100);
  }
}

async function containerIp(container: string): Promise<string> {
  const info = await docker.getContainer(container).inspect();
  const ip = info.NetworkSettings.Networks[NETWORK]?.IPAddress;
  if (!ip) throw new Error(`${container} has no address on ${NETWORK}`);
  return ip;
}

beforeAll(async () => {
  const info = spawnSync('docker', ['info', '--format', '{{.ServerVersion}}'], { encoding: 'utf8' });
  if (info.status !== 0) {
    throw new Error(`no Docker engine answers (${(info.stderr || '').trim()}); run scripts/ensure-docker.sh`);
  }
  const build = spawnSync('bash', [path.join(repoRoot, 'scripts', 'build-sandbox-image.sh')], { encoding: 'utf8' });
  if (build.status !== 0) throw new Error(`scripts/build-sandbox-image.sh failed: ${build.stderr}`);
  stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sg-dockeriso-'));
  driver = new DockerDriver({ stateDir, repoRoot, supervisorEntry: fakeSupervisor, network: NETWORK });
}, 120_000);

afterAll(async () => {
  if (driver) await Promise.all([...created].map((id) => driver.delete(id, null).catch(() => false)));
  for (const s of servers) s.close();
  if (stateDir) fs.rmSync(stateDir, { recursive: true, force: true });
  spawnSync('docker', ['network', 'rm', NETWORK], { encoding: 'utf8' });
}, 120_000);

describe('docker sandbox isolation (real dockerd)', () => {
  it('a workload reaches no host loopback service and no other sandbox; the supervisor reaches the gateway', async () => {
    // Stand-ins for the replicas' gRPC/HTTP/peer ports and Redis: host loopback listeners.
    const hostPort = await listen('127.0.0.1');
    // A stand-in for a gateway listening where containers can reach it (the bridge's address).
    const a = spec('net-a');
    const ha = (await driver.create(a)) as unknown as DockerHandle;
    const netInfo = await docker.getNetwork(NETWORK).inspect();
    bridgeGateway = netInfo.IPAM?.Config?.[0]?.Gateway ?? '';
    expect(bridgeGateway).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    const gatewayPort = await listen(bridgeGateway);
    // A second sandbox serving on every address of its own.
    const b = spec('net-b', {
      // The probes below disconnect at once: an unhandled ECONNRESET on the accepted socket would
      // crash this server between two probes (it did, now and then).
      command: [NODE_IN_CONTAINER, '-e', "require('net').createServer((s)=>{s.on('error',()=>{});s.end('B\\n')}).listen(7000,'0.0.0.0')"],
    });
    const hb = (await driver.create(b)) as unknown as DockerHandle;
    const ipB = await containerIp(hb.container);
    // B's server is up and listens on its bridge address (so A's refusal below means something):
    // B reaches it both on its loopback and on that address.
    await waitFor('B serving', () => connectFrom(hb.container, '10001', '127.0.0.1', 7000) === 'connected');
    expect(connectFrom(hb.container, '10001', ipB, 7000), `B's server on ${ipB}:7000`).toBe('connected');

    // From A, as the workload's uid: the host's loopback services are not on this loopback…
    expect(connectFrom(ha.container, '10001', '127.0.0.1', hostPort)).toBe('ECONNREFUSED');
    // …nor reachable through the host's bridge address (they listen on loopback only)…
    expect(connectFrom(ha.container, '10001', bridgeGateway, hostPort)).toBe('ECONNREFUSED');
    // …and another sandbox's port is not reachable at all (inter-container traffic is dropped).
    expect(connectFrom(ha.container, '10001', ipB, 7000)).not.toBe('connected');
    // No Docker socket to talk to the engine with.
    expect(spawnSync('docker', ['exec', ha.container, 'sh', '-c', 'ls /var/run/docker.sock /run/docker.sock']).status).not.toBe(0);
    // The supervisor's path: SANDGATE_GATEWAY names the bridge's gateway, which reaches a host
    // listener bound there.
    const envGateway = execFileSync('docker', ['exec', ha.container, 'sh', '-c', 'echo $SANDGATE_GATEWAY'], { encoding: 'utf8' }).trim();
    expect(envGateway).toBe(`${bridgeGateway}:1`);
    const viaBridge = connectFrom(ha.container, '0', bridgeGateway, gatewayPort);
    expect(viaBridge, `supervisor side of A → ${bridgeGateway}:${gatewayPort}`).toBe('connected');
  }, 90_000);

  it('the sandbox network: made once by concurrent callers; an existing one that lets containers talk is refused', async () => {
    const name = `sgi-race-${process.pid}`;
    try {
      // Five "replicas" at once, each with its own client: one network results, all agree on it.
      const got = await Promise.all(Array.from({ length: 5 }, () => ensureSandboxNetwork(new Docker(), name)));
      expect(new Set(got.map((n) => n.id)).size).toBe(1);
      const same = (await docker.listNetworks({ filters: { name: [name] } })).filter((n) => n.Name === name);
      expect(same).toHaveLength(1);
    } finally {
      spawnSync('docker', ['network', 'rm', name]);
    }
    const open = `sgi-open-${process.pid}`;
    execFileSync('docker', ['network', 'create', open]);
    try {
      const d = new DockerDriver({ stateDir, repoRoot, supervisorEntry: fakeSupervisor, network: open });
      await expect(d.create(spec('open-net'))).rejects.toThrow(/network sgi-open-\d+ exists but lets containers reach each other/);
    } finally {
      spawnSync('docker', ['network', 'rm', open]);
    }
  });

  it('refuses a launch whose loopback-only gateway the containers could never reach, saying how to fix it', async () => {
    const loopbackOnly = await listen('127.0.0.1');
    const s = spec('unreachable', { gatewayEndpoints: `127.0.0.1:${loopbackOnly}` });
    await expect(driver.create(s)).rejects.toThrow(/listens on loopback only: start the replicas \(or the load balancer\) with --host 0\.0\.0\.0/);
    expect(await driver.inspect(s.sandboxId, null)).toBe('gone');
    // Listening on the bridge's address as well (here: a second listener on the same port) is enough.
    const srv = net.createServer((c) => c.on('error', () => undefined).end());
    servers.push(srv);
    await new Promise<void>((resolve) => srv.listen(loopbackOnly, bridgeGateway, resolve));
    const h = (await driver.create(s)) as unknown as DockerHandle;
    const env = execFileSync('docker', ['exec', h.container, 'sh', '-c', 'echo $SANDGATE_GATEWAY'], { encoding: 'utf8' }).trim();
    expect(env).toBe(`${bridgeGateway}:${loopbackOnly}`);
  }, 60_000);

  it('limits: a 300 MiB allocation under a 64 MiB limit is OOM-killed (exit 137), a fork bomb stops at the pids cap, cpu is capped; the supervisor survives', async () => {
    const s = spec('limits', { limits: { memoryBytes: 64 * 1024 * 1024, pids: 64, cpuMillis: 250 } });
    const h = (await driver.create(s)) as unknown as DockerHandle;
    const report = await waitFor('report', () => JSON.parse(execFileSync('docker', ['exec', h.container, 'cat', '/run/sandgate-report.json'], { encoding: 'utf8' })) as { pid: number; env: Record<string, string> });
    const cgroups = report.env.SANDGATE_WORKLOAD_CGROUPS!.split(':');
    expect(cgroups.length).toBeGreaterThanOrEqual(3);
    // What the supervisor's wrapper does before each workload process: join the workload cgroups,
    // raise oom_score_adj, drop to the workload's uid without capabilities.
    const wrap = (script: string) =>
      spawnSync(
        'docker',
        [
          'exec', '-e', `CGS=${cgroups.join(' ')}`, h.container, 'sh', '-c',
          'for d in $CGS; do echo $$ > $d/cgroup.procs || exit 125; done; echo 500 > /proc/self/oom_score_adj; ' +
            'exec setpriv --reuid 10001 --regid 10001 --clear-groups --no-new-privs -- bash -c "$0"',
          script,
        ],
        { encoding: 'utf8', timeout: 60_000 },
      );

    expect(wrap('cat /proc/self/cgroup').stdout).toMatch(new RegExp(`memory:/sandgate-docker/${s.sandboxId}/workload`));
    // `tail` buffers 300 MiB that hold no newline.
    const hog = wrap('head -c 314572800 /dev/zero | tail > /dev/null');
    expect(hog.status).toBe(137);
    expect(fs.readFileSync(`/sys/fs/cgroup/memory/sandgate-docker/${s.sandboxId}/workload/memory.oom_control`, 'utf8')).toMatch(/oom_kill [1-9]/);
    // The supervisor (the fake one here) was not the victim, and the sandbox still runs.
    expect(execFileSync('docker', ['exec', h.container, 'cat', `/proc/${report.pid}/cmdline`], { encoding: 'utf8' })).toMatch(/docker-fake-supervisor/);
    expect(await driver.inspect(s.sandboxId, h as any)).toBe('running');

    // A fork bomb (bounded, so the test ends): dash gives up at the cap of 64 ("Cannot fork")
    // long before its 200 short sleeps are started, and the supervisor's side is unaffected.
    const bomb = wrap("exec sh -c 'for i in $(seq 200); do sleep 3 & done; echo all-started'");
    expect(bomb.stdout).not.toContain('all-started');
    expect(bomb.stderr).toMatch(/Cannot fork/);
    expect(spawnSync('docker', ['exec', h.container, 'true']).status).toBe(0);
    expect(execFileSync('docker', ['exec', h.container, 'cat', `/proc/${report.pid}/cmdline`], { encoding: 'utf8' })).toMatch(/docker-fake-supervisor/);
    expect(await driver.inspect(s.sandboxId, h as any)).toBe('running');
    // CPU: a quarter of a core as the workload cgroup's CFS quota.
    const quota = Number(fs.readFileSync(`/sys/fs/cgroup/cpu/sandgate-docker/${s.sandboxId}/workload/cpu.cfs_quota_us`, 'utf8'));
    const period = Number(fs.readFileSync(`/sys/fs/cgroup/cpu/sandgate-docker/${s.sandboxId}/workload/cpu.cfs_period_us`, 'utf8'));
    expect(quota / period).toBeCloseTo(0.25, 5);
  }, 90_000);
});
