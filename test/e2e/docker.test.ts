// Issue 6 acceptance: the docker driver behind three replicas, against a real dockerd.
// .ci/run starts dockerd and builds the sandbox image; without an engine this file fails loudly.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { status as grpcStatus } from '@grpc/grpc-js';
import Docker from 'dockerode';
import { DEFAULT_DOCKER_NETWORK, DockerDriver, ensureSandboxNetwork } from '@sandgate/compute';
import { SandboxPhase } from '@sandgate/protocols';
import { keysFor, OrphanQuarantine, type RedisClient } from '@sandgate/store';
import { Cluster, repoRoot, runCli } from '../harness/cluster.ts';
import { scanAllKeys, startRedis, type TestRedis } from '../harness/redis.ts';
import { openShellClient, unaryCall } from '../harness/grpc-client.ts';
import { sleep, waitFor } from '../harness/wait.ts';
import { SERVICE_APP, serviceHost, serviceRequest } from '../harness/service-app.ts';

let redis: TestRedis;
let r: RedisClient;
let cluster: Cluster;

const docker = (...args: string[]) => execFileSync('docker', args, { encoding: 'utf8' }).trim();
const labelled = (id?: string) =>
  docker('ps', '-aq', '--filter', id ? `label=sandgate.sandbox-id=${id}` : 'label=sandgate.managed=true').split('\n').filter(Boolean);
const volumes = (id?: string) =>
  docker('volume', 'ls', '-q', '--filter', id ? `label=sandgate.sandbox-id=${id}` : 'label=sandgate.managed=true').split('\n').filter(Boolean);

beforeAll(async () => {
  // Fails (does not skip) when there is no engine: the docker driver must be tested in CI.
  docker('info', '--format', '{{.ServerVersion}}');
  execFileSync('bash', [`${repoRoot}/scripts/build-sandbox-image.sh`], { stdio: 'ignore' });
  redis = await startRedis();
  r = redis.client();
  // Sandbox containers are on sandgate's bridge, not the host's network: the replicas listen on
  // the bridge's host address (which the host itself reaches too), not on loopback only.
  const { gateway } = await ensureSandboxNetwork(new Docker(), DEFAULT_DOCKER_NETWORK);
  // A short orphan grace, so the stray container below is quarantined, then removed, within the test.
  cluster = await Cluster.start({ redisUrl: redis.url, replicas: 3, driver: 'docker', host: gateway, env: { SANDGATE_ORPHAN_GRACE_MS: '3000' } });
}, 180_000);

afterAll(async () => {
  await cluster?.stop();
  // Through the driver, so a sandbox left behind by a failed test loses its workload cgroups too.
  if (cluster) {
    const driver = new DockerDriver({ stateDir: cluster.stateDir, repoRoot, supervisorEntry: `${repoRoot}/apps/supervisor/src/main.ts` });
    const ids = labelled().map((c) => docker('inspect', '-f', '{{ index .Config.Labels "sandgate.sandbox-id" }}', c));
    for (const id of ids) await driver.delete(id, null).catch(() => false);
  }
  for (const c of labelled()) docker('rm', '-f', c);
  for (const v of volumes()) docker('volume', 'rm', '-f', v);
  cluster?.cleanup();
  await redis?.stop();
});

const gw = (i: number) => cluster.replicas[i]!.grpcAddress;

interface SandboxJson {
  metadata: { id: string; name: string };
  status: { phase: string; conditions?: { reason?: string; message?: string }[] };
}

async function get(name: string, via = 0): Promise<SandboxJson | null> {
  const res = await runCli(['sandbox', 'get', name, '-o', 'json'], { gateway: gw(via) });
  return res.code === 0 ? (JSON.parse(res.stdout.toString()) as SandboxJson) : null;
}

async function create(name: string, args: string[] = ['--', 'sleep', 'infinity'], via = 0): Promise<SandboxJson> {
  const res = await runCli(['sandbox', 'create', '--name', name, '--detach', '-o', 'json', ...args], { gateway: gw(via) });
  expect(res.code, res.stderr).toBe(0);
  return JSON.parse(res.stdout.toString()) as SandboxJson;
}

describe('docker driver through the gateway', () => {
  it('creates through A; exec works through B and C; processes are checked in the container', async () => {
    const sb = await create('dk-basic');
    expect(sb.status.phase).toBe('SANDBOX_PHASE_READY');
    expect(labelled(sb.metadata.id)).toHaveLength(1);
    for (const i of [1, 2]) {
      const res = await runCli(['sandbox', 'exec', 'dk-basic', '--', 'sh', '-c', 'echo hi; cat /etc/os-release | head -1'], { gateway: gw(i) });
      expect(res.code, res.stderr).toBe(0);
      expect(res.stdout.toString()).toMatch(/^hi\n/);
    }
    // Exec kill against a container: a timed-out tree is gone inside the container.
    const t = await runCli(['sandbox', 'exec', 'dk-basic', '--timeout', '2', '--', 'sh', '-c', 'sleep 611 & setsid sleep 612 & sleep 613'], {
      gateway: gw(1),
    });
    const logsOf = () => spawnSync('docker', ['logs', '--tail', '30', labelled(sb.metadata.id)[0]!], { encoding: 'utf8' });
    expect(t.code, `${t.stderr} ${t.stdout.toString()}\n${logsOf().stdout}${logsOf().stderr}`).toBe(124);
    const container = labelled(sb.metadata.id)[0]!;
    await waitFor('no sleep 61x left in the container', () => !/sleep 61[123]/.test(docker('top', container, '-eo', 'pid,args')), 5_000).catch(
      (err: unknown) => {
        throw new Error(`${String(err)}:\n${docker('exec', container, 'ps', '-eo', 'pid,ppid,pgid,sid,uid,stat,args')}`);
      },
    );
  });

  it('stop keeps files, start finds them, delete removes container and volume, a second delete is NOT_FOUND', async () => {
    const sb = await create('dk-life');
    await runCli(['sandbox', 'exec', 'dk-life', '--', 'sh', '-c', 'echo persisted > /sandbox/f'], { gateway: gw(1) });
    expect((await runCli(['sandbox', 'stop', 'dk-life'], { gateway: gw(2) })).code).toBe(0);
    expect(docker('inspect', '-f', '{{.State.Running}}', labelled(sb.metadata.id)[0]!)).toBe('false');
    expect((await runCli(['sandbox', 'start', 'dk-life'], { gateway: gw(0) })).code).toBe(0);
    const f = await runCli(['sandbox', 'exec', 'dk-life', '--', 'cat', '/sandbox/f'], { gateway: gw(1) });
    expect(f.stdout.toString()).toBe('persisted\n');
    expect((await runCli(['sandbox', 'delete', 'dk-life'], { gateway: gw(2) })).code).toBe(0);
    expect(labelled(sb.metadata.id)).toHaveLength(0);
    expect(volumes(sb.metadata.id)).toHaveLength(0);
    const again = await runCli(['sandbox', 'delete', 'dk-life'], { gateway: gw(0) });
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('not found');
  });

  it('an image that cannot run the supervisor makes the sandbox Error within seconds, naming the problem', async () => {
    // An image without glibc: the host's node binary cannot start in it.
    execFileSync('bash', ['-c', 'd=$(mktemp -d); cp /bin/busybox "$d/" 2>/dev/null || echo x > "$d/x"; tar -C "$d" -c . | docker import - sandgate-test-noglibc:latest; rm -rf "$d"'], {
      stdio: 'ignore',
    });
    const client = openShellClient(gw(0));
    const t0 = Date.now();
    await unaryCall(client, 'CreateSandbox', { name: 'dk-bad', spec: { command: ['sleep', '1'], template: { image: 'sandgate-test-noglibc:latest' } } });
    const sb = await waitFor('Error', async () => {
      const s = await get('dk-bad');
      return s?.status.phase === 'SANDBOX_PHASE_ERROR' ? s : undefined;
    }, 20_000, 200);
    expect(Date.now() - t0).toBeLessThan(20_000);
    expect(sb.status.conditions?.[0]?.reason).toBe('ComputeFailed');
    expect(sb.status.conditions?.[0]?.message).toMatch(/supervisor could not start in image sandgate-test-noglibc:latest/);
    await unaryCall(client, 'DeleteSandbox', { name: 'dk-bad' });
    client.close();
  });

  it('reconciles: a container removed behind its back marks the record; a labelled container without a record is quarantined, then removed', async () => {
    const sb = await create('dk-gone');
    docker('rm', '-f', labelled(sb.metadata.id)[0]!);
    const marked = await waitFor('record marked', async () => {
      const s = await get('dk-gone');
      return s?.status.phase === 'SANDBOX_PHASE_ERROR' ? s : undefined;
    }, 60_000, 500);
    expect(marked.status.conditions?.[0]?.reason).toMatch(/ComputeVanished|ComputeFailed/);
    await runCli(['sandbox', 'delete', 'dk-gone'], { gateway: gw(0) });

    // A stray container with sandgate's labels and no record.
    docker('run', '-d', '--label', 'sandgate.managed=true', '--label', 'sandgate.sandbox-id=stray-1', 'sandgate-sandbox:latest', 'sleep', 'infinity');
    // First sighting: quarantined (its record may only look missing), the container left running.
    await waitFor('stray container quarantined', async () => (await new OrphanQuarantine(r).list()).has('stray-1'), 60_000, 200);
    expect(labelled('stray-1')).toHaveLength(1);
    // Seen without a record for the whole grace period: removed, and out of quarantine.
    await waitFor('stray container removed', () => labelled('stray-1').length === 0, 60_000, 500);
    await waitFor('quarantine emptied', async () => !(await new OrphanQuarantine(r).list()).has('stray-1'), 30_000, 500);
  });

  it('20 concurrent creates all reach Ready and delete cleanly, leaving nothing behind', async () => {
    const names = Array.from({ length: 20 }, (_, i) => `dk-many-${i}`);
    const clients = [0, 1, 2].map((i) => openShellClient(gw(i)));
    const created = await Promise.all(
      names.map((name, i) =>
        unaryCall<{ sandbox: { metadata: { id: string } } }>(clients[i % 3]!, 'CreateSandbox', { name, spec: { command: ['sleep', 'infinity'] } }),
      ),
    );
    const ids = created.map((c) => c.sandbox.metadata.id);
    let phases = '';
    await waitFor('all Ready', async () => {
      const res = await unaryCall<{ sandboxes: { metadata: { name: string }; status: { phase?: number } }[] }>(clients[0]!, 'ListSandboxes', {});
      const ours = res.sandboxes.filter((s) => names.includes(s.metadata.name));
      phases = JSON.stringify(Object.entries(Object.groupBy(ours, (s) => String(s.status.phase ?? 0))).map(([p, l]) => [p, l!.length]));
      return ours.filter((s) => s.status.phase === SandboxPhase.READY).length === 20;
    }, 240_000, 500).catch((err: unknown) => {
      throw new Error(`${String(err)}; phases (phase, count): ${phases}; replica logs:\n${cluster.logs()}`);
    });
    await Promise.all(names.map((name, i) => unaryCall(clients[i % 3]!, 'DeleteSandbox', { name })));
    for (const c of clients) c.close();
    // No container, volume or Redis key of theirs is left (the event streams expire on their own).
    for (const id of ids) {
      expect(labelled(id)).toEqual([]);
      expect(volumes(id)).toEqual([]);
    }
    const left: string[] = [];
    for await (const batch of scanAllKeys(r, 'sg:*')) left.push(...batch);
    const keys = left.filter((k) => ids.some((id) => k.includes(id)) || names.some((n) => k.endsWith(`:${n}`)));
    expect(keys.filter((k) => !k.startsWith('sg:events:'))).toEqual([]);
    for (const k of keys) expect(await r.pttl(k)).toBeGreaterThan(0);
    expect(await r.sismember(keysFor(r).sandboxIndex(), ids[0]!)).toBe(0);
    const err = (await unaryCall(openShellClient(gw(0)), 'GetSandbox', { name: 'dk-many-0' }).catch((e: unknown) => e)) as { code: number };
    expect(err.code).toBe(grpcStatus.NOT_FOUND);
  }, 360_000);

  it('files and an exposed service work in a container, through every replica (issue 14)', async () => {
    // The workload runs the bind-mounted node (the image has no other interpreter) as its web app.
    await create('dk-http', ['--', '/opt/sandgate/node/bin/node', '-e', SERVICE_APP, '8000']);
    const httpUrl = (i: number) => cluster.replicas[i]!.httpUrl;
    const auth = { authorization: `Bearer ${cluster.token}` };

    // A file in through one replica and out through each of the others, byte-identical, owned by
    // the workload's uid inside the container.
    const body = randomBytes(3 * 1024 * 1024 + 17);
    const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
    const url = (i: number, p: string) => `${httpUrl(i)}/v1/sandboxes/dk-http/files?path=${encodeURIComponent(p)}`;
    const put = await fetch(url(0, 'data.bin'), { method: 'PUT', headers: auth, body });
    expect(put.status, await put.clone().text()).toBe(201);
    for (const i of [1, 2]) {
      const got = await fetch(url(i, '/sandbox/data.bin'), { headers: auth });
      expect(got.status).toBe(200);
      expect(sha(Buffer.from(await got.arrayBuffer()))).toBe(sha(body));
    }
    const owner = await runCli(['sandbox', 'exec', 'dk-http', '--', 'stat', '-c', '%u', '/sandbox/data.bin'], { gateway: gw(1) });
    expect(owner.stdout.toString().trim()).toBe('10001');
    // The path rules hold in a container too: a symlink out of the sandbox is refused.
    await runCli(['sandbox', 'exec', 'dk-http', '--', 'ln', '-s', '/etc', '/sandbox/etc-link'], { gateway: gw(0) });
    expect((await fetch(url(2, 'etc-link/passwd'), { headers: auth })).status).toBe(403);
    // A directory with the CLI: up through one replica, down through another.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dk-files-'));
    fs.mkdirSync(path.join(dir, 'tree/sub'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'tree/sub/a.txt'), 'in a container\n');
    expect((await runCli(['sandbox', 'upload', 'dk-http', path.join(dir, 'tree'), 'tree'], { gateway: gw(1) })).code).toBe(0);
    const down = await runCli(['sandbox', 'download', 'dk-http', 'tree', path.join(dir, 'back')], { gateway: gw(2) });
    expect(down.code, down.stderr.toString()).toBe(0);
    expect(fs.readFileSync(path.join(dir, 'back/sub/a.txt'), 'utf8')).toBe('in a container\n');
    fs.rmSync(dir, { recursive: true, force: true });

    // The app, exposed, answers through each replica; after the stop, 412 at each.
    const expose = await runCli(['service', 'expose', 'dk-http', '8000', 'web'], { gateway: gw(0) });
    expect(expose.code, expose.stderr.toString()).toBe(0);
    const web = (i: number) => serviceHost(httpUrl(i), 'default--dk-http--web');
    await waitFor('the app in the container answers', async () => (await serviceRequest(httpUrl(1), web(1), '/hello', { headers: auth })).status === 200, 60_000, 200);
    for (let i = 0; i < 3; i++) {
      const res = await serviceRequest(httpUrl(i), web(i), '/hello', { headers: auth });
      expect(res.status, `replica ${i}`).toBe(200);
      expect(res.body.toString()).toBe('hello from the sandbox\n');
    }
    expect((await runCli(['sandbox', 'stop', 'dk-http'], { gateway: gw(2) })).code).toBe(0);
    for (let i = 0; i < 3; i++) expect((await serviceRequest(httpUrl(i), web(i), '/hello', { headers: auth })).status, `replica ${i}`).toBe(412);
    expect((await runCli(['sandbox', 'delete', 'dk-http'], { gateway: gw(1) })).code).toBe(0);
    for (let i = 0; i < 3; i++) expect((await serviceRequest(httpUrl(i), web(i), '/hello', { headers: auth })).status, `replica ${i}`).toBe(404);
  });
  it('a warm pool of containers: a claim is Ready at once with its command and environment; its stop/start keeps the container', async () => {
    const set = await runCli(['pool', 'set', 'dk-warm', '--size', '1'], { gateway: gw(0) });
    expect(set.code, set.stderr.toString()).toBe(0);
    const ready = async () => {
      const list = await runCli(['pool', 'list', '-o', 'json'], { gateway: gw(1) });
      return ((JSON.parse(list.stdout.toString()) as { pools?: { name: string; ready: number }[] }).pools ?? []).find((p) => p.name === 'dk-warm')?.ready === 1;
    };
    await waitFor('a Ready member container', ready, 120_000, 500);
    const sb = await create('dk-claimed', ['--pool', 'dk-warm', '--env', 'WARM=yes', '--', 'sh', '-c', 'echo "main $WARM" > /tmp/main-out; exec sleep infinity'], 2);
    expect(sb.status.phase).toBe('SANDBOX_PHASE_READY');
    const container = labelled(sb.metadata.id);
    expect(container).toHaveLength(1);
    const sh = async (script: string, via = 1) => (await runCli(['sandbox', 'exec', 'dk-claimed', '--', 'sh', '-c', script], { gateway: gw(via) })).stdout.toString().trim();
    expect(await sh('echo $WARM')).toBe('yes');
    await waitFor('the claim command ran', async () => (await sh('cat /tmp/main-out')) === 'main yes', 15_000, 250);
    // Later runs are launched as the member was, so the container (not only /sandbox) is kept.
    await sh('rm /tmp/main-out; echo kept > /tmp/outside-sandbox');
    for (const verb of ['stop', 'start']) expect((await runCli(['sandbox', verb, 'dk-claimed'], { gateway: gw(0) })).code, verb).toBe(0);
    expect(labelled(sb.metadata.id)).toEqual(container);
    expect(await sh('cat /tmp/outside-sandbox', 2)).toBe('kept');
    await waitFor('the claim command ran again', async () => (await sh('cat /tmp/main-out')) === 'main yes', 30_000, 250);
    expect((await runCli(['pool', 'delete', 'dk-warm'], { gateway: gw(1) })).code).toBe(0);
    expect((await runCli(['sandbox', 'delete', 'dk-claimed'], { gateway: gw(1) })).code).toBe(0);
    await waitFor('the pool member retired', async () => (await r.scard(keysFor(r).workspaceSandboxes('pool:dk-warm'))) === 0, 60_000, 500);
  });

  /** What the replicas logged about pools (for a failure's message). */
  const poolLogLines = () =>
    cluster.replicas
      .flatMap((r) => r.logs.join('').split('\n'))
      .filter((l) => /pool/.test(l))
      .slice(-30)
      .join('\n');

  it('a pool whose image cannot run backs off: no member started before its retry time, the wait doubles, a fixed template starts at once', async () => {
    type Listed = { name: string; ready: number; consecutiveFailures: number; retryAtMs: string; lastError: string };
    const listed = async (): Promise<Listed | undefined> => {
      const list = await runCli(['pool', 'list', '-o', 'json'], { gateway: gw(1) });
      return ((JSON.parse(list.stdout.toString()) as { pools?: Listed[] }).pools ?? []).find((p) => p.name === 'dk-broken');
    };
    const set = await runCli(['pool', 'set', 'dk-broken', '--size', '2', '--image', 'sandgate-test/no-such-image:1'], { gateway: gw(0) });
    expect(set.code, set.stderr.toString()).toBe(0);
    const failing = (atLeast: number) => async () => {
      const pool = await listed();
      return (pool?.consecutiveFailures ?? 0) >= atLeast && pool;
    };
    const first = await waitFor('the first failed start', failing(1), 60_000, 200).catch((err: unknown) => {
      throw new Error(`${String(err)}; the pool's replica log lines:\n${poolLogLines()}`);
    });
    expect(first.consecutiveFailures).toBe(1);
    expect(first.lastError).toMatch(/docker image sandgate-test\/no-such-image:1 is not available on this Docker engine/);
    const firstRetry = Number(first.retryAtMs);
    expect(firstRetry).toBeGreaterThan(Date.now());
    // A claim enqueues a refill 1 s later: before its retry time that refill must start nothing
    // (without the back-off it boots two more broken members, a second failure). The create itself
    // falls back to a cold start with the pool's image, which fails as the members did.
    const claim = await runCli(['sandbox', 'create', '--name', 'dk-broken-claim', '--pool', 'dk-broken', '--', 'true'], { gateway: gw(2) });
    expect(claim.code, 'a create of an image that does not exist succeeded').not.toBe(0);
    while (Date.now() < firstRetry - 500) {
      expect((await listed())?.consecutiveFailures, 'a member was started before the retry time').toBe(1);
      expect(await r.scard(keysFor(r).workspaceSandboxes('pool:dk-broken'))).toBe(0);
      await sleep(250);
    }
    // The sweep (every 10 s) tries again after it, fails, and waits twice as long.
    const second = await waitFor('the second failed start', failing(2), 30_000, 250);
    expect(second.consecutiveFailures).toBe(2);
    expect(Number(second.retryAtMs) - firstRetry).toBeGreaterThanOrEqual(10_000);
    expect((await runCli(['pool', 'list'], { gateway: gw(0) })).stdout.toString()).toMatch(/pool dk-broken: members cannot start \(2 failures in a row\), next try .*not available on this Docker engine/);
    // The operator fixes the image: a new template, tried at once, its failures forgotten.
    expect((await runCli(['pool', 'set', 'dk-broken', '--size', '1'], { gateway: gw(0) })).code).toBe(0);
    const fixed = await waitFor('a Ready member of the fixed pool', async () => {
      const pool = await listed();
      return pool?.ready === 1 && pool;
    }, 120_000, 500);
    expect(fixed).toMatchObject({ consecutiveFailures: 0, retryAtMs: '0', lastError: '' });
    expect((await runCli(['pool', 'delete', 'dk-broken'], { gateway: gw(1) })).code).toBe(0);
    await runCli(['sandbox', 'delete', 'dk-broken-claim'], { gateway: gw(1) });
    await waitFor('the pool member retired', async () => (await r.scard(keysFor(r).workspaceSandboxes('pool:dk-broken'))) === 0, 60_000, 500);
  });
});
