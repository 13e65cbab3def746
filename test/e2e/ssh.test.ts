// Issue 5 acceptance: SSH into sandboxes through any replica with Debian's OpenSSH client (ssh,
// scp, sftp, ssh -L), no orphan shells when a connection drops, the openshell-main attachment,
// and the SSH session tokens (run binding, revocation, sandbox binding, connection caps).
// Every connection goes through a replica that does NOT own the sandbox's supervisor session.
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { RedisClient } from '@sandgate/store';
import { status as grpcStatus, type ClientDuplexStream, type ServiceError } from '@grpc/grpc-js';
import { Cluster, cliBin, runCli } from '../harness/cluster.ts';
import { startRedis, type TestRedis } from '../harness/redis.ts';
import { openShellClient, unaryCall, type AnyClient } from '../harness/grpc-client.ts';
import { createSandbox, ownerOf, pidsMatching, rssBytes, type CreatedSandbox } from '../harness/sandbox.ts';
import { freePort } from '../harness/ports.ts';
import { relayedCallHoldMiB, tcpBufferMaxMiB, waitFor, waitForStalledWrites } from '../harness/wait.ts';
import { cliEnv } from '../harness/credentials.ts';

let redis: TestRedis;
let r: RedisClient;
let cluster: Cluster;
let tmp: string;
/** The main test sandbox; its main process is `sleep 86399` so its pid can be found on the host. */
let sbx: CreatedSandbox;
let cfg: string;
let host: string;
const created: string[] = [];

const gw = (i: number) => cluster.replicas[i]!.grpcAddress;
const replicaIndex = (id: string) => cluster.replicas.findIndex((x) => x.id === id);

async function nonOwner(sandboxId: string): Promise<number> {
  return (replicaIndex(await ownerOf(r, sandboxId)) + 1) % cluster.replicas.length;
}

/** Writes `sandgate sandbox ssh-config NAME` (generated through a non-owner replica) to a file. */
async function sshConfigFor(sandbox: CreatedSandbox): Promise<string> {
  const res = await runCli(['sandbox', 'ssh-config', sandbox.name], { gateway: gw(await nonOwner(sandbox.id)) });
  expect(res.code, res.stderr).toBe(0);
  const file = path.join(tmp, `${sandbox.name}.ssh_config`);
  writeFileSync(file, res.stdout);
  return file;
}

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: Buffer;
  stderr: string;
}

function run(cmd: string, args: string[], opts: { input?: Buffer | string; timeoutMs?: number } = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    // ssh runs `sandgate ssh-proxy` as its ProxyCommand, which needs the cluster's token.
    const proc = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, ...cliEnv(cluster.credentials) } });
    const out: Buffer[] = [];
    let err = '';
    proc.stdout.on('data', (c: Buffer) => out.push(c));
    proc.stderr.on('data', (c: Buffer) => (err += c.toString()));
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`${cmd} ${args.join(' ')} timed out; stderr: ${err}`));
    }, opts.timeoutMs ?? 60_000);
    proc.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout: Buffer.concat(out), stderr: err });
    });
    proc.stdin.on('error', () => undefined);
    proc.stdin.end(opts.input ?? '');
  });
}

/** A long-running ssh client whose output is collected, for interactive tests. */
interface Live {
  proc: ChildProcess;
  out(): string;
  err(): string;
  exited: Promise<number | null>;
  write(text: string | Buffer): void;
}

function live(args: string[]): Live {
  const proc = spawn('ssh', args, { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, ...cliEnv(cluster.credentials) } });
  let out = '';
  let err = '';
  proc.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  proc.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  proc.stdin!.on('error', () => undefined);
  const exited = new Promise<number | null>((resolve) => proc.on('close', (code) => resolve(code)));
  return { proc, out: () => out, err: () => err, exited, write: (t) => proc.stdin!.write(t) };
}

// ---- process inspection -----------------------------------------------------------------

/** The supervisor's node process (not the bwrap processes around it). */
async function supervisorPid(sandboxId: string): Promise<number> {
  for (const pid of await pidsMatching('apps/supervisor/src/main.ts')) {
    try {
      const env = (await readFile(`/proc/${pid}/environ`)).toString().split('\0');
      const argv0 = (await readFile(`/proc/${pid}/cmdline`)).toString().split('\0')[0] ?? '';
      if (env.includes(`SANDGATE_SANDBOX_ID=${sandboxId}`) && argv0.endsWith('node')) return pid;
    } catch {
      // gone
    }
  }
  throw new Error(`no supervisor for ${sandboxId}`);
}

/** Every process in the sandbox's PID namespace, with its state letter. */
async function sandboxProcesses(supervisor: number): Promise<{ pid: number; state: string; cmd: string }[]> {
  const ns = readlinkSync(`/proc/${supervisor}/ns/pid`);
  const out: { pid: number; state: string; cmd: string }[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readlinkSync(`/proc/${entry}/ns/pid`) !== ns) continue;
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0]!;
      const cmd = readFileSync(`/proc/${entry}/cmdline`).toString().replace(/\0/g, ' ').trim();
      out.push({ pid: Number(entry), state, cmd });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** Pids whose command line is exactly `argv` (not bwrap or the supervisor carrying it as arguments). */
async function exactly(...argv: string[]): Promise<number[]> {
  const want = argv.join('\0') + '\0';
  const out: number[] = [];
  for (const pid of await pidsMatching(argv.join(' '))) {
    try {
      if (readFileSync(`/proc/${pid}/cmdline`).toString() === want) out.push(pid);
    } catch {
      // gone
    }
  }
  return out;
}

/** How many `sleep N` processes exist, for each N given. */
async function sleeping(...ns: number[]): Promise<number> {
  let n = 0;
  for (const x of ns) n += (await exactly('sleep', String(x))).length;
  return n;
}

// ---- setup --------------------------------------------------------------------------------

beforeAll(async () => {
  tmp = mkdtempSync(path.join(os.tmpdir(), 'sg-ssh-'));
  redis = await startRedis();
  r = redis.client();
  cluster = await Cluster.start({ redisUrl: redis.url, replicas: 3 });
  sbx = await createSandbox(gw(0), 'sshbox', ['sleep', '86399']);
  created.push(sbx.name);
  cfg = await sshConfigFor(sbx);
  host = `sandgate-${sbx.name}`;
});

afterAll(async () => {
  // Debugging aid: SSH_TEST_LOG=<file> keeps the replicas' log tails.
  if (process.env.SSH_TEST_LOG && cluster) writeFileSync(process.env.SSH_TEST_LOG, cluster.logs());
  for (const name of created) await runCli(['sandbox', 'delete', name], { gateway: gw(0) }).catch(() => undefined);
  await cluster?.stop();
  cluster?.cleanup();
  await redis?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

// ---- OpenSSH client through a non-owner replica ------------------------------------------


describe('ssh, scp, sftp and ssh -L through a replica that does not own the sandbox', () => {
  it('the generated config is a plain Host block using ssh-proxy in name mode', () => {
    const text = readFileSync(cfg, 'utf8');
    expect(text).toContain(`Host ${host}\n`);
    expect(text).toMatch(new RegExp(`ProxyCommand \\S+ ${cliBin.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')} --gateway 127\\.0\\.0\\.1:\\d+ ssh-proxy --name ${sbx.name}\n`));
    for (const line of ['User sandbox', 'StrictHostKeyChecking no', 'UserKnownHostsFile /dev/null', 'LogLevel ERROR', 'ServerAliveInterval 15']) {
      expect(text).toContain(`  ${line}\n`);
    }
  });

  it("ssh 'echo hi' prints hi; exit codes and stderr come through", async () => {
    const hi = await run('ssh', ['-F', cfg, host, 'echo hi']);
    expect(hi.stderr).toBe('');
    expect(hi.stdout.toString()).toBe('hi\n');
    expect(hi.code).toBe(0);
    const err = await run('ssh', ['-F', cfg, host, 'echo out; echo err >&2; exit 7']);
    expect(err.stdout.toString()).toBe('out\n');
    expect(err.stderr).toBe('err\n');
    expect(err.code).toBe(7);
    // stdin reaches the command and its EOF closes it.
    const cat = await run('ssh', ['-F', cfg, host, 'tr a-z A-Z'], { input: 'piped\n' });
    expect(cat.stdout.toString()).toBe('PIPED\n');
  });

  it('scp copies a 20 MiB file in and back out byte-identical; sftp lists the directory', async () => {
    const data = randomBytes(20 * 1024 * 1024);
    const local = path.join(tmp, 'in.bin');
    const back = path.join(tmp, 'back.bin');
    writeFileSync(local, data);
    const up = await run('scp', ['-F', cfg, '-q', local, `${host}:/sandbox/big.bin`], { timeoutMs: 90_000 });
    expect(up.code, up.stderr).toBe(0);
    const down = await run('scp', ['-F', cfg, '-q', `${host}:/sandbox/big.bin`, back], { timeoutMs: 90_000 });
    expect(down.code, down.stderr).toBe(0);
    const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
    expect(sha(readFileSync(back))).toBe(sha(data));
    // The legacy scp protocol (an exec of `scp -t`) works too.
    const legacy = await run('scp', ['-O', '-F', cfg, '-q', local, `${host}:/sandbox/legacy.bin`], { timeoutMs: 90_000 });
    expect(legacy.code, legacy.stderr).toBe(0);
    const remoteSha = await run('ssh', ['-F', cfg, host, 'sha256sum /sandbox/legacy.bin']);
    expect(remoteSha.stdout.toString().split(' ')[0]).toBe(sha(data));

    const batch = path.join(tmp, 'sftp.batch');
    writeFileSync(batch, 'cd /sandbox\nls -1\n');
    const ls = await run('sftp', ['-F', cfg, '-b', batch, host]);
    expect(ls.code, ls.stderr).toBe(0);
    expect(ls.stdout.toString()).toMatch(/^big\.bin$/m);
    expect(ls.stdout.toString()).toMatch(/^legacy\.bin$/m);
  });

  it('ssh -L reaches a server listening inside the sandbox (and ForwardTcp reaches it directly)', async () => {
    const inner = await freePort();
    const client = openShellClient(gw(await nonOwner(sbx.id)));
    // The server runs as a long exec (a backgrounded one would be killed when its exec ends).
    const server = client.ExecSandbox({
      sandbox_id: sbx.id,
      command: ['python3', '-m', 'http.server', String(inner), '--bind', '127.0.0.1', '--directory', '/sandbox'],
      environment: {},
    });
    server.on('error', () => undefined);
    const local = await freePort();
    const fwd = live(['-F', cfg, '-N', '-o', 'ExitOnForwardFailure=yes', '-L', `${local}:127.0.0.1:${inner}`, host]);
    try {
      const body = await waitFor(
        'the forwarded http server',
        async () => {
          const res = await fetch(`http://127.0.0.1:${local}/`).catch(() => null);
          return res?.status === 200 ? res.text() : null;
        },
        30_000,
        250,
      );
      expect(body).toContain('big.bin');

      // ForwardTcp with a tcp target: raw bytes to the same server, through the same non-owner replica.
      const session = await unaryCall<{ token: string }>(client, 'CreateSshSession', { sandbox_id: sbx.id });
      const call: ClientDuplexStream<object, { data?: Buffer }> = client.ForwardTcp();
      let text = '';
      const ended = new Promise<void>((resolve, reject) => {
        call.on('data', (f) => (text += f.data?.toString() ?? ''));
        call.on('end', resolve);
        call.on('error', reject);
      });
      call.write({ init: { sandbox_id: sbx.id, tcp: { host: 'localhost', port: inner }, authorization_token: session.token } });
      call.write({ data: Buffer.from('GET /big.bin HTTP/1.0\r\nRange: bytes=0-3\r\n\r\n') });
      call.end();
      await ended; // the server closes first: the call ends with OK
      expect(text).toMatch(/^HTTP\/1\.0 20[06]/);
    } finally {
      fwd.proc.kill('SIGTERM');
      server.cancel();
      client.close();
    }
  });
});

// ---- no orphans ---------------------------------------------------------------------------

describe('a dropped connection cleans up like a closed channel', () => {
  /** The main process (`sleep 86399` inside this sandbox's PID namespace). */
  const mainPid = async () => {
    const pids = (await sandboxProcesses(await supervisorPid(sbx.id))).filter((p) => p.cmd === 'sleep 86399');
    expect(pids).toHaveLength(1);
    return pids[0]!.pid;
  };

  /** ssh -tt to a shell running two background sleeps and a foreground one. */
  async function shellWithSleeps(base: number): Promise<Live> {
    const s = live(['-tt', '-F', cfg, host]);
    s.write(`sleep ${base} &\nnohup sleep ${base + 1} >/dev/null 2>&1 &\nsleep ${base + 2}\n`);
    await waitFor(`sleep ${base}..${base + 2} running`, async () => (await sleeping(base, base + 1, base + 2)) === 3, 30_000);
    return s;
  }

  it('kill -9 of the ssh client: sleep 700/701/702 are gone within 5 s, the main process lives on', async () => {
    const before = await mainPid();
    const s = await shellWithSleeps(700);
    const killedAt = Date.now();
    s.proc.kill('SIGKILL');
    await waitFor('the shell and its sleeps gone', async () => (await sleeping(700, 701, 702)) === 0, 5_000, 50);
    expect(Date.now() - killedAt).toBeLessThan(5_000);
    expect(await mainPid()).toBe(before);
    // And the sandbox still serves new connections.
    expect((await run('ssh', ['-F', cfg, host, 'echo again'])).stdout.toString()).toBe('again\n');
  });

  it('a frozen client (SIGSTOP): the keepalive ends the connection and the sleeps are gone within 60 s', { timeout: 120_000 }, async () => {
    const before = await mainPid();
    const s = await shellWithSleeps(710);
    s.proc.kill('SIGSTOP');
    const frozenAt = Date.now();
    try {
      await waitFor('the frozen shell and its sleeps gone', async () => (await sleeping(710, 711, 712)) === 0, 60_000, 250);
      expect(Date.now() - frozenAt).toBeLessThan(60_000);
    } finally {
      s.proc.kill('SIGCONT');
      s.proc.kill('SIGKILL');
    }
    expect(await mainPid()).toBe(before);
  });

  it('100 connect-and-kill -9 cycles leave no processes, no zombies, bounded memory; the 101st ssh works', { timeout: 300_000 }, async () => {
    const sup = await supervisorPid(sbx.id);
    const settled = async () => (await sandboxProcesses(sup)).filter((p) => !p.cmd.includes('sleep 86399') && !p.cmd.endsWith('sandgate-launch --spare') && p.pid !== sup);
    // Baseline: the supervisor, bwrap's init, the main process and the supervisor's spare wrapper (plus nothing else).
    await waitFor('a quiet sandbox', async () => (await settled()).length <= 1, 15_000);
    const baseline = (await sandboxProcesses(sup)).length;
    const rssBefore = await rssBytes(sup);

    const cycle = async (i: number) => {
      const s = live(['-tt', '-F', cfg, host]);
      // The marker is computed by the shell, so the terminal's echo of the typed line cannot match it.
      s.write(`sleep ${7900 + (i % 10)} &\necho CYCLE-$((${i}+1000))\n`);
      await waitFor(`cycle ${i} shell`, () => s.out().includes(`CYCLE-${i + 1000}`), 60_000, 20).catch((err: unknown) => {
        s.proc.kill('SIGKILL');
        throw new Error(`${String(err)}; ssh stdout ${JSON.stringify(s.out())} stderr ${JSON.stringify(s.err())}`);
      });
      s.proc.kill('SIGKILL');
      await s.exited;
    };
    for (let batch = 0; batch < 10; batch++) {
      await Promise.all(Array.from({ length: 10 }, (_, j) => cycle(batch * 10 + j)));
    }
    await waitFor('every cycle cleaned up', async () => (await sandboxProcesses(sup)).length <= baseline, 15_000, 100);
    const procs = await sandboxProcesses(sup);
    expect(procs.filter((p) => p.state === 'Z')).toEqual([]);
    expect(await sleeping(...Array.from({ length: 10 }, (_, k) => 7900 + k))).toBe(0);
    // Nothing left on the gateway side either: no live forwards counted for the sandbox.
    await waitFor('forward slots released', async () => (await r.zcard(`sg:sshfwd:sbx:${sbx.id}`)) === 0, 15_000);
    const rssAfter = await rssBytes(sup);
    expect(rssAfter - rssBefore, `supervisor RSS ${rssBefore} -> ${rssAfter}`).toBeLessThan(48 * 1024 * 1024);

    const ok = await run('ssh', ['-F', cfg, host, 'echo cycle-101']);
    expect(ok.stdout.toString()).toBe('cycle-101\n');
    expect(ok.code).toBe(0);
  });
});

// ---- openshell-main ---------------------------------------------------------------------------

describe('openshell-main: attach to the main process over ssh', () => {
  it('replays output to a second client, detaches on Ctrl-P Ctrl-Q, and delivers the exit status', async () => {
    const script = 'echo MAIN-STARTED; while read l; do echo "got:$l"; if [ "$l" = quit ]; then exit 7; fi; done';
    const res = await runCli(['sandbox', 'create', '--name', 'sshmain', '--detach', '--tty', '-o', 'json', '--', 'sh', '-c', script], { gateway: gw(0) });
    expect(res.code, res.stderr).toBe(0);
    const main: CreatedSandbox = { id: JSON.parse(res.stdout.toString()).metadata.id, name: 'sshmain' };
    created.push(main.name);
    const mcfg = await sshConfigFor(main);
    const attach = () => live(['-tt', '-F', mcfg, '-s', 'sandgate-sshmain', 'openshell-main']);
    const mainPids = () => exactly('sh', '-c', script);
    const [pid] = await waitFor('main process', async () => ((await mainPids()).length === 1 ? mainPids() : null));

    const a = attach();
    await waitFor('A sees the replayed output', () => a.out().includes('MAIN-STARTED'), 30_000);
    a.write('hello\n');
    await waitFor('A owns stdin', () => a.out().includes('got:hello'), 15_000);

    const b = attach();
    await waitFor('B sees the replay', () => b.out().includes('MAIN-STARTED') && b.out().includes('got:hello'), 30_000);
    await waitFor('B is told it is read-only', () => b.err().includes('attached read-only'), 10_000);
    b.write('ignored\n');

    // Ctrl-P Ctrl-Q: A detaches (exit 0), the main process keeps running.
    a.write(Buffer.from([0x10, 0x11]));
    expect(await a.exited).toBe(0);
    expect(await mainPids()).toEqual([pid]);
    expect(b.out()).not.toContain('got:ignored');

    // A new client takes the free input lease and ends the main process; every attached client
    // gets its exit status as ssh's exit code.
    const c = attach();
    await waitFor('C sees the replay', () => c.out().includes('got:hello'), 30_000);
    c.write('quit\n');
    expect(await c.exited).toBe(7);
    expect(await b.exited).toBe(7);
    expect(await mainPids()).toEqual([]);
  });
});

// ---- sessions and tokens ------------------------------------------------------------------

describe('SSH session tokens', () => {
  let client: AnyClient;
  let other: CreatedSandbox;

  beforeAll(async () => {
    other = await createSandbox(gw(0), 'sshtok', ['sleep', 'infinity']);
    created.push(other.name);
    client = openShellClient(gw(await nonOwner(other.id)));
  });
  const opened: ClientDuplexStream<object, unknown>[] = [];
  afterEach(() => {
    // Every forward a test opened is closed, so no test eats into the next one's connection caps.
    for (const call of opened.splice(0)) call.cancel();
  });
  afterAll(() => client?.close());

  /** Opens ForwardTcp to the SSH target; resolves 'open' once the SSH banner arrives, or the error. */
  function forward(sandboxId: string, token: string): { call: ClientDuplexStream<object, { data?: Buffer }>; result: Promise<'open' | ServiceError> } {
    const call: ClientDuplexStream<object, { data?: Buffer }> = client.ForwardTcp();
    opened.push(call);
    const result = new Promise<'open' | ServiceError>((resolve) => {
      call.on('data', (f) => {
        if (f.data?.toString().startsWith('SSH-2.0-')) resolve('open');
      });
      call.on('error', (err: ServiceError) => resolve(err));
      call.on('end', () => resolve({ code: grpcStatus.OK, details: 'ended' } as ServiceError));
    });
    call.write({ init: { sandbox_id: sandboxId, ssh: {}, authorization_token: token, service_id: 'test' } });
    return { call, result };
  }
  const mint = (id: string) => unaryCall<Record<string, unknown> & { token: string }>(client, 'CreateSshSession', { sandbox_id: id });

  it('CreateSshSession answers per the wire contract, and refuses what it should', async () => {
    const before = Date.now();
    const res = await mint(other.id);
    const via = cluster.replicas[await nonOwner(other.id)]!;
    expect(res.sandbox_id).toBe(other.id);
    expect(res.token).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(res.gateway_host).toBe('127.0.0.1');
    expect(res.gateway_port).toBe(via.grpcPort);
    expect(res.gateway_scheme).toBe('http');
    expect(res.host_key_fingerprint ?? '').toBe('');
    expect(Number(res.expires_at_ms)).toBeGreaterThanOrEqual(before + 86_400_000);
    expect(Number(res.expires_at_ms)).toBeLessThanOrEqual(Date.now() + 86_400_000);

    const err = (p: Promise<unknown>) => p.then(() => null, (e: ServiceError) => [e.code, e.details]);
    expect(await err(mint(''))).toEqual([grpcStatus.INVALID_ARGUMENT, 'sandbox_id is required']);
    expect(await err(mint('no-such-sandbox'))).toEqual([grpcStatus.NOT_FOUND, 'sandbox not found']);
    expect(await err(unaryCall(client, 'RevokeSshSession', { token: '' }))).toEqual([grpcStatus.INVALID_ARGUMENT, 'token is required']);
    expect(await unaryCall(client, 'RevokeSshSession', { token: 'never-issued' })).toEqual({});
  });

  it('ForwardTcp validates its first frame and target', async () => {
    const expectError = async (frames: object[], code: number, details: string) => {
      const call: ClientDuplexStream<object, unknown> = client.ForwardTcp();
      const done = new Promise<ServiceError>((resolve) => call.on('error', resolve));
      call.on('data', () => undefined);
      for (const f of frames) call.write(f);
      call.end();
      const e = await done;
      expect([e.code, e.details]).toEqual([code, details]);
    };
    const { token } = await mint(other.id);
    await expectError([{ data: Buffer.from('x') }], grpcStatus.INVALID_ARGUMENT, 'first TcpForwardFrame must be init');
    await expectError([], grpcStatus.INVALID_ARGUMENT, 'empty ForwardTcp stream');
    await expectError([{ init: { sandbox_id: other.id, authorization_token: token } }], grpcStatus.INVALID_ARGUMENT, 'tcp forward target is required');
    await expectError([{ init: { sandbox_id: other.id, tcp: { host: '10.0.0.1', port: 80 }, authorization_token: token } }], grpcStatus.INVALID_ARGUMENT, 'tcp target host must be loopback');
    await expectError([{ init: { sandbox_id: other.id, tcp: { host: '127.0.0.1', port: 0 }, authorization_token: token } }], grpcStatus.INVALID_ARGUMENT, 'tcp target port must be between 1 and 65535');
    await expectError([{ init: { sandbox_id: other.id, ssh: {} } }], grpcStatus.UNAUTHENTICATED, 'authorization_token is required for ForwardTcp');
    await expectError([{ init: { sandbox_id: other.id, ssh: {}, authorization_token: 'forged' } }], grpcStatus.UNAUTHENTICATED, 'SSH session token not found');
  });

  it('a target that does not read holds the client: 4 MiB data messages stay in the client, not in the replicas', async () => {
    // A listener in the sandbox that accepts and never reads, run by an exec for the test's length.
    const port = 7300 + Math.floor(Math.random() * 500);
    const listener = client.ExecSandbox({
      sandbox_id: other.id,
      command: [process.execPath, '-e', `require('net').createServer((s) => s.pause()).listen(${port}, '127.0.0.1', () => console.log('listening'))`],
      environment: {},
    });
    const listening = new Promise<void>((resolve, reject) => {
      listener.on('data', (ev: { stdout?: { data?: Buffer } }) => {
        if (ev.stdout?.data?.toString().includes('listening')) resolve();
      });
      listener.on('error', (err: Error) => (err.message.includes('CANCELLED') ? undefined : reject(err)));
      listener.on('end', () => reject(new Error('the listener exec ended')));
    });
    try {
      await listening;
      const { token } = await mint(other.id);
      const call: ClientDuplexStream<object, { data?: Buffer }> = client.ForwardTcp();
      opened.push(call);
      call.on('data', () => undefined);
      call.on('error', () => undefined);
      call.write({ init: { sandbox_id: other.id, tcp: { host: '127.0.0.1', port }, authorization_token: token, service_id: 'test' } });
      // Until data was cut into 64 KiB pieces at the entry and the call read one message ahead,
      // the queues on the way held 16 messages each, whatever their size: every message left.
      // What may leave now before the client stalls, however the run is timed: what a relayed
      // call holds (relayedCallHoldMiB), and the target's socket, the supervisor's send buffer, up
      // to tcp_wmem's maximum.
      const boundMiB = relayedCallHoldMiB() + tcpBufferMaxMiB('tcp_wmem');
      const frame = Buffer.alloc(4 * 1024 * 1024 - 1024, 7);
      // Enough that a path without back-pressure lets through well past the bound.
      const FRAMES = Math.ceil(boundMiB / 4) + 8;
      for (let i = 0; i < FRAMES; i++) call.write({ data: frame });
      const last = await waitForStalledWrites(call as unknown as { writableLength: number });
      const leftMiB = ((FRAMES - last) * frame.length) / 2 ** 20;
      console.log(`ForwardTcp back-pressure: ${FRAMES - last} of ${FRAMES} 4 MiB messages (${leftMiB.toFixed(1)} MiB) left the client before it stalled (bound ${boundMiB.toFixed(1)} MiB)`);
      expect(leftMiB, 'data held between the client and a target that does not read').toBeLessThan(boundMiB);
    } finally {
      listener.cancel();
    }
  });

  it('a revoked token is refused; a token for sandbox A cannot reach sandbox B', async () => {
    const { token } = await mint(other.id);
    const ok = forward(other.id, token);
    expect(await ok.result).toBe('open');
    ok.call.cancel();

    const cross = await forward(sbx.id, token).result;
    expect(cross).toMatchObject({ code: grpcStatus.UNAUTHENTICATED, details: 'SSH session token is not valid for this sandbox' });

    expect(await unaryCall(client, 'RevokeSshSession', { token })).toEqual({ revoked: true });
    const revoked = await forward(other.id, token).result;
    expect(revoked).toMatchObject({ code: grpcStatus.UNAUTHENTICATED });
    expect((revoked as ServiceError).details).toMatch(/revoked/);
  });

  it('the 4th concurrent forward on one token is RESOURCE_EXHAUSTED; a slot frees when one closes', async () => {
    const { token } = await mint(other.id);
    const open = [forward(other.id, token), forward(other.id, token), forward(other.id, token)];
    for (const f of open) expect(await f.result).toBe('open');
    const fourth = await forward(other.id, token).result;
    expect(fourth).toMatchObject({ code: grpcStatus.RESOURCE_EXHAUSTED, details: 'SSH session connection limit reached (3 per token)' });
    open[0]!.call.cancel();
    await waitFor('a slot to free', async () => (await forward(other.id, token).result) === 'open', 10_000, 200);
    for (const f of open) f.call.cancel();
  });

  it('ssh-proxy in token mode works as a ProxyCommand, through every replica (owner included)', async () => {
    const { token } = await mint(other.id);
    for (let i = 0; i < cluster.replicas.length; i++) {
      const proxy = `${process.execPath} ${cliBin} --gateway ${gw(i)} ssh-proxy --sandbox-id ${other.id} --token ${token}`;
      const opts = ['-o', `ProxyCommand=${proxy}`, '-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-o', 'LogLevel=ERROR'];
      const res = await run('ssh', [...opts, 'sandbox@sandgate', `echo via-${i}`]);
      expect(res.stdout.toString(), res.stderr).toBe(`via-${i}\n`);
      expect(res.code).toBe(0);
    }
  });

  it('a token from before stop/start is refused after it; stopped sandboxes get no sessions', async () => {
    const { token } = await mint(other.id);
    expect(await forward(other.id, token).result).toBe('open');
    const stop = await runCli(['sandbox', 'stop', other.name], { gateway: gw(0) });
    expect(stop.code, stop.stderr).toBe(0);
    await expect(mint(other.id)).rejects.toMatchObject({ code: grpcStatus.FAILED_PRECONDITION, details: 'sandbox is not ready' });
    const whileStopped = await forward(other.id, token).result;
    expect(whileStopped).toMatchObject({ code: grpcStatus.FAILED_PRECONDITION, details: 'sandbox is not ready' });

    const start = await runCli(['sandbox', 'start', other.name], { gateway: gw(1) });
    expect(start.code, start.stderr).toBe(0);
    await waitFor('Ready again', async () => {
      const res = await runCli(['sandbox', 'get', other.name, '-o', 'json'], { gateway: gw(2) });
      return JSON.parse(res.stdout.toString()).status.phase === 'SANDBOX_PHASE_READY';
    }, 60_000, 250);
    client.close();
    client = openShellClient(gw(await nonOwner(other.id)));
    const stale = await forward(other.id, token).result;
    expect(stale).toMatchObject({ code: grpcStatus.UNAUTHENTICATED });
    expect((stale as ServiceError).details).toMatch(/earlier run/);
    const fresh = await mint(other.id);
    expect(await forward(other.id, fresh.token).result).toBe('open');
  });
});
