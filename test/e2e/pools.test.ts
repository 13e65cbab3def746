// Warm pools (issue 16, item 3), end to end on two replica processes, real bubblewrap sandboxes
// and a real Redis: `sandgate pool set` keeps members started and Ready; `sandbox create --pool`
// claims one (the member's id, Ready in the create's answer) and gives it the caller's name,
// command and environment; the pool refills; concurrent creates never get the same member; a
// request the members were not launched for is refused naming the field; a claim whose replica
// died before it could start the main process still gets it started (the reconcile sweep); an
// auto-match pool serves creates of exactly its template that name no pool, and only those;
// `pool delete` retires every member.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keysFor, PoolStore, SandboxStore, sandboxCodec, type RedisClient } from '@sandgate/store';
import { Phase, poolWorkspace } from '@sandgate/core';
import { Cluster, runCli } from '../harness/cluster.ts';
import { startRedis, type TestRedis } from '../harness/redis.ts';
import { deleteAllSandboxes } from '../harness/sandbox.ts';
import { waitFor } from '../harness/wait.ts';
import { expectOwnedOperationsServed } from '../harness/openapi-coverage.ts';

let redis: TestRedis;
let cluster: Cluster;
let client: RedisClient;

beforeAll(async () => {
  redis = await startRedis();
  cluster = await Cluster.start({ redisUrl: redis.url, replicas: 2 });
  client = redis.client();
});

afterAll(async () => {
  if (cluster) {
    for (const pool of ['warm', 'auto']) await runCli(['pool', 'delete', pool], { gateway: gw(0) }).catch(() => undefined);
    await deleteAllSandboxes(gw(0));
    // Members go with the refill job: wait for them, so no supervisor outlives the test.
    for (const pool of ['warm', 'rest', 'auto']) {
      await waitFor(`${pool} members retired`, async () => (await client.scard(keysFor(client).workspaceSandboxes(poolWorkspace(pool)))) === 0, 60_000, 500).catch(() => undefined);
    }
  }
  client?.disconnect();
  await cluster?.stop();
  cluster?.cleanup();
  await redis?.stop();
});

const gw = (i = 0) => cluster.replicas[i]!.grpcAddress;

interface PoolView {
  name: string;
  size: number;
  ready: number;
  starting: number;
  generation: number;
}

async function pools(): Promise<PoolView[]> {
  const res = await runCli(['pool', 'list', '-o', 'json'], { gateway: gw(1) });
  expect(res.code, res.stderr.toString()).toBe(0);
  const out = JSON.parse(res.stdout.toString()) as { pools?: PoolView[] } | PoolView[];
  return Array.isArray(out) ? out : (out.pools ?? []);
}

const members = () => client.smembers(keysFor(client).workspaceSandboxes(poolWorkspace('warm')));

async function readyMembers(n: number): Promise<void> {
  await waitFor(`${n} ready members`, async () => (await pools()).find((p) => p.name === 'warm')?.ready === n, 90_000, 300);
}

async function exec(name: string, argv: string[], gateway = gw(0)): Promise<{ code: number; out: string; err: string }> {
  const res = await runCli(['sandbox', 'exec', name, '--', ...argv], { gateway, timeoutMs: 20_000 });
  return { code: res.code ?? -1, out: res.stdout.toString(), err: res.stderr.toString() };
}

async function create(args: string[], gateway = gw(0)): Promise<{ code: number; sandbox?: { metadata: { id: string; name: string }; status: { phase: string } }; err: string }> {
  const res = await runCli(['sandbox', 'create', '--detach', '-o', 'json', ...args], { gateway, timeoutMs: 60_000 });
  return { code: res.code ?? -1, sandbox: res.code === 0 ? JSON.parse(res.stdout.toString()) : undefined, err: res.stderr.toString() };
}

describe('warm pools', () => {
  it('a pool keeps its members started and Ready, in no workspace a caller can list', async () => {
    const set = await runCli(['pool', 'set', 'warm', '--size', '2'], { gateway: gw(0) });
    expect(set.code, set.stderr.toString()).toBe(0);
    await readyMembers(2);
    expect(await members()).toHaveLength(2);
    const list = await runCli(['sandbox', 'list', '-o', 'json'], { gateway: gw(0) });
    expect(JSON.parse(list.stdout.toString()).sandboxes ?? []).toHaveLength(0);
  });

  it('nobody touches a member before its claim, not even an admin naming its workspace', async () => {
    const id = (await members())[0]!;
    const name = (await client.hget(keysFor(client).sandbox(id), 'name'))!;
    const all = await runCli(['sandbox', 'list', '--all-workspaces', '-o', 'json'], { gateway: gw(0) });
    expect(all.code, all.stderr.toString()).toBe(0);
    expect(JSON.stringify(JSON.parse(all.stdout.toString()))).not.toContain(id);
    for (const args of [
      ['sandbox', 'get', name],
      ['sandbox', 'get', name, '--workspace', poolWorkspace('warm')],
      ['sandbox', 'exec', name, '--workspace', poolWorkspace('warm'), '--', 'touch', '/sandbox/touched'],
      ['sandbox', 'delete', name, '--workspace', poolWorkspace('warm')],
    ]) {
      const res = await runCli(args, { gateway: gw(1), timeoutMs: 20_000 });
      expect(res.code, `${args.join(' ')} was accepted`).not.toBe(0);
      expect(res.stderr.toString(), args.join(' ')).toMatch(/not found|NOT_FOUND|not a member/i);
    }
    expect(await client.sismember(keysFor(client).workspaceSandboxes(poolWorkspace('warm')), id)).toBe(1);
  });

  it('a create claims a member: its id, Ready at once, with the caller name, command and environment', async () => {
    const before = new Set(await members());
    const res = await create(['--pool', 'warm', '--name', 'claimed-a', '--env', 'GREETING=hello-pool', '--', 'sh', '-c', 'echo "main saw $GREETING" > main-out; exec sleep infinity']);
    expect(res.code, res.err).toBe(0);
    const id = res.sandbox!.metadata.id;
    expect(before.has(id), 'the sandbox is a former member').toBe(true);
    expect(res.sandbox!.status.phase).toMatch(/READY|Ready/);
    expect(await members()).not.toContain(id);
    // Its environment reaches execs at once, and its main process ran the claim's command.
    expect((await exec('claimed-a', ['printenv', 'GREETING'])).out.trim()).toBe('hello-pool');
    await waitFor('main process output', async () => (await exec('claimed-a', ['cat', 'main-out'])).out.trim() === 'main saw hello-pool', 15_000, 250);
    // From the other replica too (the session is wherever the member connected).
    expect((await exec('claimed-a', ['printenv', 'GREETING'], gw(1))).out.trim()).toBe('hello-pool');
    // The record is the caller's: the member's fields are gone, the name index points at it.
    expect(await client.hget(keysFor(client).sandbox(id), 'pool')).toBeNull();
    expect(await client.get(keysFor(client).sandboxName('default', 'claimed-a'))).toBe(id);
  });

  it('the pool refills after a claim', async () => {
    await readyMembers(2);
  });

  it('a claimed sandbox stopped and started runs the claim command again, with its environment', async () => {
    expect((await exec('claimed-a', ['rm', 'main-out'])).code).toBe(0);
    for (const verb of ['stop', 'start']) {
      const res = await runCli(['sandbox', verb, 'claimed-a'], { gateway: gw(1), timeoutMs: 60_000 });
      expect(res.code, `${verb}: ${res.stderr.toString()}`).toBe(0);
    }
    await waitFor('the main process of the new run', async () => (await exec('claimed-a', ['cat', 'main-out'])).out.trim() === 'main saw hello-pool', 60_000, 500);
    expect((await exec('claimed-a', ['printenv', 'GREETING'])).out.trim()).toBe('hello-pool');
  });

  it('concurrent creates never get the same member; those the pool cannot serve start cold', async () => {
    const before = new Set(await members());
    const results = await Promise.all([0, 1, 2, 3].map((i) => create(['--pool', 'warm', '--name', `race-${i}`, '--', 'sleep', 'infinity'], gw(i % 2))));
    for (const r of results) expect(r.code, r.err).toBe(0);
    const ids = results.map((r) => r.sandbox!.metadata.id);
    expect(new Set(ids).size).toBe(4);
    const claimed = ids.filter((id) => before.has(id));
    expect(claimed.length).toBeGreaterThanOrEqual(1);
    expect(claimed.length).toBeLessThanOrEqual(2);
    for (let i = 0; i < 4; i++) {
      await waitFor(`race-${i} serving`, async () => (await exec(`race-${i}`, ['echo', `ok-${i}`])).out.trim() === `ok-${i}`, 60_000, 300);
    }
  });

  it('a request the members were not launched for is refused, naming the field', async () => {
    const image = await create(['--pool', 'warm', '--image', 'some-other-image', '--', 'true']);
    expect(image.code).not.toBe(0);
    expect(image.err).toMatch(/spec\.template\.image/);
    const memory = await create(['--pool', 'warm', '--memory', '64Mi', '--', 'true']);
    expect(memory.code).not.toBe(0);
    expect(memory.err).toMatch(/spec\.template\.resources/);
    const missing = await create(['--pool', 'no-such-pool', '--', 'true']);
    expect(missing.code).not.toBe(0);
    expect(missing.err).toMatch(/pool 'no-such-pool' not found/);
  });

  it('an auto-match pool serves creates of exactly its template that name no pool; other pools and templates start cold', async () => {
    const set = await runCli(['pool', 'set', 'auto', '--size', '1', '--cpu', '300m', '--auto-match'], { gateway: gw(0) });
    expect(set.code, set.stderr.toString()).toBe(0);
    const autoMembers = () => client.smembers(keysFor(client).workspaceSandboxes(poolWorkspace('auto')));
    await waitFor('a ready member of auto', async () => (await pools()).find((p) => p.name === 'auto')?.ready === 1, 90_000, 300);
    // 'warm' (not auto-match, the default template) has Ready members a plain create could take.
    await waitFor('a ready member of warm', async () => ((await pools()).find((p) => p.name === 'warm')?.ready ?? 0) >= 1, 90_000, 300);
    const warmBefore = new Set(await members());
    const autoBefore = new Set(await autoMembers());
    const claimed = await create(['--name', 'auto-a', '--cpu', '300m', '--env', 'AUTO=yes', '--', 'sh', '-c', 'echo "main $AUTO" > main-out; exec sleep infinity'], gw(1));
    expect(claimed.code, claimed.err).toBe(0);
    expect(autoBefore.has(claimed.sandbox!.metadata.id), 'a create of the exact template got the member').toBe(true);
    expect(claimed.sandbox!.status.phase).toMatch(/READY|Ready/);
    await waitFor('the claim command ran', async () => (await exec('auto-a', ['cat', 'main-out'])).out.trim() === 'main yes', 15_000, 250);
    // Another CPU limit, or the default template of a pool that is not auto-match: cold.
    const other = await create(['--name', 'auto-b', '--cpu', '400m', '--', 'sleep', 'infinity']);
    const plain = await create(['--name', 'plain-c', '--', 'sleep', 'infinity']);
    for (const r of [other, plain]) {
      expect(r.code, r.err).toBe(0);
      expect(warmBefore.has(r.sandbox!.metadata.id) || autoBefore.has(r.sandbox!.metadata.id), `${r.sandbox!.metadata.name} got a member`).toBe(false);
    }
    const listed = (await pools()).find((p) => p.name === 'auto') as PoolView & { autoMatch?: boolean };
    expect(listed.autoMatch).toBe(true);
    expect((await pools()).find((p) => p.name === 'warm') as PoolView & { autoMatch?: boolean }).toMatchObject({ autoMatch: false });
    for (const name of ['auto-a', 'auto-b', 'plain-c']) expect((await runCli(['sandbox', 'delete', name], { gateway: gw(0) })).code, name).toBe(0);
    expect((await runCli(['pool', 'delete', 'auto'], { gateway: gw(0) })).code).toBe(0);
    await waitFor('auto members retired', async () => (await autoMembers()).length === 0, 60_000, 500);
  });

  it('a claim whose replica died before it started the main process still gets it started', async () => {
    await readyMembers(2);
    // The claim's Redis write alone, as a replica that was killed right after it would leave it.
    const sandboxes = new SandboxStore(client);
    const store = new PoolStore(client, sandboxes);
    const member = (await store.members('warm')).find((m) => m.sandbox.status?.phase === Phase.READY)!;
    expect(member, 'a ready member').toBeDefined();
    const sandbox = sandboxCodec.decode(sandboxCodec.encode(member.sandbox));
    sandbox.metadata = { ...sandbox.metadata!, name: 'orphan-claim', workspace: 'default', created_at_ms: Date.now() };
    sandbox.spec = { ...sandbox.spec!, command: ['sh', '-c', 'echo started-late > late-out; exec sleep infinity'], tty: false, environment: { LATE: 'yes' } };
    sandbox.status = { ...sandbox.status!, sandbox_name: 'orphan-claim' };
    expect(await store.claim(member, sandbox, { workspace: 'default', name: 'orphan-claim', maxPerWorkspace: 0 })).toBe(true);
    // No replica sent start_main: the reconcile sweep (every 10 s) does, from the record.
    await waitFor('the main process of the orphaned claim', async () => (await exec('orphan-claim', ['cat', 'late-out'])).out.trim() === 'started-late', 40_000, 500);
    expect((await exec('orphan-claim', ['printenv', 'LATE'])).out.trim()).toBe('yes');
    await waitFor('mainpending cleared', async () => (await client.hget(keysFor(client).sandbox(member.sandbox.metadata!.id!), 'mainpending')) === '0', 10_000);
  });

  it('a new template replaces the members; pool delete retires them all', async () => {
    const old = new Set(await members());
    const set = await runCli(['pool', 'set', 'warm', '--size', '1', '--memory', '256Mi'], { gateway: gw(1) });
    expect(set.code, set.stderr.toString()).toBe(0);
    await waitFor('members of the new generation only', async () => {
      const now = await members();
      return now.length === 1 && !old.has(now[0]!) && (await pools())[0]?.ready === 1;
    }, 90_000, 500);
    for (const id of old) expect(await client.exists(keysFor(client).sandbox(id))).toBe(0);
    const del = await runCli(['pool', 'delete', 'warm'], { gateway: gw(0) });
    expect(del.code, del.stderr.toString()).toBe(0);
    await waitFor('every member retired', async () => (await members()).length === 0 && (await client.sismember(keysFor(client).poolIndex(), 'warm')) === 0, 60_000, 500);
    expect((await pools()).find((p) => p.name === 'warm')).toBeUndefined();
    // The claimed sandboxes are the callers': untouched by the pool's deletion.
    expect((await exec('claimed-a', ['echo', 'still-here'])).out.trim()).toBe('still-here');
  });
  it('over HTTP: PUT/GET/DELETE /v1/pools, and a create with `pool` in its body claims a member', async () => {
    const auth = { authorization: `Bearer ${cluster.token}` };
    const json = { ...auth, 'content-type': 'application/json' };
    const http = (i: number) => cluster.replicas[i]!.httpUrl;
    const put = await fetch(`${http(0)}/v1/pools/rest`, { method: 'PUT', headers: json, body: JSON.stringify({ size: 1, resources: { memory: '128Mi' }, auto_match: true }) });
    expect(put.status, await put.clone().text()).toBe(200);
    expect(await put.json()).toMatchObject({ name: 'rest', size: 1, resources: { memory: '128Mi' }, generation: 1, auto_match: true, consecutive_failures: 0 });
    const unknownField = await fetch(`${http(1)}/v1/pools/rest`, { method: 'PUT', headers: json, body: JSON.stringify({ size: 1, colour: 'blue' }) });
    expect(unknownField.status).toBe(400);
    const listed = async () => ((await (await fetch(`${http(1)}/v1/pools`, { headers: auth })).json()) as { pools: { name: string; ready: number }[] }).pools;
    await waitFor('a ready member of rest', async () => (await listed()).find((p) => p.name === 'rest')?.ready === 1, 90_000, 300);
    const members = new Set(await client.smembers(keysFor(client).workspaceSandboxes(poolWorkspace('rest'))));
    const created = await fetch(`${http(1)}/v1/sandboxes`, { method: 'POST', headers: json, body: JSON.stringify({ name: 'rest-claimed', pool: 'rest', command: ['sleep', 'infinity'] }) });
    expect(created.status, await created.clone().text()).toBe(200);
    const body = (await created.json()) as { metadata: { id: string }; status: { phase: string } };
    expect(members.has(body.metadata.id), JSON.stringify(body)).toBe(true);
    expect(body.status.phase).toMatch(/READY/i);
    const del = await fetch(`${http(0)}/v1/pools/rest`, { method: 'DELETE', headers: auth });
    expect(del.status).toBe(200);
    expect(await del.json()).toEqual({ deleted: true });
    expect((await fetch(`${http(0)}/v1/pools/rest`, { method: 'DELETE', headers: auth })).status).toBe(404);
    await expectOwnedOperationsServed('pools.test.ts', cluster.replicas.map((x) => x.httpUrl));
  });
});
