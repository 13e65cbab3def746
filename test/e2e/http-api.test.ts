// Issue 14, the REST core: through haproxy in front of three replicas, `curl` alone creates a
// sandbox, runs a command and gets both streams and the exit code, follows the log over SSE
// (resuming with Last-Event-ID), watches and deletes it. And the door, attacked: no token or a
// garbage one on every /v1 route, another workspace's sandbox, unknown fields, an output past
// its cap, a client killed mid-exec (no process may be left behind).
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Validator } from '@seriousme/openapi-schema-validator';
import { Cluster } from '../harness/cluster.ts';
import { startRedis, type TestRedis } from '../harness/redis.ts';
import { startHaproxy, type Haproxy } from '../harness/haproxy.ts';
import { freePorts } from '../harness/ports.ts';
import { curl, CurlSse, type SseEvent } from '../harness/curl.ts';
import { pidsMatching } from '../harness/sandbox.ts';
import { waitFor } from '../harness/wait.ts';
import { OPERATIONS, expectOwnedOperationsServed, routeOfPath } from '../harness/openapi-coverage.ts';

let redis: TestRedis;
let cluster: Cluster;
let lb: Haproxy;
let base: string;
let token: string;
const NAME = 'http-api';

/** A tag unique to this run: the sleeps of a case end in it, so leftovers of other runs never match. */
const runTag = String(100 + Math.floor(Math.random() * 900));

beforeAll(async () => {
  redis = await startRedis();
  cluster = await Cluster.start({ redisUrl: redis.url, replicas: 3 });
  const [grpcPort, httpPort] = await freePorts(2);
  lb = await startHaproxy(grpcPort!, cluster.replicas.map((x) => ({ name: x.id, grpcPort: x.grpcPort, httpPort: x.httpPort })), { httpPort });
  base = `${lb.httpUrl}/v1`;
  token = cluster.token;
  const created = await curl('POST', `${base}/sandboxes`, { token, body: { name: NAME, command: ['sleep', 'infinity'], labels: { suite: 'http-api' } } }).catch((err: unknown) => {
    // The balancer's view too (a replica marked DOWN has its connections shut): CI once had an empty reply here.
    throw new Error(`${String(err)}\nhaproxy:\n${lb.log().slice(-3000)}\n${cluster.logs().slice(-4000)}`);
  });
  expect(created.status, created.body).toBe(200);
  expect(created.json.metadata.name).toBe(NAME);
  await waitFor('sandbox Ready (GET through haproxy)', async () => (await curl('GET', `${base}/sandboxes/${NAME}`, { token })).json?.status?.phase === 'READY', 30_000, 200);
});

afterAll(async () => {
  // The last case deletes it; this is for a run cut short (or filtered with -t): no compute outlives the file.
  if (cluster && lb) await curl('DELETE', `${base}/sandboxes/${NAME}`, { token }).catch(() => undefined);
  await lb?.stop();
  await cluster?.stop();
  cluster?.cleanup();
  await redis?.stop();
});

const exec = (body: object, opts: { token?: string; name?: string } = {}) => curl('POST', `${base}/sandboxes/${opts.name ?? NAME}/exec`, { token: opts.token ?? token, body });

function expectErrorShape(res: { status: number; json: any; body: string }, status: number, code: string): string {
  expect(res.status, res.body).toBe(status);
  expect(res.json, res.body).toMatchObject({ error: { code, grpc_code: expect.any(Number), message: expect.any(String) } });
  return res.json.error.message as string;
}

describe('curl alone, through haproxy', () => {
  it('runs a command and gets stdout, stderr and the exit code', async () => {
    const res = await exec({ argv: ['sh', '-c', 'echo out; echo err >&2; exit 7'] });
    expect(res.status, res.body).toBe(200);
    expect(res.json).toEqual({ exit_code: 7, timed_out: false, stdout: 'out\n', stderr: 'err\n' });
  });

  it('passes stdin as text or base64, and output that is not UTF-8 as base64', async () => {
    const text = await exec({ argv: ['cat'], stdin: 'hé\n' });
    expect(text.json).toMatchObject({ exit_code: 0, stdout: 'hé\n' });
    const bytes = Buffer.from([0xff, 0x00, 0xfe, 0x0a]);
    const bin = await exec({ argv: ['cat'], stdin_base64: bytes.toString('base64') });
    expect(bin.json.stdout).toBeUndefined();
    expect(Buffer.from(bin.json.stdout_base64, 'base64')).toEqual(bytes);
    const timed = await exec({ argv: ['sleep', '5'], timeout_seconds: 1 });
    expect(timed.json).toMatchObject({ exit_code: 124, timed_out: true });
  });

  it('lists by label selector with paging, gets by name', async () => {
    const list = await curl('GET', `${base}/sandboxes?label_selector=suite%3Dhttp-api&limit=1`, { token });
    expect(list.status, list.body).toBe(200);
    expect(list.json.sandboxes.map((s: any) => s.metadata.name)).toEqual([NAME]);
    expect(list.json.next_offset).toBe(1);
    const next = await curl('GET', `${base}/sandboxes?label_selector=suite%3Dhttp-api&limit=1&offset=1`, { token });
    expect(next.json).toEqual({ sandboxes: [] });
    const none = await curl('GET', `${base}/sandboxes?label_selector=suite%3Dother`, { token });
    expect(none.json).toEqual({ sandboxes: [] });
  });
});

describe('the door, attacked', () => {
  it('refuses no token and a garbage token on every /v1 route, in the one error shape', async () => {
    const doc = (await curl('GET', `${lb.httpUrl}/openapi.json`)).json;
    const operations: [string, string][] = [];
    for (const [p, item] of Object.entries<Record<string, unknown>>(doc.paths)) {
      if (!p.startsWith('/v1/')) continue;
      for (const method of Object.keys(item)) if (['get', 'post', 'put', 'delete', 'patch'].includes(method)) operations.push([method.toUpperCase(), p]);
    }
    expect(operations.length).toBeGreaterThanOrEqual(9);
    for (const [method, p] of operations) {
      const url = `${lb.httpUrl}${p.replace('{name}', NAME)}`;
      // A route with a body is also sent a broken one: the gate comes before the body is parsed,
      // so an unauthenticated caller learns nothing about its body either.
      const bodies = method === 'POST' || method === 'PUT' ? ['{}', '{"broken": '] : [undefined];
      for (const bad of [undefined, 'sg_garbage-not-a-token']) {
        for (const rawBody of bodies) {
          const res = await curl(method, url, { token: bad, ...(rawBody === undefined ? {} : { rawBody }) });
          expectErrorShape(res, 401, 'UNAUTHENTICATED');
          expect(res.headers['www-authenticate']).toContain('Bearer');
        }
      }
    }
  });

  it("answers another workspace's sandbox as one that does not exist", async () => {
    const other = await cluster.tokenFor('intruders', 'member', 'http-api attacker');
    const asked = [
      () => curl('GET', `${base}/sandboxes/${NAME}`, { token: other }),
      () => curl('GET', `${base}/sandboxes/${NAME}?workspace=default`, { token: other }),
      () => exec({ argv: ['true'] }, { token: other }),
      () => curl('POST', `${base}/sandboxes/${NAME}/exec?workspace=default`, { token: other, body: { argv: ['true'] } }),
      () => curl('GET', `${base}/sandboxes/${NAME}/logs?workspace=default`, { token: other }),
      () => curl('GET', `${base}/sandboxes/${NAME}/events?workspace=default`, { token: other }),
      () => curl('POST', `${base}/sandboxes/${NAME}/stop?workspace=default`, { token: other }),
      () => curl('DELETE', `${base}/sandboxes/${NAME}?workspace=default`, { token: other }),
    ];
    for (const ask of asked) expectErrorShape(await ask(), 404, 'NOT_FOUND');
    const list = await curl('GET', `${base}/sandboxes?workspace=default`, { token: other });
    expectErrorShape(list, 403, 'PERMISSION_DENIED');
    // Still there, still Ready.
    expect((await curl('GET', `${base}/sandboxes/${NAME}`, { token })).json.status.phase).toBe('READY');
  });

  it('refuses unknown fields and bad input with 400 naming the field', async () => {
    const create = await curl('POST', `${base}/sandboxes`, { token, body: { name: 'never-made', colour: 'red' } });
    expect(expectErrorShape(create, 400, 'INVALID_ARGUMENT')).toContain("'colour'");
    const nested = await curl('POST', `${base}/sandboxes`, { token, body: { name: 'never-made', resources: { gpu: '1' } } });
    expect(expectErrorShape(nested, 400, 'INVALID_ARGUMENT')).toContain("'resources.gpu'");
    const execTty = await exec({ argv: ['true'], tty: true });
    expect(expectErrorShape(execTty, 400, 'INVALID_ARGUMENT')).toContain("'tty'");
    const query = await curl('GET', `${base}/sandboxes?lable_selector=a%3Db`, { token });
    expect(expectErrorShape(query, 400, 'INVALID_ARGUMENT')).toContain("'lable_selector'");
    const both = await exec({ argv: ['cat'], stdin: 'a', stdin_base64: 'YQ==' });
    expect(expectErrorShape(both, 400, 'INVALID_ARGUMENT')).toContain('mutually exclusive');
    const noArgv = await exec({ env: { A: 'b' } });
    expect(expectErrorShape(noArgv, 400, 'INVALID_ARGUMENT')).toContain("'argv'");
    const badJson = await curl('POST', `${base}/sandboxes`, { token, rawBody: '{"name":' });
    expectErrorShape(badJson, 400, 'INVALID_ARGUMENT');
    // The service's own validation, through the same shape.
    const badName = await curl('POST', `${base}/sandboxes`, { token, body: { name: 'Not_A_Valid_Name!' } });
    expectErrorShape(badName, 400, 'INVALID_ARGUMENT');
    expect((await curl('GET', `${base}/sandboxes`, { token })).json.sandboxes.map((s: any) => s.metadata.name)).toEqual([NAME]);
    const unknownRoute = await curl('GET', `${base}/sandboxes/${NAME}/nope`, { token });
    expectErrorShape(unknownRoute, 404, 'NOT_FOUND');
  });

  it('answers 413 past the output cap, and the command is killed', async () => {
    const tok = `${runTag}1`;
    // A background sleep is part of the tree when the output passes the cap: it must be killed too.
    const res = await exec({ argv: ['sh', '-c', `sleep 30.${tok} & sleep 0.3; head -c 3000000 /dev/zero; wait`], max_output_bytes: 1_000_000 });
    const message = expectErrorShape(res, 413, 'RESOURCE_EXHAUSTED');
    expect(message).toContain('1000000');
    expect(message).toContain('/exec/ws');
    await waitFor(`no process of the capped exec left (sleep 30.${tok})`, async () => (await pidsMatching(`sleep 30.${tok}`)).length === 0, 10_000, 100);
    const tooBig = await exec({ argv: ['true'], max_output_bytes: 1 << 30 });
    expect(expectErrorShape(tooBig, 400, 'INVALID_ARGUMENT')).toContain('max_output_bytes');
  });

  it('kills the process tree of a client killed mid-exec (curl SIGKILLed), at the owner and through a relay', async () => {
    const { spawn } = await import('node:child_process');
    const { mkdtempSync, writeFileSync } = await import('node:fs');
    // Through the load balancer, then at each replica directly: the owner's local path and the relayed one both.
    const entries = [base, ...cluster.replicas.map((x) => `${x.httpUrl}/v1`)];
    for (const [i, entry] of entries.entries()) {
      const tok = `${runTag}${3 + i}`;
      const needle = `sleep 31.${tok}`;
      const dir = mkdtempSync('/tmp/sg-http-kill-');
      writeFileSync(`${dir}/body`, JSON.stringify({ argv: ['sh', '-c', `sleep 31.${tok}; echo never`] }));
      const client = spawn('curl', ['-sS', '-X', 'POST', '-H', `Authorization: Bearer ${token}`, '-H', 'Content-Type: application/json', '--data-binary', `@${dir}/body`, `${entry}/sandboxes/${NAME}/exec`], {
        stdio: 'ignore',
      });
      await waitFor(`the exec's tree running via ${entry} (${needle})`, async () => (await pidsMatching(needle)).length > 0, 20_000, 50);
      const gone = new Promise((r) => client.once('close', r));
      client.kill('SIGKILL');
      await gone;
      await waitFor(`no process of the exec left after its client (via ${entry}) died (${needle})`, async () => (await pidsMatching(needle)).length === 0, 10_000, 50);
    }
  });
});

/** Open blocking-read connections of watches of the sandbox (the store names them). */
async function followConnections(sandboxId: string): Promise<number> {
  const r = redis.client();
  try {
    return ((await r.client('LIST')) as string).split('\n').filter((l) => l.includes(`name=sandgate-follow:${sandboxId} `)).length;
  } finally {
    r.disconnect();
  }
}

/** The JSON of a `log` event. */
const line = (e: SseEvent) => JSON.parse(e.data) as { message: string; timestamp_ms: number };

describe('logs and events over SSE', () => {
  it('follows the log, and resumes after Last-Event-ID without duplicates or gaps', async () => {
    const id = (await curl('GET', `${base}/sandboxes/${NAME}`, { token })).json.metadata.id as string;
    const first = new CurlSse(`${base}/sandboxes/${NAME}/logs?follow=true`, { token });
    await first.waitFor('the log tail (sandbox created)', (e) => e.event === 'log' && line(e).message.includes('sandbox created'));
    // The follow's own Redis connection (named when it connects, a moment after the tail).
    await waitFor('the follow connection open', async () => (await followConnections(id)) === 1, 10_000);
    // New lines while following: the lifecycle notes of a stop.
    expect((await curl('POST', `${base}/sandboxes/${NAME}/stop`, { token })).status).toBe(200);
    const stopped = await first.waitFor('"sandbox stopped" followed live', (e) => e.event === 'log' && line(e).message === 'sandbox stopped');
    // The service's own refusal (the access rule) through the exec adapter: a stopped sandbox.
    expectErrorShape(await exec({ argv: ['true'] }), 412, 'FAILED_PRECONDITION');
    await first.kill();
    // The client went away: the watch ends and its Redis connection is closed.
    await waitFor('the follow connection closed', async () => (await followConnections(id)) === 0, 10_000);
    const seen = first.events.slice(0, first.events.indexOf(stopped) + 1);
    expect(seen.every((e) => e.event === 'log' && e.id)).toBe(true);
    // Disconnected: more lines are written meanwhile (a start).
    expect((await curl('POST', `${base}/sandboxes/${NAME}/start`, { token })).status).toBe(200);
    // Resume after an event in the middle: what came after it, then what is new.
    const cut = Math.max(0, seen.length - 2);
    const resumed = new CurlSse(`${lb.httpUrl}/v1/sandboxes/${NAME}/logs`, { token, lastEventId: seen[cut]!.id, headers: { Accept: 'text/event-stream' } });
    await resumed.waitFor('"start requested", written while disconnected', (e) => e.event === 'log' && line(e).message === 'start requested');
    await resumed.kill();
    const got = resumed.events.filter((e) => e.event === 'log');
    // What came after the cut again first (the ids differ only in the event-stream part, which the
    // stop and start moved on), then the new lines.
    const text = (e: SseEvent) => `${line(e).timestamp_ms} ${line(e).message}`;
    expect(got.slice(0, seen.length - cut - 1).map(text)).toEqual(seen.slice(cut + 1).map(text));
    // No gap: the seen prefix and the resumed stream are the log as the JSON snapshot has it.
    const snapshot = (await curl('GET', `${base}/sandboxes/${NAME}/logs`, { token })).json.logs as { message: string; timestamp_ms: number }[];
    const joined = [...seen.slice(0, cut + 1), ...got].map(text);
    const expected = snapshot.map((l) => `${l.timestamp_ms} ${l.message}`).slice(0, joined.length);
    expect(joined).toEqual(expected);
    expect(new Set(joined).size).toBe(joined.length);
    const bad = await curl('GET', `${base}/sandboxes/${NAME}/logs?follow=true`, { token, headers: { 'Last-Event-ID': 'garbage' } });
    expect(expectErrorShape(bad, 400, 'INVALID_ARGUMENT')).toContain('Last-Event-ID');
  });

  it('watches the sandbox until it is deleted, then deletes through curl', async () => {
    await waitFor('Ready again after start', async () => (await curl('GET', `${base}/sandboxes/${NAME}`, { token })).json?.status?.phase === 'READY', 30_000, 200);
    const watch = new CurlSse(`${base}/sandboxes/${NAME}/events`, { token });
    const snap = await watch.waitFor('the first snapshot', (e) => e.event === 'sandbox');
    expect(JSON.parse(snap.data).status.phase).toBe('READY');
    const del = await curl('DELETE', `${base}/sandboxes/${NAME}`, { token });
    expect(del.status, del.body).toBe(200);
    expect(del.json).toEqual({ deleted: true });
    await watch.waitFor('the stream ends once the sandbox is deleted', (e) => e.event === 'end', 30_000);
    expect(watch.events.some((e) => e.event === 'sandbox' && JSON.parse(e.data).status.phase === 'DELETING')).toBe(true);
    await waitFor('curl exits at the end of the stream', () => watch.ended, 5_000);
    expectErrorShape(await curl('GET', `${base}/sandboxes/${NAME}`, { token }), 404, 'NOT_FOUND');
  });
});

describe('the API description', () => {
  it('serves /openapi.json as valid OpenAPI 3.1 and /docs as HTML', async () => {
    const doc = await curl('GET', `${lb.httpUrl}/openapi.json`);
    expect(doc.status).toBe(200);
    expect(doc.json.openapi).toMatch(/^3\.1\./);
    const result = await new Validator().validate(doc.json);
    expect(result.errors, JSON.stringify(result.errors)).toBeUndefined();
    expect(result.valid).toBe(true);
    for (const op of ['createSandbox', 'listSandboxes', 'getSandbox', 'deleteSandbox', 'stopSandbox', 'startSandbox', 'execSandbox', 'getSandboxLogs', 'watchSandbox']) {
      expect(JSON.stringify(doc.json.paths)).toContain(`"operationId":"${op}"`);
    }
    // Every operation it describes is owned by an e2e file, which checks at its end that a replica
    // answered it with a success (test/harness/openapi-coverage.ts): a new route without a test
    // fails here, a test that stopped calling its route fails there.
    const described: Record<string, { method: string; route: string }> = {};
    for (const [p, item] of Object.entries<Record<string, { operationId?: string }>>(doc.json.paths)) {
      for (const [method, op] of Object.entries(item)) if (op?.operationId) described[op.operationId] = { method: method.toUpperCase(), route: routeOfPath(p) };
    }
    expect(described).toEqual(Object.fromEntries(Object.entries(OPERATIONS).map(([id, op]) => [id, { method: op.method, route: op.route }])));
    for (const op of Object.values(OPERATIONS)) expect(fs.existsSync(path.join(import.meta.dirname, op.file)), op.file).toBe(true);
    const docs = await curl('GET', `${lb.httpUrl}/docs/`);
    expect(docs.status).toBe(200);
    expect(docs.headers['content-type']).toContain('text/html');
    expect(docs.body.toLowerCase()).toContain('swagger');
  });
});

describe('coverage of the API description', () => {
  it('every operation this file owns in /openapi.json was answered with a success', async () => {
    await expectOwnedOperationsServed('http-api.test.ts', cluster.replicas.map((x) => x.httpUrl));
  });
});
