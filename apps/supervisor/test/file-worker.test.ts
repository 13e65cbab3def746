// The file worker as a real process on a real directory (unconfined here: the e2e test runs it as
// the workload): its protocol (reports, framed stdin, commit), atomic writes and aborts, and the
// path and tar rules attacked directly. test/e2e/files.test.ts does the same through replicas.
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import tar from 'tar-stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPORT_PREFIX, type WorkerReport } from '../src/file-paths.ts';

const WORKER = fileURLToPath(new URL('../src/file-worker.ts', import.meta.url));
let dir: string;
let root: string;
let outside: string;

beforeAll(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'file-worker-'));
  root = path.join(dir, 'sandbox');
  outside = path.join(dir, 'outside');
  mkdirSync(root);
  mkdirSync(outside);
  writeFileSync(path.join(outside, 'secret'), 'secret');
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function frame(data: Buffer): Buffer {
  const h = Buffer.alloc(4);
  h.writeUInt32BE(data.length, 0);
  return Buffer.concat([h, data]);
}
const COMMIT = Buffer.alloc(4);

function worker(op: 'read' | 'write', p: string, archive: boolean, stdin: Buffer = Buffer.alloc(0)): Promise<{ code: number | null; out: Buffer; report: WorkerReport | undefined }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--no-warnings', WORKER, JSON.stringify({ op, path: p, archive, workdir: root, roots: [root] })]);
    const out: Buffer[] = [];
    let err = '';
    child.stdout.on('data', (c: Buffer) => out.push(c));
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    child.stdin.on('error', () => undefined);
    child.stdin.end(stdin);
    child.on('close', (code) => {
      const line = err.split('\n').filter((l) => l.startsWith(REPORT_PREFIX)).pop();
      resolve({ code, out: Buffer.concat(out), report: line ? (JSON.parse(line.slice(REPORT_PREFIX.length)) as WorkerReport) : undefined });
    });
  });
}

async function tarOf(entries: tar.Headers[], bodies: (string | undefined)[]): Promise<Buffer> {
  const pack = tar.pack();
  const chunks: Buffer[] = [];
  pack.on('data', (c: Buffer) => chunks.push(c));
  const done = new Promise((r) => pack.on('end', r));
  entries.forEach((h, i) => pack.entry(h, bodies[i] ?? ''));
  pack.finalize();
  await done;
  return Buffer.concat(chunks);
}

describe('file worker', () => {
  it('writes atomically on commit and streams a file back whole (8 MiB through a pipe)', async () => {
    const data = randomBytes(8 * 1024 * 1024);
    const chunks = [];
    for (let i = 0; i < data.length; i += 65536) chunks.push(frame(data.subarray(i, i + 65536)));
    const w = await worker('write', 'big.bin', false, Buffer.concat([...chunks, COMMIT]));
    expect(w.report).toEqual({ ok: true, path: path.join(root, 'big.bin'), archive: false, size: data.length });
    const r = await worker('read', path.join(root, 'big.bin'), false);
    expect(r.code).toBe(0);
    expect(createHash('sha256').update(r.out).digest('hex')).toBe(createHash('sha256').update(data).digest('hex'));
  });

  it('leaves nothing behind when stdin ends without the commit frame', async () => {
    const w = await worker('write', 'aborted.bin', false, frame(randomBytes(100_000)));
    expect(w.code).toBe(1);
    expect(w.report?.code).toBe(10); // ABORTED
    expect(readdirSync(root).filter((n) => n.includes('aborted'))).toEqual([]);
  });

  it('refuses .., paths outside the roots and symlinks leading out or at the end', async () => {
    symlinkSync(outside, path.join(root, 'out'));
    symlinkSync(path.join(outside, 'secret'), path.join(root, 'secret-link'));
    for (const [p, code] of [
      ['../outside/secret', 3],
      [path.join(outside, 'secret'), 7],
      ['out/secret', 7],
      ['secret-link', 7],
    ] as const) {
      const r = await worker('read', p, false);
      expect(r.report?.code, p).toBe(code);
      expect(r.out.length, p).toBe(0);
    }
    for (const p of ['out/new', 'secret-link']) {
      const w = await worker('write', p, false, Buffer.concat([frame(Buffer.from('pwned')), COMMIT]));
      expect(w.report?.code, p).toBe(7);
    }
    expect(readdirSync(outside)).toEqual(['secret']);
    expect(readFileSync(path.join(outside, 'secret'), 'utf8')).toBe('secret');
  });

  it('extracts a tar inside its target and refuses every way out of it', async () => {
    const good = await tarOf([{ name: 'd/', type: 'directory' }, { name: 'd/f.txt' }, { name: 'l', type: 'symlink', linkname: 'd/f.txt' }], [undefined, 'hello']);
    const ok = await worker('write', 'tree', true, Buffer.concat([frame(good), COMMIT]));
    expect(ok.report?.ok).toBe(true);
    expect(readFileSync(path.join(root, 'tree/d/f.txt'), 'utf8')).toBe('hello');
    const evil: [string, tar.Headers[], (string | undefined)[], number][] = [
      ['dotdot', [{ name: '../../outside/x' }], ['x'], 3],
      ['absolute', [{ name: path.join(outside, 'x') }], ['x'], 3],
      ['symlink then write', [{ name: 'esc', type: 'symlink', linkname: outside }, { name: 'esc/x' }], [undefined, 'x'], 7],
      ['hard link', [{ name: 'h', type: 'link', linkname: path.join(outside, 'secret') }], [undefined], 3],
    ];
    for (const [name, headers, bodies, code] of evil) {
      const t = await tarOf(headers, bodies);
      const w = await worker('write', `evil-${name.replace(/ /g, '-')}`, true, Buffer.concat([frame(t), COMMIT]));
      expect(w.report?.code, name).toBe(code);
    }
    expect(readdirSync(outside)).toEqual(['secret']);
    expect(existsSync(path.join(dir, 'x'))).toBe(false);
  });
});
