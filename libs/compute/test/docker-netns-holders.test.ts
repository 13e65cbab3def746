// The docker driver's network namespaces kept ready (docker/netns-holders.ts), on a real engine:
// a claimed namespace serves one sandbox only, is as isolated as a bridge endpoint of its own,
// survives a stop and start, and nothing of it outlives its sandbox or its driver.
import { spawnSync } from 'node:child_process';
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
import { buildHolderCreateOptions, holderName, MANAGED_NETNS_HOLDER, SPARE_MAX_AGE_MS } from '../src/docker/netns-holders.ts';
import { connectFrom } from './docker-probe.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(here, '../../..');
const fakeSupervisor = path.join(here, 'docker-fake-supervisor.mjs');
const PREFIX = `dn${process.pid}-`;
const NETWORK = `sgn-net-${process.pid}`;

const docker = new Docker();
let stateDir: string;
let driver: DockerDriver;
const created = new Set<string>();
const servers: net.Server[] = [];

function spec(suffix: string, over: Partial<LaunchSpec> = {}): LaunchSpec {
  const sandboxId = PREFIX + suffix;
  created.add(sandboxId);
  return { sandboxId, command: ['sleep', '100000'], tty: false, environment: {}, image: DEFAULT_IMAGE, gatewayEndpoints: '127.0.0.1:1', credential: `cred-${sandboxId}`, logLevel: 'info', ...over };
}

async function waitFor<T>(what: string, fn: () => Promise<T | null | undefined | false> | T | null | undefined | false, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

/** Holders on the engine: name (without `/`) → id, running or not. */
async function holders(): Promise<Map<string, Docker.ContainerInfo>> {
  const list = await docker.listContainers({ all: true, filters: { label: [`sandgate.managed=${MANAGED_NETNS_HOLDER}`] } });
  return new Map(list.map((c) => [c.Names[0]!.replace(/^\//, ''), c]));
}

/** This test's driver's running spares (it names no one else's network). */
async function spares(): Promise<Docker.ContainerInfo[]> {
  return [...(await holders())].filter(([name, c]) => name.startsWith('sandgate-netns-spare-') && c.State === 'running' && c.HostConfig.NetworkMode === NETWORK).map(([, c]) => c);
}

async function ipOf(containerOrHolder: string): Promise<string> {
  const info = await docker.getContainer(containerOrHolder).inspect();
  const ip = info.NetworkSettings.Networks[NETWORK]?.IPAddress;
  if (!ip) throw new Error(`${containerOrHolder} has no address on ${NETWORK}`);
  return ip;
}

beforeAll(async () => {
  const info = spawnSync('docker', ['info', '--format', '{{.ServerVersion}}'], { encoding: 'utf8' });
  if (info.status !== 0) throw new Error(`no Docker engine answers (${(info.stderr || '').trim()}); run scripts/ensure-docker.sh`);
  const build = spawnSync('bash', [path.join(repoRoot, 'scripts', 'build-sandbox-image.sh')], { encoding: 'utf8' });
  if (build.status !== 0) throw new Error(`scripts/build-sandbox-image.sh failed: ${build.stderr}`);
  stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sg-dockernetns-'));
  driver = new DockerDriver({ stateDir, repoRoot, supervisorEntry: fakeSupervisor, network: NETWORK, netnsSpares: 2 });
}, 120_000);

afterAll(async () => {
  if (driver) {
    await Promise.all([...created].map((id) => driver.delete(id, null).catch(() => false)));
    await driver.close();
  }
  for (const s of servers) s.close();
  if (stateDir) fs.rmSync(stateDir, { recursive: true, force: true });
  spawnSync('docker', ['network', 'rm', NETWORK], { encoding: 'utf8' });
}, 120_000);

describe('network namespaces kept ready (real dockerd)', () => {
  let b: DockerHandle;
  let c: DockerHandle;

  it('a create claims one: its container lives in a holder named for it that runs only `sleep` as nobody, without capabilities', async () => {
    // Made from the driver's start. Until they are ready a create takes the bridge, as without them.
    await waitFor('two spares', async () => (await spares()).length === 2);
    const a = (await driver.create(spec('a'))) as unknown as DockerHandle;
    expect((await docker.getContainer(a.container).inspect()).HostConfig.NetworkMode).toMatch(/^container:/);
    await waitFor('two spares again', async () => (await spares()).length === 2);

    b = (await driver.create(spec('b'))) as unknown as DockerHandle;
    const info = await docker.getContainer(b.container).inspect();
    const holder = await docker.getContainer(holderName(PREFIX + 'b')).inspect();
    expect(info.HostConfig.NetworkMode).toBe(`container:${holder.Id}`);
    expect(holder.State.Running).toBe(true);
    expect(holder.Config.User).toBe('65534:65534');
    expect(holder.HostConfig.CapDrop).toEqual(['ALL']);
    expect(holder.HostConfig.CapAdd ?? []).toEqual([]);
    expect(holder.HostConfig.SecurityOpt).toEqual(['no-new-privileges']);
    expect(holder.HostConfig.ReadonlyRootfs).toBe(true);
    expect(holder.HostConfig.Mounts ?? []).toEqual([]);
    const top = await docker.getContainer(holder.Id).top();
    expect((top.Processes ?? []).map((p: string[]) => p.at(-1))).toEqual(['sleep infinity']);
    // The spare it took is made again.
    await waitFor('two spares again', async () => (await spares()).length === 2);
  }, 90_000);

  it('two sandboxes on claimed namespaces: each its own address, and neither reaches the other or the host’s loopback', async () => {
    const hostOnly = net.createServer((s) => s.on('error', () => undefined).end('host\n'));
    servers.push(hostOnly);
    await new Promise<void>((resolve) => hostOnly.listen(0, '127.0.0.1', resolve));
    const hostPort = (hostOnly.address() as net.AddressInfo).port;
    c = (await driver.create(
      spec('c', { command: [NODE_IN_CONTAINER, '-e', "require('net').createServer((s)=>{s.on('error',()=>{});s.end('C\\n')}).listen(7000,'0.0.0.0')"] }),
    )) as unknown as DockerHandle;
    const holderB = holderName(PREFIX + 'b');
    const holderC = holderName(PREFIX + 'c');
    expect((await docker.getContainer(c.container).inspect()).HostConfig.NetworkMode).toMatch(/^container:/);
    const [ipB, ipC] = [await ipOf(holderB), await ipOf(holderC)];
    expect(ipB).not.toBe(ipC);
    // C serves on its address (so B's failure below means something)…
    await waitFor('C serving', () => connectFrom(c.container, '10001', ipC, 7000) === 'connected');
    // …B's workload uid and its supervisor's root reach neither C nor the host's loopback services.
    for (const user of ['10001', '0']) {
      expect(connectFrom(b.container, user, ipC, 7000), `as ${user}: B → C`).not.toBe('connected');
      expect(connectFrom(b.container, user, '127.0.0.1', hostPort), `as ${user}: B → host loopback`).toBe('ECONNREFUSED');
    }
  }, 90_000);

  it('a stop and start keeps the sandbox in its holder; a holder removed meanwhile is replaced', async () => {
    const id = PREFIX + 'b';
    const before = (await docker.getContainer(b.container).inspect()).HostConfig.NetworkMode;
    await driver.stop(id, b as never);
    const again = (await driver.start(spec('b'), b as never)) as unknown as DockerHandle;
    expect(again.containerId).toBe(b.containerId);
    expect((await docker.getContainer(again.container).inspect()).HostConfig.NetworkMode).toBe(before);
    expect(await driver.inspect(id, again as never)).toBe('running');

    await driver.stop(id, again as never);
    await docker.getContainer(holderName(id)).remove({ force: true });
    const replaced = (await driver.start(spec('b'), again as never)) as unknown as DockerHandle;
    expect(await driver.inspect(id, replaced as never)).toBe('running');
    const mode = (await docker.getContainer(replaced.container).inspect()).HostConfig.NetworkMode;
    if (mode !== NETWORK) expect(mode).toBe(`container:${(await docker.getContainer(holderName(id)).inspect()).Id}`);
    b = replaced;
  }, 90_000);

  it('goes with its sandbox; one left without its sandbox is reported and removed by the delete', async () => {
    const id = PREFIX + 'b';
    await driver.delete(id, b as never);
    expect((await holders()).has(holderName(id))).toBe(false);

    // A crash that left only the holder: its sandbox's container and volume are gone.
    const orphan = PREFIX + 'c';
    await docker.getContainer(c.container).remove({ force: true });
    await docker.getVolume(`sandgate-${orphan}`).remove().catch(() => undefined);
    expect((await holders()).has(holderName(orphan))).toBe(true);
    const listed = (await driver.list()).find((o) => o.sandboxId === orphan);
    expect(listed?.state).toBe('gone');
    expect(await driver.delete(orphan, null)).toBe(true);
    expect((await holders()).has(holderName(orphan))).toBe(false);
  }, 90_000);

  it('a create whose sandbox already has a holder (an earlier attempt’s) leaves it alone and takes the bridge; its delete removes both', async () => {
    const s = spec('again');
    const leftover = await docker.createContainer(buildHolderCreateOptions({ image: DEFAULT_IMAGE, network: NETWORK, name: holderName(s.sandboxId), bornMs: Date.now() }));
    await leftover.start();
    await waitFor('two spares', async () => (await spares()).length === 2);
    const h = (await driver.create(s)) as unknown as DockerHandle;
    expect((await docker.getContainer(h.container).inspect()).HostConfig.NetworkMode).toBe(NETWORK);
    expect((await docker.getContainer(leftover.id).inspect()).State.Running).toBe(true);
    expect(await spares()).toHaveLength(2);
    await driver.delete(s.sandboxId, h as never);
    expect((await holders()).has(holderName(s.sandboxId))).toBe(false);
  }, 90_000);

  it('spares that stopped (as an engine restart stops them) fail no create: it takes the bridge', async () => {
    await waitFor('two spares', async () => (await spares()).length === 2);
    for (const spare of await spares()) await docker.getContainer(spare.Id).kill();
    const s = spec('dead-spares');
    const h = (await driver.create(s)) as unknown as DockerHandle;
    expect(await driver.inspect(s.sandboxId, h as never)).toBe('running');
    expect((await docker.getContainer(h.container).inspect()).HostConfig.NetworkMode).toBe(NETWORK);
    expect((await holders()).has(holderName(s.sandboxId))).toBe(false);
    await driver.delete(s.sandboxId, h as never);
  }, 90_000);

  it('spares that cannot be made are reported, and creates take the bridge', async () => {
    // A default image the engine does not have: every holder's create fails.
    const missing = `sandgate-no-such-image-${process.pid}:never`;
    const warnings: Array<{ msg: string; fields: Record<string, unknown> }> = [];
    const broken = new DockerDriver({ stateDir, repoRoot, supervisorEntry: fakeSupervisor, network: NETWORK, netnsSpares: 1, defaultImage: missing, compileCache: false, warn: (msg, fields) => warnings.push({ msg, fields }) });
    const s = spec('no-spare');
    try {
      const h = (await broken.create(s)) as unknown as DockerHandle;
      expect((await docker.getContainer(h.containerId).inspect()).HostConfig.NetworkMode).toBe(NETWORK);
      expect((await holders()).has(holderName(s.sandboxId))).toBe(false);
      const warning = await waitFor('the failure reported', () => warnings[0]);
      expect(warning.msg).toMatch(/network namespace could not be made ready/);
      expect(warning.fields).toMatchObject({ image: missing, retry_in_s: 60 });
      expect(String((warning.fields.err as Error).message)).toMatch(/no such image/i);
      // Not retried before the next sweep: one failure, one line.
      await sleep(1500);
      expect(warnings).toHaveLength(1);
    } finally {
      await broken.delete(s.sandboxId, null).catch(() => false);
      await broken.close();
    }
  }, 90_000);

  it('spares have a bounded life: another driver’s stale one is removed, a fresh one is left, and close() removes a driver’s own', async () => {
    const network = NETWORK;
    const make = async (name: string, bornMs: number, start = true) => {
      const ctr = await docker.createContainer(buildHolderCreateOptions({ image: DEFAULT_IMAGE, network, name, bornMs }));
      if (start) await ctr.start();
      return ctr.id;
    };
    // As a replica killed with spares would leave them: one past the limit, one young. The stale
    // one is not started: the suite's driver may sweep it away at any moment, and a start racing
    // that removal failed once ("cannot start a stopped process"); a sweep removes it either way.
    const stale = await make(`sandgate-netns-spare-stale${process.pid}`, Date.now() - SPARE_MAX_AGE_MS - 1000, false);
    const young = await make(`sandgate-netns-spare-young${process.pid}`, Date.now());
    const known = new Set([young, ...(await spares()).map((x) => x.Id)]);
    try {
      // A driver's start sweeps.
      const other = new DockerDriver({ stateDir, repoRoot, supervisorEntry: fakeSupervisor, network: NETWORK, netnsSpares: 1 });
      const s = spec('sweep');
      await other.create(s);
      await waitFor('the stale spare removed', async () => !(await docker.listContainers({ all: true })).some((x) => x.Id === stale));
      await waitFor('the other driver’s own spare', async () => (await spares()).some((x) => !known.has(x.Id)));
      expect((await docker.listContainers({ all: true })).some((x) => x.Id === young)).toBe(true);
      await other.delete(s.sandboxId, null);
      const before = (await spares()).map((x) => x.Id);
      await other.close();
      await driver.close();
      const after = (await spares()).map((x) => x.Id);
      // Only the young "killed replica's" spare is left: both drivers removed theirs.
      expect(after).toEqual([young]);
      expect(before.length).toBeGreaterThan(1);
    } finally {
      for (const x of [stale, young]) await docker.getContainer(x).remove({ force: true }).catch(() => undefined);
    }
  }, 90_000);
});
