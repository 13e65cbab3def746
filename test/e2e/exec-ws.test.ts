// Issue 14: exec over WebSocket (/v1/sandboxes/{name}/exec/ws). Real replicas, a real sandbox, the
// `ws` client library as a browser-less client; through the non-owner replica unless stated.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RedisClient } from '@sandgate/store';
import WebSocket from 'ws';
import { Cluster, runCli } from '../harness/cluster.ts';
import { startRedis, type TestRedis } from '../harness/redis.ts';
import { createSandbox, ownerOf, rssBytes, type CreatedSandbox } from '../harness/sandbox.ts';
import { execIdOf, expectTreeGone as expectTreeGoneFrom, treeProcs } from '../harness/proc-tree.ts';
import { relayedCallHoldMiB, sleep, tcpConnectionHoldMiB, waitFor, waitForStalledWrites } from '../harness/wait.ts';
import { openShellClient } from '../harness/grpc-client.ts';
import { expectOwnedOperationsServed } from '../harness/openapi-coverage.ts';
import { LINK_SILENCE_LIMIT_MS } from '@sandgate/relay';

let redis: TestRedis;
let r: RedisClient;
let cluster: Cluster;
let sbx: CreatedSandbox;
/** The replica that does not hold the sandbox's session: every exec here is relayed. */
let via: number;

beforeAll(async () => {
  redis = await startRedis();
  r = redis.client();
  cluster = await Cluster.start({ redisUrl: redis.url, replicas: 2 });
  sbx = await createSandbox(cluster.replicas[0]!.grpcAddress, 'exec-ws');
  const owner = await ownerOf(r, sbx.id);
  via = (cluster.replicas.findIndex((x) => x.id === owner) + 1) % cluster.replicas.length;
});

afterAll(async () => {
  if (sbx) await runCli(['sandbox', 'delete', sbx.name], { gateway: cluster.replicas[0]!.grpcAddress }).catch(() => undefined);
  r?.disconnect();
  await cluster?.stop();
  cluster?.cleanup();
  await redis?.stop();
});

/** Where a client process resolves `ws` from. */
const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

const runTag = String(100 + Math.floor(Math.random() * 900));
let caseCounter = 10;
const token = () => `${runTag}${caseCounter++}`;
const expectTreeGone = (tok: string, execId: string | undefined, withinMs: number) => expectTreeGoneFrom(tok, execId, withinMs, () => cluster.logs());

const wsUrl = (i: number, name = sbx.name, query = '') => `${cluster.replicas[i]!.httpUrl.replace(/^http/, 'ws')}/v1/sandboxes/${name}/exec/ws${query}`;

async function metricOf(replica: number, name: string): Promise<number> {
  const text = await (await fetch(`${cluster.replicas[replica]!.httpUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.slice(name.length + 1)) : 0;
}

interface ExitFrame {
  type: 'exit';
  exit_code: number;
  timed_out: boolean;
}
interface ErrorFrame {
  type: 'error';
  code: string;
  grpc_code: number;
  message: string;
}
interface Outcome {
  stdout: Buffer;
  stderr: Buffer;
  exit?: ExitFrame;
  error?: ErrorFrame;
  closeCode: number;
}

interface WsExec {
  ws: WebSocket;
  /** Resolves once the upgrade succeeded; rejects with the HTTP status and body if it was refused. */
  opened: Promise<void>;
  outcome: Promise<Outcome>;
  /** Everything received so far on stdout. */
  stdoutSoFar(): Buffer;
  control(msg: object): void;
}

interface OpenOptions {
  /** Default: the cluster's admin token in Authorization; null: no token. */
  token?: string | null;
  /** Where the token goes. */
  via?: 'header' | 'subprotocol';
  protocols?: string[];
  replica?: number;
  name?: string;
  query?: string;
}

/** Opens the socket and sends the start message (a raw object, so tests can send anything). */
function wsExec(start: Record<string, unknown> | null, opts: OpenOptions = {}): WsExec {
  const tok = opts.token === undefined ? cluster.token : opts.token;
  const headers: Record<string, string> = {};
  let protocols = opts.protocols;
  if (tok !== null && (opts.via ?? 'header') === 'header') headers.authorization = `Bearer ${tok}`;
  if (tok !== null && opts.via === 'subprotocol') protocols = ['sandgate.exec.v1', `bearer.${tok}`];
  const ws = new WebSocket(wsUrl(opts.replica ?? via, opts.name, opts.query), protocols, { headers });
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  let exit: ExitFrame | undefined;
  let error: ErrorFrame | undefined;
  const opened = new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => reject(Object.assign(new Error(`upgrade refused: ${res.statusCode} ${body}`), { status: res.statusCode, body })));
    });
    ws.once('error', reject);
  });
  opened.catch(() => undefined);
  ws.on('message', (data: Buffer, isBinary: boolean) => {
    if (isBinary) {
      (data[0] === 1 ? stdout : data[0] === 2 ? stderr : []).push(data.subarray(1));
      return;
    }
    const msg = JSON.parse(data.toString()) as ExitFrame | ErrorFrame;
    if (msg.type === 'exit') exit = msg;
    else if (msg.type === 'error') error = msg;
  });
  const outcome = new Promise<Outcome>((resolve) => {
    ws.on('close', (code: number) => resolve({ stdout: Buffer.concat(stdout), stderr: Buffer.concat(stderr), exit, error, closeCode: code }));
    ws.on('error', () => undefined);
  });
  if (start) void opened.then(() => ws.send(JSON.stringify(start)), () => undefined);
  return {
    ws,
    opened,
    outcome,
    stdoutSoFar: () => Buffer.concat(stdout),
    control: (msg) => ws.send(JSON.stringify(msg)),
  };
}

const run = (argv: string[], extra: Record<string, unknown> = {}) => wsExec({ type: 'start', argv, ...extra });

describe('exec over WebSocket through the non-owner replica', () => {
  it('stdout and stderr arrive separated, then the exit code and a normal close', async () => {
    const res = await run(['sh', '-c', 'echo out; echo err >&2; exit 7']).outcome;
    expect(res.error).toBeUndefined();
    expect(res.stdout.toString()).toBe('out\n');
    expect(res.stderr.toString()).toBe('err\n');
    expect(res.exit).toEqual({ type: 'exit', exit_code: 7, timed_out: false });
    expect(res.closeCode).toBe(1000);
  });

  it('binary stdin round-trips byte-identical through cat (zeros, invalid UTF-8)', async () => {
    const payload = Buffer.concat([Buffer.from([0, 0, 0xff, 0xfe, 0xc3, 0x28, 0x80]), randomBytes(2 * 1024 * 1024), Buffer.alloc(4096)]);
    const exec = run(['cat']);
    await exec.opened;
    for (let off = 0; off < payload.length; off += 100_000) exec.ws.send(payload.subarray(off, off + 100_000), { binary: true });
    exec.control({ type: 'stdin_eof' });
    const res = await exec.outcome;
    expect(res.exit?.exit_code).toBe(0);
    expect(res.stdout.length).toBe(payload.length);
    expect(res.stdout.equals(payload)).toBe(true);
  });

  it('a tty exec: the start size, then a resize (stty size)', async () => {
    const exec = run(['sh', '-c', 'stty size; read line; stty size'], { tty: true, cols: 100, rows: 30 });
    await exec.opened;
    await waitFor('the first stty size', () => exec.stdoutSoFar().toString().includes('30 100'), 15_000, 20);
    exec.control({ type: 'resize', cols: 132, rows: 43 });
    exec.ws.send(Buffer.from('go\n'), { binary: true });
    const res = await exec.outcome;
    expect(res.exit?.exit_code).toBe(0);
    expect(res.stdout.toString()).toMatch(/30 100\r?\n[\s\S]*43 132/);
  });

  it.concurrent.for([
    { signal: 'TERM', tty: false, code: 143 },
    { signal: 2, tty: false, code: 130 },
    { signal: 'SIGTERM', tty: true, code: 143 },
  ])('signal $signal (tty: $tty) reaches the command: exit $code', async (c, { expect }) => {
    const tok = token();
    const exec = run(['sleep', `600.${tok}`], { tty: c.tty });
    await exec.opened;
    await execIdOf(tok);
    exec.control({ type: 'signal', signal: c.signal });
    const res = await exec.outcome;
    expect(res.exit).toEqual({ type: 'exit', exit_code: c.code, timed_out: false });
    await expectTreeGone(tok, undefined, 2_000);
  });

  it('a timeout is reported as timed_out', async () => {
    const tok = token();
    const res = await run(['sleep', `600.${tok}`], { timeout_seconds: 1 }).outcome;
    expect(res.exit).toEqual({ type: 'exit', exit_code: 124, timed_out: true });
  });
});

describe('a client gone mid-command leaves no process behind', () => {
  it.concurrent.for([
    { how: 'TCP socket destroyed (no close frame)', tty: false },
    { how: 'TCP socket destroyed (no close frame)', tty: true },
    { how: 'normal close without an exit', tty: false },
    { how: 'normal close without an exit', tty: true },
  ])('$how (tty: $tty)', async (c, { expect }) => {
    const tok = token();
    const exec = run(['sh', '-c', `sleep 606.${tok} & setsid sleep 607.${tok} & sleep 608.${tok}`], { tty: c.tty });
    await exec.opened;
    const execId = await execIdOf(tok);
    await waitFor('all three sleeps', async () => (await treeProcs(tok)).filter((p) => p.cmd.startsWith('sleep ')).length === 3, 10_000, 25);
    if (c.how.startsWith('TCP')) exec.ws.terminate();
    else exec.ws.close(1000);
    await expectTreeGone(tok, execId, 3_000);
    expect((await exec.outcome).exit).toBeUndefined();
  });

  it('a client process killed with SIGKILL mid-command (its kernel resets the socket)', async () => {
    const tok = token();
    // A client of its own: a node process with the ws library, the token and command in its
    // environment (not on a command line the tree scan reads).
    const client = spawn(
      process.execPath,
      ['--input-type=module', '-e', "import WebSocket from 'ws'; const ws = new WebSocket(process.env.SG_URL, { headers: { authorization: `Bearer ${process.env.SG_TOKEN}` } }); ws.on('open', () => ws.send(process.env.SG_START)); ws.on('message', () => console.log('output'));"],
      {
        cwd: repoRoot,
        env: { ...process.env, SG_URL: wsUrl(via), SG_TOKEN: cluster.token, SG_START: JSON.stringify({ type: 'start', argv: ['sh', '-c', `sleep 610.${tok} & setsid sleep 611.${tok} & echo up; sleep 612.${tok}`] }) },
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    const exited = new Promise<string | null>((resolve) => client.once('exit', (_code, signal) => resolve(signal)));
    await new Promise<void>((resolve, reject) => {
      client.stdout!.once('data', () => resolve());
      client.once('exit', () => reject(new Error('the client process ended before the command wrote')));
    });
    const execId = await execIdOf(tok);
    await waitFor('all three sleeps', async () => (await treeProcs(tok)).filter((p) => p.cmd.startsWith('sleep ')).length === 3, 10_000, 25);
    client.kill('SIGKILL');
    expect(await exited).toBe('SIGKILL');
    await expectTreeGone(tok, execId, 3_000);
  });

  it('a protocol error after the start (an unknown message) ends the exec and kills its tree', async () => {
    const tok = token();
    const exec = run(['sleep', `609.${tok}`]);
    await exec.opened;
    const execId = await execIdOf(tok);
    exec.control({ type: 'dance' });
    const res = await exec.outcome;
    expect(res.error).toMatchObject({ code: 'INVALID_ARGUMENT', grpc_code: 3 });
    expect(res.error?.message).toMatch(/unknown message type "dance"/);
    expect(res.closeCode).toBe(4003);
    await expectTreeGone(tok, execId, 3_000);
  });
});

describe('authentication and access, before the upgrade', () => {
  it.for([
    { what: 'no token', token: null },
    { what: 'a garbage token', token: 'sg_not-a-real-token' },
  ])('$what: 401 before the upgrade, and no exec ran', async (c) => {
    const before = await metricOf(via, 'sandgate_exec_started_total');
    const exec = wsExec({ type: 'start', argv: ['true'] }, { token: c.token });
    const err = (await exec.opened.then(() => null, (e: unknown) => e)) as { status: number; body: string } | null;
    expect(err?.status).toBe(401);
    expect(JSON.parse(err!.body)).toMatchObject({ error: { code: 'UNAUTHENTICATED', grpc_code: 16 } });
    expect(await metricOf(via, 'sandgate_exec_started_total')).toBe(before);
  });

  it('a garbage token as a bearer subprotocol: 401 too', async () => {
    const exec = wsExec(null, { token: 'garbage', via: 'subprotocol' });
    const err = (await exec.opened.then(() => null, (e: unknown) => e)) as { status: number } | null;
    expect(err?.status).toBe(401);
  });

  it('the token as a bearer.<token> subprotocol (what a browser can send) works; sandgate.exec.v1 is selected; the token is never logged', async () => {
    const exec = wsExec({ type: 'start', argv: ['echo', 'via subprotocol'] }, { via: 'subprotocol' });
    await exec.opened;
    expect(exec.ws.protocol).toBe('sandgate.exec.v1');
    const res = await exec.outcome;
    expect(res.stdout.toString()).toBe('via subprotocol\n');
    expect(res.exit?.exit_code).toBe(0);
    for (const replica of cluster.replicas) expect(replica.logs.join('')).not.toContain(cluster.token);
  });

  it.for([
    { what: 'both Authorization and a bearer subprotocol', protocols: ['sandgate.exec.v1', 'bearer.x'], header: true, match: /not both/ },
    { what: 'a subprotocol list not starting with sandgate.exec.v1', protocols: ['chat', 'sandgate.exec.v1'], header: true, match: /first subprotocol/ },
  ])('$what: 400', async (c) => {
    const exec = wsExec(null, { protocols: c.protocols });
    const err = (await exec.opened.then(() => null, (e: unknown) => e)) as { status: number; body: string } | null;
    expect(err?.status).toBe(400);
    expect(JSON.parse(err!.body).error.message).toMatch(c.match);
  });

  it("another workspace's sandbox is not found (by its name, and naming its workspace)", async () => {
    const stranger = await cluster.tokenFor('ws-stranger', 'member', 'exec-ws test');
    for (const query of ['', '?workspace=default']) {
      const exec = wsExec({ type: 'start', argv: ['true'] }, { token: stranger, query });
      const err = (await exec.opened.then(() => null, (e: unknown) => e)) as { status: number; body: string } | null;
      expect(err?.status, query).toBe(404);
      expect(JSON.parse(err!.body).error.code).toBe('NOT_FOUND');
    }
  });

  it('an unknown query parameter is refused, and a plain GET without an upgrade gets 400', async () => {
    const exec = wsExec(null, { query: '?workspace=default&tty=1' });
    const err = (await exec.opened.then(() => null, (e: unknown) => e)) as { status: number; body: string } | null;
    expect(err?.status).toBe(400);
    expect(JSON.parse(err!.body).error.message).toMatch(/unknown query parameter: tty/);
    const plain = await fetch(wsUrl(via).replace(/^ws/, 'http'), { headers: { authorization: `Bearer ${cluster.token}` } });
    expect(plain.status).toBe(400);
    expect(((await plain.json()) as { error: { message: string } }).error.message).toMatch(/Upgrade: websocket/);
  });
});

describe('the contract', () => {
  it('/openapi.json documents the route and its protocol', async () => {
    const doc = (await (await fetch(`${cluster.replicas[via]!.httpUrl}/openapi.json`)).json()) as { paths: Record<string, { get?: { operationId?: string; description?: string } }> };
    const op = doc.paths['/v1/sandboxes/{name}/exec/ws']?.get;
    expect(op?.operationId).toBe('execWebSocket');
    for (const word of ['sandgate.exec.v1', 'bearer.<token>', '"type":"start"', 'stdin_eof', 'resize', 'signal', '"type":"exit"', '4000']) expect(op?.description).toContain(word);
  });
});

describe('the start message', () => {
  it('an unknown field is refused with an error frame naming it (close 4003), nothing runs', async () => {
    const before = await metricOf(via, 'sandgate_exec_started_total');
    const res = await wsExec({ type: 'start', argv: ['true'], bogus: 1, stdin: 'x' }).outcome;
    expect(res.error).toMatchObject({ type: 'error', code: 'INVALID_ARGUMENT', grpc_code: 3 });
    expect(res.error?.message).toMatch(/unknown fields in 'start' message: bogus, stdin/);
    expect(res.closeCode).toBe(4003);
    expect(await metricOf(via, 'sandgate_exec_started_total')).toBe(before);
  });

  it('a bad value is refused by the same validation as gRPC (empty argv[0])', async () => {
    const res = await wsExec({ type: 'start', argv: [''] }).outcome;
    expect(res.error).toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(res.error?.message).toMatch(/command\[0\] must not be empty/);
    expect(res.closeCode).toBe(4003);
  });
});

describe('back-pressure', () => {
  it('a command that does not read its stdin stops the gateway reading the socket: the data waits in the client, not in a replica', async () => {
    const tok = token();
    const replicaPid = cluster.replicas[via]!.proc!.pid!;
    const rssBefore = await rssBytes(replicaPid);
    const exec = run(['sleep', `611.${tok}`]);
    await exec.opened;
    const execId = await execIdOf(tok);
    // What may leave the client: the kernel buffers of its WebSocket connection and of the peer
    // link (tcpConnectionHoldMiB each), a few MiB of 64 KiB pieces and HTTP/2 windows. It sends
    // 32 MiB past that; the replica's heap is the RSS bound below.
    const boundBytes = (2 * tcpConnectionHoldMiB() + 8) * 2 ** 20;
    const total = boundBytes + 32 * 2 ** 20;
    const frame = Buffer.alloc(256 * 1024, 7);
    for (let sent = 0; sent < total; sent += frame.length) exec.ws.send(frame, { binary: true });
    // The client's send buffer stops draining: the server stopped reading well before the total.
    let last = -1;
    const stuck = await waitFor('the client send buffer to stop draining', async () => {
      const now = exec.ws.bufferedAmount;
      await sleep(500);
      const stable = exec.ws.bufferedAmount === now && now === last;
      last = exec.ws.bufferedAmount;
      return stable ? now : undefined;
    }, 30_000, 0);
    const rssGrowth = (await rssBytes(replicaPid)) - rssBefore;
    console.log(`exec-ws stdin back-pressure: ${((total - stuck) / 2 ** 20).toFixed(1)} MiB left the client before it stalled; entry replica RSS grew ${(rssGrowth / 2 ** 20).toFixed(1)} MiB`);
    expect(total - stuck).toBeLessThan(boundBytes);
    expect(rssGrowth).toBeLessThan(64 * 1024 * 1024);
    // The client dies while the server is not reading: the server's probe (a ping each second
    // while paused) meets a reset, and the exec is cancelled like any other.
    exec.ws.terminate();
    await expectTreeGone(tok, execId, 5_000);
  });

  it('the same cancel for a gRPC ExecSandboxInteractive client whose stdin is held up (the path both share)', async () => {
    // The supervisor stops reading the exec channel while the process does not read stdin; the
    // cancel must not wait behind that data (the gateway resets the channel's stream).
    const client = openShellClient(cluster.replicas[via]!.grpcAddress);
    try {
      const tok = token();
      const call = client.ExecSandboxInteractive();
      call.on('data', () => undefined);
      call.on('error', () => undefined);
      call.write({ start: { sandbox_id: sbx.id, command: ['sleep', `612.${tok}`], environment: {} } });
      const execId = await execIdOf(tok);
      // Messages as large as gRPC takes (4 MiB with its framing): the buffers on the way count
      // messages, so until stdin was cut into 64 KiB pieces at the entry and its call read one
      // message ahead, 16 queued messages per hop let all of it into the replicas (a probe on
      // 2026-12-04: 196 MiB direct, 344 MiB relayed before the client stalled). Now the rest waits
      // in the client's own write buffer. What may leave it is relayedCallHoldMiB; the client
      // sends 8 messages past that.
      const boundMiB = relayedCallHoldMiB();
      const frame = Buffer.alloc(4 * 1024 * 1024 - 1024, 7);
      const FRAMES = Math.ceil(boundMiB / 4) + 8;
      for (let i = 0; i < FRAMES; i++) call.write({ stdin: frame });
      const last = await waitForStalledWrites(call as unknown as { writableLength: number }).catch((err: unknown) => {
        throw new Error(`${String(err)}\n${cluster.logs()}`);
      });
      const leftMiB = ((FRAMES - last) * frame.length) / 2 ** 20;
      console.log(`exec-interactive stdin back-pressure: ${FRAMES - last} of ${FRAMES} 4 MiB messages (${leftMiB.toFixed(1)} MiB) left the client before it stalled (bound ${boundMiB.toFixed(1)} MiB)`);
      expect(leftMiB, 'stdin held between the client and a process that does not read it').toBeLessThan(boundMiB);
      call.cancel();
      await expectTreeGone(tok, execId, 5_000);
    } finally {
      client.close();
    }
  });

  it('a client that stops reading stops the command (its output counter stalls); the gateway stays bounded; reading again resumes it', async () => {
    const tok = token();
    const counter = `/tmp/ws-bp.${tok}`;
    const CHUNK = 65536;
    const readCounter = async () => {
      const res = await run(['sh', '-c', `cat ${counter} 2>/dev/null || echo 0`]).outcome;
      if (res.exit?.exit_code !== 0) throw new Error(`reading the counter failed: ${JSON.stringify(res.error ?? res.exit)}`);
      return Number(res.stdout.toString().trim() || '0');
    };
    const replicaPid = cluster.replicas[via]!.proc!.pid!;
    const rssBefore = await rssBytes(replicaPid);
    const exec = run(['sh', '-c', `sleep 610.${tok} & n=0; while :; do head -c ${CHUNK} /dev/zero; n=$((n+1)); echo $n > ${counter}; done`]);
    await exec.opened;
    const execId = await execIdOf(tok);
    // Stop reading: the client's socket is paused, its receive buffer fills, then every hop's.
    exec.ws.pause();
    const pausedAt = Date.now();
    let last = -1;
    const stalledAt = await waitFor('the output counter to stop advancing', async () => {
      const a = await readCounter();
      await sleep(1_000);
      const b = await readCounter();
      const stable = a === b && a === last;
      last = b;
      return stable && a > 0 ? a : undefined;
    }, 40_000, 0);
    // What is in flight is bounded by the hops' buffers (socket buffers, the 1 MiB high-water
    // mark, flow-control windows, a pipe): far below what an unbounded relay would hold by now.
    const rssGrowth = (await rssBytes(replicaPid)) - rssBefore;
    console.log(`exec-ws back-pressure: stalled after ${((stalledAt * CHUNK) / 2 ** 20).toFixed(1)} MiB of output; entry replica RSS grew ${(rssGrowth / 2 ** 20).toFixed(1)} MiB`);
    expect(stalledAt * CHUNK).toBeLessThan(64 * 1024 * 1024);
    expect(rssGrowth).toBeLessThan(64 * 1024 * 1024);
    // Held back well past the peer link's silence limit: the entry replica, not reading the link,
    // does not hear the owner's pings then, and must not take that for a frozen owner.
    await sleep(Math.max(0, pausedAt + 2 * LINK_SILENCE_LIMIT_MS - Date.now()));
    // Reading again: the command runs on.
    exec.ws.resume();
    let now = stalledAt;
    await waitFor('the counter to advance after resuming', async () => (now = await readCounter()) > stalledAt + 10, 20_000, 200).catch((err: unknown) => {
      throw new Error(`${String(err)}: counter ${now} (stalled at ${stalledAt}); the client received ${exec.stdoutSoFar().length} bytes\n${cluster.logs()}`);
    });
    exec.ws.terminate();
    await expectTreeGone(tok, execId, 3_000);
  });
});

describe('coverage of the API description', () => {
  it('every operation this file owns in /openapi.json was answered with a success', async () => {
    await expectOwnedOperationsServed('exec-ws.test.ts', cluster.replicas.map((x) => x.httpUrl));
  });
});
