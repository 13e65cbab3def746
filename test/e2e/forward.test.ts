// Issue 14: `sandgate forward start NAME LOCAL_PORT[:REMOTE_PORT]`. A greeting echo server runs as
// the sandbox's main process on its loopback; the real CLI forwards a free local port to it
// through the replica that does not own the sandbox.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keysFor, type RedisClient } from '@sandgate/store';
import { Cluster, cliBin, runCli } from '../harness/cluster.ts';
import { scanAllKeys, startRedis, type TestRedis } from '../harness/redis.ts';
import { createSandbox, ownerOf, type CreatedSandbox } from '../harness/sandbox.ts';
import { cliEnv, credentialsFor } from '../harness/credentials.ts';
import { BANNER_SERVER } from '../harness/attack.ts';
import { freePort } from '../harness/ports.ts';
import { waitFor } from '../harness/wait.ts';

const BANNER = 'fwd-banner';

let redis: TestRedis;
let r: RedisClient;
let cluster: Cluster;
let sbx: CreatedSandbox;
let remotePort: number;
let via: number;

beforeAll(async () => {
  redis = await startRedis();
  r = redis.client();
  cluster = await Cluster.start({ redisUrl: redis.url, replicas: 2 });
  remotePort = await freePort();
  sbx = await createSandbox(cluster.replicas[0]!.grpcAddress, 'fwd', [process.execPath, '-e', BANNER_SERVER, '127.0.0.1', String(remotePort), BANNER]);
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

interface CliProcess {
  proc: ChildProcess;
  stdout(): string;
  stderr(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** The real CLI, through the replica that does not own the sandbox; stdin kept open when asked. */
function startCli(args: string[], stdin: 'ignore' | 'pipe' = 'ignore'): CliProcess {
  const gateway = cluster.replicas[via]!.grpcAddress;
  const proc = spawn(process.execPath, [cliBin, ...args], {
    env: { ...process.env, XDG_CONFIG_HOME: path.join(os.tmpdir(), 'sg-no-client-config'), SANDGATE_GATEWAY: gateway, ...cliEnv(credentialsFor(gateway)) },
    stdio: [stdin, 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  proc.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  proc.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => proc.on('close', (code, signal) => resolve({ code, signal })));
  return { proc, stdout: () => out, stderr: () => err, exited };
}

const startForward = (args: string[]): CliProcess => startCli(['forward', 'start', ...args]);

/** A connection to the local port: its greeting, then an echo of whatever is sent. */
async function connect(port: number): Promise<{ sock: net.Socket; received: () => Buffer; closed: Promise<void> }> {
  const sock = net.connect(port, '127.0.0.1');
  const chunks: Buffer[] = [];
  sock.on('data', (c: Buffer) => chunks.push(c));
  const closed = new Promise<void>((resolve) => sock.on('close', () => resolve()));
  sock.on('error', () => undefined);
  await new Promise<void>((resolve, reject) => {
    sock.once('connect', resolve);
    sock.once('error', reject);
  });
  return { sock, received: () => Buffer.concat(chunks), closed };
}

const sessionsOfSandbox = async () => {
  const out: { key: string; rev: string }[] = [];
  for await (const batch of scanAllKeys(r, 'sg:ssh:*')) {
    for (const key of batch) {
      const h = await r.hgetall(key);
      if (h.sbx === sbx.id) out.push({ key, rev: h.rev ?? '' });
    }
  }
  return out;
};

describe('sandgate forward start', () => {
  it('forwards concurrent connections into the sandbox; SIGINT stops listening, closes them, revokes its tokens, exits 0', async () => {
    const local = await freePort();
    const fwd = startForward([sbx.name, `${local}:${remotePort}`]);
    await waitFor('the forward to listen', () => fwd.stdout().includes(`forwarding 127.0.0.1:${local} -> sandbox ${sbx.name} port ${remotePort}`), 30_000, 50).catch((err: unknown) => {
      throw new Error(`${String(err)}; stderr: ${fwd.stderr()}`);
    });
    // The server inside may still be starting: the first greeting says it is up.
    await waitFor('the greeting through the forward', async () => {
      const c = await connect(local).catch(() => null);
      if (!c) return false;
      const ok = await waitFor('greeting', () => c.received().toString().startsWith(BANNER), 2_000, 20).then(() => true, () => false);
      c.sock.destroy();
      return ok;
    }, 30_000, 200);

    // More connections at once than one session token allows (3): all open together, each echoing its own bytes.
    const conns = await Promise.all(Array.from({ length: 8 }, () => connect(local)));
    const payloads = conns.map((_, i) => Buffer.concat([Buffer.from(`conn ${i}\n`), randomBytes(i === 0 ? 1024 * 1024 : 1000)]));
    conns.forEach((c, i) => c.sock.write(payloads[i]!));
    for (const [i, c] of conns.entries()) {
      const expected = Buffer.concat([Buffer.from(`${BANNER}\n`), payloads[i]!]);
      await waitFor(`echo on connection ${i}`, () => c.received().length >= expected.length, 20_000, 20);
      expect(c.received().equals(expected), `connection ${i}`).toBe(true);
    }
    // Several tokens were minted (8 connections, 3 per token), none revoked while in use.
    const during = await sessionsOfSandbox();
    expect(during.length).toBeGreaterThanOrEqual(3);
    expect(during.every((s) => s.rev === '0')).toBe(true);
    // The gateway relays all 8 at once.
    await waitFor('8 live forwards in the sandbox', async () => (await r.zcard(keysFor(r).forwardsBySandbox(sbx.id))) >= 8, 5_000, 50);

    // Ctrl-C with every connection still open.
    fwd.proc.kill('SIGINT');
    const res = await fwd.exited;
    expect(res.code, fwd.stderr()).toBe(0);
    expect(fwd.stderr()).toContain('stopped');
    // Its live connections were closed, the port no longer listens.
    await Promise.all(conns.map((c) => c.closed));
    await expect(connect(local)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    // Nothing left: every token it minted is revoked, and no forward slot stays taken.
    const after = await sessionsOfSandbox();
    expect(after.length).toBe(during.length);
    expect(after.every((s) => s.rev === '1')).toBe(true);
    await waitFor('no forward slots left', async () => (await r.zcard(keysFor(r).forwardsBySandbox(sbx.id))) === 0, 5_000, 50);
  });

  it('a connection whose supervisor session is lost ends with UNAVAILABLE and a reason, not as a clean close', async () => {
    // An SSH connection through the replica that does not own the sandbox (entry → owner →
    // supervisor). The owner then loses the session: its lease is taken away in Redis, as a Redis
    // failover or a newer claim would, so its next renewal is refused and it closes the session.
    // The supervisor's channel under the connection must then be reported broken: ended as if the
    // server had closed it, ssh exits 255 with no message at all (LogLevel ERROR).
    const proxy = startCli(['ssh-proxy', '--name', sbx.name], 'pipe');
    try {
      await waitFor('the SSH server greeting through the proxy', () => proxy.stdout().startsWith('SSH-2.0-'), 30_000, 20).catch((e: unknown) => {
        throw new Error(`${String(e)}; stderr: ${proxy.stderr()}`);
      });
      await r.multi().incr(keysFor(r).fence(sbx.id)).del(keysFor(r).owner(sbx.id)).exec();
      const ended = await Promise.race([proxy.exited, new Promise<'running'>((resolve) => setTimeout(() => resolve('running'), 20_000))]);
      expect(ended, `ssh-proxy stderr: ${proxy.stderr()}`).toEqual({ code: 1, signal: null });
      expect(proxy.stderr()).toMatch(/^sandgate ssh-proxy: UNAVAILABLE: .*lost its control session/m);
      // The supervisor claims its sandbox again (through either replica): the sandbox serves on.
      await waitFor('the session back', async () => (await r.hget(keysFor(r).owner(sbx.id), 'replica')) !== null, 30_000, 100);
    } finally {
      proxy.proc.kill('SIGKILL');
    }
  });

  it('refuses what it cannot do: an unknown sandbox (exit 1, NOT_FOUND), a bad port spec or bind address (exit 2)', async () => {
    const gateway = cluster.replicas[via]!.grpcAddress;
    const missing = await runCli(['forward', 'start', 'no-such-sandbox', '0:80'], { gateway });
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/not found/i);
    const badSpec = await runCli(['forward', 'start', sbx.name, '80:0'], { gateway });
    expect(badSpec.code).toBe(2);
    expect(badSpec.stderr).toMatch(/remote port must be from 1 to 65535/);
    const badBind = await runCli(['forward', 'start', sbx.name, '0:80', '--bind', 'example.com'], { gateway });
    expect(badBind.code).toBe(2);
    expect(badBind.stderr).toMatch(/--bind must be an IP address/);
  });
});
