// Issue 14, files: PUT/GET /v1/sandboxes/{name}/files and `sandgate sandbox upload|download`,
// through the supervisor (no SSH), on three replicas. A 100 MiB file goes in through one replica
// and out through another with every replica's memory bounded; a directory round-trips as a tar;
// and every path rule is attacked for real (traversal, absolute paths, symlinks to / and
// /proc/1/root, hostile tars, another workspace, no token, a client vanishing mid-upload), each
// time checking that nothing was read or written outside the sandbox's files.
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RedisClient } from '@sandgate/store';
import { credentials, makeGenericClientConstructor, Metadata, status as grpcStatus, type ServiceError } from '@grpc/grpc-js';
import { serviceDefinition } from '@sandgate/protocols';
import { Cluster, runCli } from '../harness/cluster.ts';
import { startRedis, type TestRedis } from '../harness/redis.ts';
import { createSandbox, ownerOf, pidsMatching, rssBytes, type CreatedSandbox } from '../harness/sandbox.ts';
import { waitFor } from '../harness/wait.ts';
import { expectOwnedOperationsServed } from '../harness/openapi-coverage.ts';

let redis: TestRedis;
let r: RedisClient;
let cluster: Cluster;
let sbx: CreatedSandbox;
let tmp: string;

const MiB = 1024 * 1024;
const N_MIB = Number(process.env.FILES_TEST_MIB ?? 100);
const gw = (i: number) => cluster.replicas[i]!.grpcAddress;
const replicaIndex = (id: string) => cluster.replicas.findIndex((x) => x.id === id);
const filesUrl = (i: number, remote: string, extra = '') =>
  `${cluster.replicas[i]!.httpUrl}/v1/sandboxes/${sbx.name}/files?path=${encodeURIComponent(remote)}${extra}`;
const auth = (token = cluster.token) => ({ authorization: `Bearer ${token}` });
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

beforeAll(async () => {
  redis = await startRedis();
  r = redis.client();
  cluster = await Cluster.start({ redisUrl: redis.url, replicas: 3 });
  sbx = await createSandbox(gw(0), 'files');
  tmp = mkdtempSync(path.join(os.tmpdir(), 'sandgate-files-'));
});

afterAll(async () => {
  if (sbx) await runCli(['sandbox', 'delete', sbx.name], { gateway: gw(0) }).catch(() => undefined);
  await cluster?.stop();
  cluster?.cleanup();
  await redis?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** Runs a shell command in the sandbox (as its workload); stdout, asserting exit 0. */
async function sh(script: string): Promise<string> {
  const res = await runCli(['sandbox', 'exec', sbx.name, '--', 'sh', '-c', script], { gateway: gw(0) });
  expect(res.code, `${script}: ${res.stderr}`).toBe(0);
  return res.stdout.toString();
}

async function ownerIndex(): Promise<number> {
  return replicaIndex(await ownerOf(r, sbx.id));
}

async function errorOf(res: Response): Promise<{ code: string; message: string }> {
  const body = (await res.json()) as { error: { code: string; message: string } };
  return body.error;
}

/** Samples every replica's RSS until stopped; returns the largest growth over its start (bytes). */
function rssWatch(): { stop(): Promise<number[]> } {
  const pids = cluster.replicas.map((x) => x.proc!.pid!);
  let running = true;
  const growth = pids.map(() => 0);
  const loop = (async () => {
    const before = await Promise.all(pids.map(rssBytes));
    while (running) {
      const now = await Promise.all(pids.map(rssBytes));
      now.forEach((v, i) => (growth[i] = Math.max(growth[i]!, v - before[i]!)));
      await new Promise((res) => setTimeout(res, 50));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return growth;
    },
  };
}

/**
 * Freezes the file worker writing `name` (SIGSTOP) for `ms`, sampling every replica's RSS, then
 * thaws it. Returns each replica's growth during the freeze and how many bytes `progress` advanced.
 */
async function freezeWorkerFor(ms: number, name: string, progress: () => number): Promise<{ growth: number[]; moved: number }> {
  const workers = (await pidsMatching('apps/supervisor/src/file-worker.ts')).filter((pid) => {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      return cmd.includes(`"path":"${name}"`);
    } catch {
      return false;
    }
  });
  expect(workers.length, 'the upload has a file worker').toBeGreaterThan(0);
  for (const pid of workers) process.kill(pid, 'SIGSTOP');
  try {
    await new Promise((res) => setTimeout(res, 300)); // what was in flight settles
    const before = progress();
    const during = rssWatch();
    await new Promise((res) => setTimeout(res, ms));
    return { growth: await during.stop(), moved: progress() - before };
  } finally {
    for (const pid of workers) process.kill(pid, 'SIGCONT');
  }
}

describe('files through any replica', () => {
  it('100 MiB in through one replica and out through another: byte-identical, every replica bounded', async () => {
    const owner = await ownerIndex();
    const upVia = (owner + 1) % 3;
    const downVia = (owner + 2) % 3;
    // Memory is judged two ways. Over the whole transfer, each replica's RSS may grow by V8's
    // garbage: every hop copies each chunk two or three times (HTTP, link and gRPC framing) and V8
    // collects dead buffers only past its 64 MiB external-memory threshold (~70-90 MiB measured,
    // flat in the file's size: 100 MiB -> ~71, 400 MiB -> ~91). The sharp test is a stall: one end
    // stops (the file worker frozen with SIGSTOP; the downloading client stops reading) for 3 s
    // while the other end keeps pushing. With back-pressure on every hop almost nothing moves, so
    // no replica grows; a hop without it would take in the rest of the file.
    const STALL_MS = 3000;
    const hash = createHash('sha256');
    const chunk = randomBytes(MiB);
    let pulled = 0;
    let stall: Promise<{ growth: number[]; moved: number }> | undefined;
    async function* body() {
      for (let i = 0; i < N_MIB; i++) {
        const c = Buffer.from(chunk); // a fresh buffer each time: the last one may still be in flight
        c[0] = i; // every MiB differs
        hash.update(c);
        pulled += c.length;
        if (i === 16) stall = freezeWorkerFor(STALL_MS, 'big.bin', () => pulled);
        yield c;
      }
    }
    const watch = rssWatch();
    const put = await fetch(filesUrl(upVia, 'big.bin'), { method: 'PUT', headers: auth(), body: Readable.from(body()) as never, duplex: 'half' } as RequestInit);
    expect(put.status, await put.clone().text()).toBe(201);
    expect(await put.json()).toEqual({ path: '/sandbox/big.bin', bytes: N_MIB * MiB, archive: false });
    const sent = hash.digest('hex');
    const upGrowth = await watch.stop();
    const upStall = await stall!;

    const watch2 = rssWatch();
    const get = await fetch(filesUrl(downVia, 'big.bin'), { headers: auth() });
    expect(get.status).toBe(200);
    expect(get.headers.get('content-type')).toBe('application/octet-stream');
    expect(get.headers.get('content-length')).toBe(String(N_MIB * MiB));
    const got = createHash('sha256');
    let n = 0;
    let downStall: number[] | undefined;
    const reader = get.body!.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      got.update(value);
      n += value.length;
      if (!downStall && n >= 16 * MiB) {
        // The client stops reading; the supervisor's worker could send the rest in well under 3 s.
        const during = rssWatch();
        await new Promise((res) => setTimeout(res, STALL_MS));
        downStall = await during.stop();
      }
    }
    const downGrowth = await watch2.stop();
    expect(n).toBe(N_MIB * MiB);
    expect(got.digest('hex')).toBe(sent);

    // The stalls: next to nothing moved, and no replica took it in.
    expect(upStall.moved, 'bytes the client could push while the worker was frozen').toBeLessThan(32 * MiB);
    upStall.growth.forEach((g, i) => expect(g, `upload stall: replica ${i} grew by ${g} bytes`).toBeLessThan(32 * MiB));
    downStall!.forEach((g, i) => expect(g, `download stall: replica ${i} grew by ${g} bytes`).toBeLessThan(32 * MiB));
    // The whole transfers, garbage included: the stalls above prove the buffering is bounded
    // (under 32 MiB while the other end is frozen); this only catches copies kept (the file and
    // its frames, 200 MiB and more). A peak of 96.03 MiB was seen on a CI run (2026-12-04) with
    // nothing retained: V8 collects late when nothing presses it, so 96 MiB was too close.
    [...upGrowth, ...downGrowth].forEach((g, i) => expect(g, `replica ${i % 3} grew by ${g} bytes`).toBeLessThan(128 * MiB));
    // Written as the workload, not as the supervisor's root.
    expect((await sh('stat -c %u /sandbox/big.bin; id -u')).trim().split('\n')).toSatisfy((l: string[]) => l[0] === l[1] && l[0] !== '0');
    await sh('rm /sandbox/big.bin');
  });

  it('a directory round-trips as a tar (upload through one replica, download through another)', async () => {
    const src = path.join(tmp, 'src');
    mkdirSync(path.join(src, 'sub/deeper'), { recursive: true });
    writeFileSync(path.join(src, 'a.txt'), 'alpha\n');
    writeFileSync(path.join(src, 'sub/deeper/b.bin'), randomBytes(300_000));
    const tarball = spawnSync('tar', ['-C', src, '-cf', '-', '.'], { maxBuffer: 10 * MiB }).stdout;
    const owner = await ownerIndex();
    const put = await fetch(filesUrl(owner, 'proj'), { method: 'PUT', headers: { ...auth(), 'content-type': 'application/x-tar' }, body: tarball });
    expect(put.status, await put.clone().text()).toBe(201);
    expect(((await put.json()) as { archive: boolean }).archive).toBe(true);
    expect(await sh('cat /sandbox/proj/a.txt')).toBe('alpha\n');

    const get = await fetch(filesUrl((owner + 1) % 3, 'proj'), { headers: auth() });
    expect(get.status).toBe(200);
    expect(get.headers.get('content-type')).toBe('application/x-tar');
    const out = path.join(tmp, 'out');
    mkdirSync(out);
    const x = spawnSync('tar', ['-C', out, '-xf', '-'], { input: Buffer.from(await get.arrayBuffer()) });
    expect(x.status, x.stderr.toString()).toBe(0);
    expect(readFileSync(path.join(out, 'a.txt'), 'utf8')).toBe('alpha\n');
    expect(sha256(readFileSync(path.join(out, 'sub/deeper/b.bin')))).toBe(sha256(readFileSync(path.join(src, 'sub/deeper/b.bin'))));
    // archive=true on a file is refused, not ignored.
    const bad = await fetch(filesUrl(owner, 'proj/a.txt', '&archive=true'), { headers: auth() });
    expect(bad.status, await bad.clone().text()).toBe(412);
  });

  it('the CLI uploads and downloads a file and a directory', async () => {
    const local = path.join(tmp, 'cli.bin');
    writeFileSync(local, randomBytes(3 * MiB + 17));
    const owner = await ownerIndex();
    const via = gw((owner + 1) % 3);
    const up = await runCli(['sandbox', 'upload', sbx.name, local, 'cli/copy.bin'], { gateway: via });
    expect(up.code, up.stderr).toBe(1); // cli/ does not exist: NOT_FOUND, said clearly
    expect(up.stderr).toMatch(/does not exist/);
    await sh('mkdir -p /sandbox/cli');
    const up2 = await runCli(['sandbox', 'upload', sbx.name, local, 'cli/copy.bin'], { gateway: via });
    expect(up2.code, up2.stderr).toBe(0);
    const back = path.join(tmp, 'cli-back.bin');
    const down = await runCli(['sandbox', 'download', sbx.name, '/sandbox/cli/copy.bin', back], { gateway: gw((owner + 2) % 3) });
    expect(down.code, down.stderr).toBe(0);
    expect(sha256(readFileSync(back))).toBe(sha256(readFileSync(local)));

    const dir = path.join(tmp, 'clidir');
    mkdirSync(path.join(dir, 'x'), { recursive: true });
    writeFileSync(path.join(dir, 'x/y.txt'), 'why\n');
    const upDir = await runCli(['sandbox', 'upload', sbx.name, dir, 'cli/dir'], { gateway: via });
    expect(upDir.code, upDir.stderr).toBe(0);
    const backDir = path.join(tmp, 'clidir-back');
    const downDir = await runCli(['sandbox', 'download', sbx.name, 'cli/dir', backDir], { gateway: via });
    expect(downDir.code, downDir.stderr).toBe(0);
    expect(readFileSync(path.join(backDir, 'x/y.txt'), 'utf8')).toBe('why\n');
  });
});

describe('attacks on the file routes', () => {
  it('refuses traversal and absolute paths outside the sandbox, reading nothing', async () => {
    for (const p of ['../../etc/passwd', '/sandbox/../etc/passwd', 'a/../../../etc/shadow']) {
      const res = await fetch(filesUrl(1, p), { headers: auth() });
      expect(res.status, p).toBe(400);
      expect((await errorOf(res)).message).toMatch(/'\.\.'/);
    }
    for (const p of ['/etc/passwd', '/run/sandgate/credential', '/proc/1/environ', '/']) {
      const res = await fetch(filesUrl(1, p), { headers: auth() });
      expect(res.status, p).toBe(403);
      expect((await errorOf(res)).message).toContain('outside');
    }
    const put = await fetch(filesUrl(2, '/dev/shm/pwned'), { method: 'PUT', headers: auth(), body: 'x' });
    expect(put.status).toBe(403);
    expect(await sh('test ! -e /dev/shm/pwned && echo absent')).toBe('absent\n');
  });

  it('refuses symlinks leading out: to /, to /proc/1/root, to a host file, at the end of the path', async () => {
    await sh('ln -sfn / /sandbox/rootlink; ln -sfn /proc/1/root /sandbox/p1; ln -sfn /etc/passwd /sandbox/pw; ln -sfn /dev/shm /sandbox/shm');
    for (const p of ['rootlink/etc/passwd', 'rootlink/run/sandgate/credential', 'p1/etc/passwd']) {
      const res = await fetch(filesUrl(1, p), { headers: auth() });
      expect(res.status, p).toBe(403);
      // /proc/1/root cannot even be resolved by the sandbox's user: refused either way.
      expect((await errorOf(res)).message, p).toMatch(/symbolic link pointing outside|permission denied/);
    }
    const final = await fetch(filesUrl(1, 'pw'), { headers: auth() });
    expect(final.status).toBe(403);
    expect((await errorOf(final)).message).toMatch(/symbolic link/);
    for (const p of ['shm/pwned', 'p1/dev/shm/pwned', 'pw']) {
      const put = await fetch(filesUrl(2, p), { method: 'PUT', headers: auth(), body: 'pwned' });
      expect(put.status, p).toBe(403);
    }
    expect(await sh('test ! -e /dev/shm/pwned && readlink /sandbox/pw')).toBe('/etc/passwd\n');
  });

  it('refuses hostile tars: a ../ entry, an absolute entry, a symlink then a write through it, a hard link', async () => {
    // Built by hand with the system tar: ../ entries need -P, the symlink case two passes.
    const work = path.join(tmp, 'evil');
    mkdirSync(path.join(work, 'in'), { recursive: true });
    writeFileSync(path.join(work, 'in/ok.txt'), 'ok');
    writeFileSync(path.join(work, 'evil.txt'), 'evil');
    const dotdot = spawnSync('tar', ['-C', path.join(work, 'in'), '-P', '-cf', '-', 'ok.txt', '../evil.txt']).stdout;
    const absolute = spawnSync('tar', ['-P', '-cf', '-', path.join(work, 'evil.txt')]).stdout;
    // esc -> /dev/shm (writable by the workload, outside the sandbox's files), then esc/pwned.
    const linkDir = path.join(work, 'l1');
    mkdirSync(linkDir);
    spawnSync('ln', ['-s', '/dev/shm', path.join(linkDir, 'esc')]);
    const fileDir = path.join(work, 'l2');
    mkdirSync(path.join(fileDir, 'esc'), { recursive: true });
    writeFileSync(path.join(fileDir, 'esc/pwned'), 'pwned');
    const symlinkThenWrite = Buffer.concat([
      spawnSync('tar', ['-C', linkDir, '-cf', '-', 'esc']).stdout.subarray(0, 512 * 2),
      spawnSync('tar', ['-C', fileDir, '-cf', '-', 'esc/pwned']).stdout,
    ]);
    const hard = (() => {
      const d = path.join(work, 'h');
      mkdirSync(d);
      writeFileSync(path.join(d, 'a'), 'a');
      spawnSync('ln', [path.join(d, 'a'), path.join(d, 'b')]);
      return spawnSync('tar', ['-C', d, '-cf', '-', 'a', 'b']).stdout;
    })();
    const cases: [string, Buffer, number, RegExp][] = [
      ['dotdot', dotdot, 400, /contains '\.\.'/],
      ['absolute', absolute, 400, /absolute path/],
      ['symlink', symlinkThenWrite, 403, /through the symbolic link "esc"/],
      ['hard', hard, 400, /hard link/],
    ];
    for (const [name, body, status, message] of cases) {
      const res = await fetch(filesUrl(0, `evil-${name}`, '&archive=true'), { method: 'PUT', headers: auth(), body });
      expect(res.status, name).toBe(status);
      expect((await errorOf(res)).message, name).toMatch(message);
    }
    expect(await sh('ls -a /sandbox/evil-dotdot; test ! -e /sandbox/evil.txt && test ! -e /dev/shm/pwned && echo clean')).toBe('.\n..\nok.txt\nclean\n');
    expect(await sh(`test ! -e ${path.join(work, 'evil.txt').replace(/^\//, '/sandbox/')} && find / -xdev -name evil.txt 2>/dev/null | wc -l`)).toBe('0\n');
  });

  it("another workspace's sandbox is NOT_FOUND and no token is UNAUTHENTICATED: nothing read or written", async () => {
    await sh('echo secret > /sandbox/secret.txt');
    const other = await cluster.tokenFor('team-b', 'member');
    for (const extra of ['', '&workspace=default']) {
      const get = await fetch(filesUrl(1, 'secret.txt', extra), { headers: auth(other) });
      expect(get.status).toBe(404);
      expect((await errorOf(get)).code).toBe('NOT_FOUND');
      const put = await fetch(filesUrl(1, 'secret.txt', extra), { method: 'PUT', headers: auth(other), body: 'overwritten' });
      expect(put.status).toBe(404);
    }
    const anonymousGet = await fetch(filesUrl(2, 'secret.txt'));
    expect(anonymousGet.status).toBe(401);
    expect((await errorOf(anonymousGet)).code).toBe('UNAUTHENTICATED');
    const anonymousPut = await fetch(filesUrl(2, 'secret.txt'), { method: 'PUT', body: 'overwritten' });
    expect(anonymousPut.status).toBe(401);
    expect(await sh('cat /sandbox/secret.txt')).toBe('secret\n');
    // The gRPC calls the CLI uses pass the same gate.
    const Sandgate = makeGenericClientConstructor(serviceDefinition('sandgate.v1.Sandgate'), 'Sandgate');
    const anonymous = new Sandgate(gw(2), credentials.createInsecure()) as unknown as {
      DownloadFile(req: object, md: Metadata): NodeJS.EventEmitter;
      UploadFile(md: Metadata, cb: (err: ServiceError | null) => void): NodeJS.EventEmitter & { write(f: object): void; end(): void };
      close(): void;
    };
    const downloadErr = await new Promise<ServiceError>((resolve) => anonymous.DownloadFile({ sandbox_id: sbx.id, path: 'secret.txt' }, new Metadata()).on('error', resolve));
    expect(downloadErr.code).toBe(grpcStatus.UNAUTHENTICATED);
    const uploadErr = await new Promise<ServiceError | null>((resolve) => {
      const call = anonymous.UploadFile(new Metadata(), resolve);
      call.write({ start: { sandbox_id: sbx.id, path: 'secret.txt' } });
      call.write({ data: Buffer.from('overwritten') });
      call.end();
    });
    expect(uploadErr?.code).toBe(grpcStatus.UNAUTHENTICATED);
    // By id, as the CLI calls it, with team-b's token: the sandbox does not exist for it.
    const asOther = new Metadata();
    asOther.set('authorization', `Bearer ${other}`);
    const otherErr = await new Promise<ServiceError>((resolve) => anonymous.DownloadFile({ sandbox_id: sbx.id, path: 'secret.txt' }, asOther).on('error', resolve));
    expect(otherErr.code).toBe(grpcStatus.NOT_FOUND);
    anonymous.close();
    expect(await sh('cat /sandbox/secret.txt')).toBe('secret\n');
    // An unknown query parameter is refused, not ignored.
    const unknown = await fetch(filesUrl(2, 'secret.txt', '&mode=0777'), { headers: auth() });
    expect(unknown.status).toBe(400);
  });

  it('a client that disconnects mid-upload leaves no file and no partial file behind', async () => {
    const owner = await ownerIndex();
    const url = new URL(filesUrl((owner + 1) % 3, 'partial.bin'));
    const req = http.request(url, { method: 'PUT', headers: { ...auth(), 'transfer-encoding': 'chunked' } });
    req.on('error', () => undefined);
    const chunk = randomBytes(MiB);
    let writing = true;
    // Keep the body coming (at the pace back-pressure allows) until the client vanishes.
    const feed = () => {
      while (writing && req.write(chunk));
      if (writing) req.once('drain', feed);
    };
    feed();
    // The upload is under way: its temporary file sits beside the target.
    const partial = await waitFor('the upload in progress', async () => (await sh('ls -a /sandbox')).split('\n').find((n) => n.startsWith('.partial.bin.sandgate-')), 20_000);
    expect(partial).toMatch(/\.part$/);
    writing = false;
    req.destroy();
    // The worker removes its temporary file once the abort reached it.
    await waitFor('no partial upload left', async () => ((await sh('ls -a /sandbox')).includes('partial.bin') ? undefined : true), 15_000);
    expect(await sh('ls -a /sandbox')).not.toMatch(/partial\.bin/);
  });

  it('a client that goes away mid-download stops the transfer: its file worker ends', async () => {
    await sh('head -c 67108864 /dev/zero > /sandbox/dl.bin');
    const owner = await ownerIndex();
    // The supervisor keeps a spare wrapper waiting (started when that exec ended); the download
    // takes it instead of forking the supervisor, so its worker started before it was asked for.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const askedAtTicks = Math.floor(Number(readFileSync('/proc/uptime', 'utf8').split(' ')[0]) * 100);
    const controller = new AbortController();
    const get = await fetch(filesUrl((owner + 1) % 3, 'dl.bin'), { headers: auth(), signal: controller.signal });
    expect(get.status).toBe(200);
    const reader = get.body!.getReader();
    await reader.read();
    const worker = async () => (await pidsMatching('apps/supervisor/src/file-worker.ts')).filter((pid) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('"path":"dl.bin"'));
    const [workerPid] = await worker();
    expect(workerPid, 'the download has a worker while it is read').toBeDefined();
    expect((await worker()).length).toBe(1);
    // Field 22 of /proc/PID/stat: its start, in clock ticks (1/100 s) since boot.
    const startedAtTicks = Number(readFileSync(`/proc/${workerPid}/stat`, 'utf8').split(') ')[1]!.split(' ')[19]);
    expect(startedAtTicks, 'the worker is a spare wrapper started before the download was asked for').toBeLessThan(askedAtTicks);
    controller.abort();
    // Back-pressure holds it blocked on a full pipe; the abort, relayed to the supervisor, ends it.
    await waitFor('the download worker gone', async () => ((await worker()).length === 0 ? true : undefined), 15_000);
    await sh('rm /sandbox/dl.bin');
  });
});

describe('coverage of the API description', () => {
  it('every operation this file owns in /openapi.json was answered with a success', async () => {
    await expectOwnedOperationsServed('files.test.ts', cluster.replicas.map((x) => x.httpUrl));
  });
});
