// The file worker: one process per file transfer, started by the supervisor (file-transfer.ts)
// exactly like an exec — through the workload launcher, so it runs as the workload's uid/gid with
// no capabilities and no_new_privs, in its cgroups, in the same mount namespace and root as every
// workload process. Whatever the filesystem lets it do is what the workload could do itself: the
// path rules (file-paths.ts) keep transfers inside the sandbox's files, and the kernel's
// permission checks do the rest (the credential file, other uids' files, read-only mounts).
//
// Why a process and not the supervisor itself: the supervisor is root with CAP_SYS_ADMIN and
// friends. Switching its credentials per transfer is not possible safely in Node (setuid is
// process-wide: every other exec, SSH connection and the control session would change identity
// mid-flight), and checking permissions by hand (access(2) as another user) would always miss a
// case (ACLs, mount options, LSMs). A race where the workload swaps a directory for a symlink
// between our check and our open can only make the worker do what the workload may do anyway.
//
//   node file-worker.ts '<json {op, path, archive, workdir, roots}>'
//
// Protocol with the supervisor, over stdio only (the launcher closes every other descriptor):
//   stderr: lines `sandgate-file {json}`: `{"ok":true,"path","archive","size"?}` once the path was
//           opened (read) or the file was committed (write); `{"ok":false,"code","message"}` on
//           failure (then exit 1). Other stderr lines are ignored.
//   read:   stdout carries the file's bytes (or the tar), then exit 0.
//   write:  stdin carries frames `u32 length (big endian) | bytes`; a frame of length 0 commits.
//           Stdin ending before that frame (the transfer was aborted, or the supervisor died) is an
//           abort: the temporary file is removed and nothing is left at the path. SIGTERM likewise.
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { Readable } from 'node:stream';
import { Code, FileError, fsError, lexicalPath, realDirectoryInside, REPORT_PREFIX, within, type WorkerReport, type WorkerSpec } from './file-paths.ts';
import { extractTar, fsyncDirectory, packDirectory, removeTemporaries, streamFile, writeAtomically } from './file-tar.ts';

const { O_RDONLY, O_NOFOLLOW, O_NONBLOCK } = fs.constants;

function report(r: WorkerReport): void {
  process.stderr.write(`${REPORT_PREFIX}${JSON.stringify(r)}\n`);
}

/** The real paths of the roots that exist (a missing /tmp is simply not a root). */
function realRoots(roots: readonly string[]): string[] {
  const out: string[] = [];
  for (const r of roots) {
    try {
      out.push(fs.realpathSync(r));
    } catch {
      // absent
    }
  }
  return out;
}

/**
 * Where `abs` really is: its parent directory resolved (and checked to be inside the roots) joined
 * with its last component, which is never resolved (it is opened with O_NOFOLLOW).
 */
function resolveTarget(abs: string, requested: string, roots: readonly string[]): string {
  const real = realRoots(roots);
  if (roots.includes(abs)) return realDirectoryInside(abs, requested, real, fs.realpathSync);
  const parent = realDirectoryInside(path.dirname(abs), requested, real, fs.realpathSync);
  return path.join(parent, path.basename(abs));
}

// ---- read ----------------------------------------------------------------------------------

async function read(spec: WorkerSpec): Promise<void> {
  const abs = lexicalPath(spec.path, spec.workdir, spec.roots);
  const target = resolveTarget(abs, spec.path, spec.roots);
  let fd: number;
  try {
    // O_NONBLOCK: opening a fifo must not hang the transfer (it is refused just below).
    fd = fs.openSync(target, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  } catch (err) {
    throw fsError(err, abs, spec.path);
  }
  const st = fs.fstatSync(fd);
  if (st.isDirectory()) {
    fs.closeSync(fd);
    report({ ok: true, path: abs, archive: true });
    await packDirectory(target, process.stdout, spec.path);
    return;
  }
  if (!st.isFile()) {
    fs.closeSync(fd);
    throw new FileError(Code.FAILED_PRECONDITION, `${JSON.stringify(spec.path)} is not a regular file or a directory`);
  }
  if (spec.archive) {
    fs.closeSync(fd);
    throw new FileError(Code.FAILED_PRECONDITION, `${JSON.stringify(spec.path)} is a file, not a directory: download it without archive`);
  }
  report({ ok: true, path: abs, archive: false, size: st.size });
  await streamFile(fd, st.size, process.stdout, spec.path);
}

// ---- write ---------------------------------------------------------------------------------

/** Stdin's frames as a stream of byte chunks; ends cleanly only at the commit frame. */
class FramedInput extends Readable {
  private pending: Buffer = Buffer.alloc(0);
  private committed = false;
  constructor(input: Readable) {
    super({ highWaterMark: 256 * 1024 });
    input.on('data', (chunk: Buffer) => {
      this.pending = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
      while (!this.committed && this.pending.length >= 4) {
        const len = this.pending.readUInt32BE(0);
        if (len === 0) {
          this.committed = true;
          this.pending = this.pending.subarray(4);
          this.push(null);
          break;
        }
        if (this.pending.length < 4 + len) break;
        const body = this.pending.subarray(4, 4 + len);
        this.pending = this.pending.subarray(4 + len);
        if (!this.push(body)) input.pause();
      }
    });
    input.on('end', () => {
      if (!this.committed) this.destroy(new FileError(Code.ABORTED, 'the transfer was aborted before it completed'));
    });
    this.resumeInput = () => input.resume();
  }
  private readonly resumeInput: () => void;
  override _read(): void {
    this.resumeInput();
  }
}

async function writeFile(spec: WorkerSpec, input: Readable): Promise<void> {
  const abs = lexicalPath(spec.path, spec.workdir, spec.roots);
  if (spec.roots.includes(abs)) throw new FileError(Code.FAILED_PRECONDITION, `${JSON.stringify(spec.path)} is a directory: upload a tar with archive`);
  const target = resolveTarget(abs, spec.path, spec.roots);
  // Refused before a byte is read, so a mistake does not cost the whole upload.
  try {
    const st = fs.lstatSync(target);
    if (st.isDirectory()) throw new FileError(Code.FAILED_PRECONDITION, `${JSON.stringify(spec.path)} is a directory: upload a tar with archive, or name a file`);
    // Never replaced (nor followed): the same answer as reading it.
    if (st.isSymbolicLink()) throw new FileError(Code.PERMISSION_DENIED, `${JSON.stringify(spec.path)} is a symbolic link: file transfers never follow or replace one at the end of a path`);
  } catch (err) {
    if (err instanceof FileError) throw err;
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw fsError(err, abs, spec.path);
  }
  const bytes = await writeAtomically(path.dirname(target), path.basename(target), input, 0o644, spec.path);
  fsyncDirectory(path.dirname(target));
  report({ ok: true, path: abs, archive: false, size: bytes });
}

async function extractArchive(spec: WorkerSpec, input: Readable): Promise<void> {
  const abs = lexicalPath(spec.path, spec.workdir, spec.roots);
  let root: string;
  if (spec.roots.includes(abs)) {
    root = resolveTarget(abs, spec.path, spec.roots);
  } else {
    const target = resolveTarget(abs, spec.path, spec.roots);
    let st: fs.Stats | undefined;
    try {
      st = fs.lstatSync(target);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw fsError(err, abs, spec.path);
    }
    if (!st) {
      try {
        fs.mkdirSync(target, 0o755);
      } catch (err) {
        throw fsError(err, abs, spec.path);
      }
    } else if (st.isSymbolicLink()) {
      throw new FileError(Code.PERMISSION_DENIED, `${JSON.stringify(spec.path)} is a symbolic link: file transfers never follow one at the end of a path`);
    } else if (!st.isDirectory()) {
      throw new FileError(Code.FAILED_PRECONDITION, `${JSON.stringify(spec.path)} is not a directory: a tar is extracted into a directory`);
    }
    root = target;
  }
  const realRootList = realRoots(spec.roots);
  if (!realRootList.some((r) => within(root, r))) throw new FileError(Code.PERMISSION_DENIED, `${JSON.stringify(spec.path)} leads out of the sandbox's files`);

  const bytes = await extractTar(input, root, () => removeTemporaries()).catch((err: unknown) => {
    throw err instanceof FileError ? err : fsError(err, abs, spec.path);
  });
  report({ ok: true, path: abs, archive: true, size: bytes });
}

async function main(): Promise<void> {
  const spec = JSON.parse(process.argv[2] ?? '{}') as WorkerSpec;
  // SIGTERM is the supervisor aborting: leave nothing behind.
  process.on('SIGTERM', () => {
    removeTemporaries();
    process.exit(143);
  });
  if (spec.op === 'read') {
    process.stdout.on('error', () => process.exit(141));
    await read(spec);
    // Exit only once every byte left for the pipe: writes to a full pipe are queued, and
    // process.exit would drop them (the download's tail).
    if (!process.stdout.writableFinished) await new Promise<void>((resolve) => process.stdout.end(resolve));
    return;
  }
  const input = new FramedInput(process.stdin);
  if (spec.archive) await extractArchive(spec, input);
  else await writeFile(spec, input);
}

// Only as a process of its own (the supervisor starts it; importing this file runs nothing).
if (process.argv[1] === fileURLToPath(import.meta.url)) main().then(
  () => process.exit(0),
  (err: unknown) => {
    removeTemporaries();
    const e = err instanceof FileError ? err : fsError(err, '');
    report({ ok: false, code: e.code, message: e.message });
    process.exit(1);
  },
);
