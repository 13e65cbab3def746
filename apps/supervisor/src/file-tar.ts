// Files and tars on a real filesystem, safely: streaming a file or a directory (as a tar) out,
// writing a file atomically, and extracting a tar so that nothing lands outside its target
// directory (absolute names, `..`, hard links and special files are refused; no entry is ever
// written through a symbolic link, even one the same tar just created). Used by the file worker
// inside the sandbox (file-worker.ts) and by `sandgate sandbox upload|download` on the client's
// machine (a tar downloaded from a sandbox is untrusted too). Exported as @sandgate/supervisor/file-tar.
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import tar from 'tar-stream';
import { Code, FileError, fsError, tarEntryPath } from './file-paths.ts';

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK, O_DIRECTORY } = fs.constants;

/** Streams exactly `size` bytes of `fd` into `out`; fewer (the file shrank) is an error. */
export async function streamFile(fd: number, size: number, out: Writable, shown: string): Promise<void> {
  if (size === 0) {
    fs.closeSync(fd);
    return;
  }
  let sent = 0;
  const source = fs.createReadStream('', { fd, start: 0, end: size - 1, highWaterMark: 256 * 1024 });
  source.on('data', (c) => (sent += c.length));
  await pipeline(source, out, { end: false });
  if (sent !== size) throw new FileError(Code.ABORTED, `${shown} shrank from ${size} to ${sent} bytes while it was read; retry`);
}

/** A directory as a tar: entries in name order, symlinks stored as symlinks (never followed). */
export async function packDirectory(dir: string, out: Writable, shown: string): Promise<void> {
  const pack = tar.pack();
  const done = pipeline(pack, out);
  const addEntry = (header: tar.Headers, body?: (entry: Writable) => Promise<void>) =>
    new Promise<void>((resolve, reject) => {
      const entry = pack.entry(header, (err) => (err ? reject(err) : resolve()));
      if (body) body(entry).catch(reject);
      else entry.end();
    });
  const walk = async (rel: string): Promise<void> => {
    const here = rel ? path.join(dir, rel) : dir;
    let names: string[];
    try {
      names = fs.readdirSync(here).sort();
    } catch (err) {
      throw fsError(err, here, shown);
    }
    for (const name of names) {
      const relName = rel ? `${rel}/${name}` : name;
      const p = path.join(dir, relName);
      let st: fs.Stats;
      try {
        st = fs.lstatSync(p);
      } catch {
        continue; // removed while we walked
      }
      const common = { mode: st.mode & 0o7777, mtime: st.mtime };
      if (st.isDirectory()) {
        await addEntry({ ...common, name: `${relName}/`, type: 'directory' });
        await walk(relName);
      } else if (st.isSymbolicLink()) {
        await addEntry({ ...common, name: relName, type: 'symlink', linkname: fs.readlinkSync(p) });
      } else if (st.isFile()) {
        let fd: number;
        try {
          fd = fs.openSync(p, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
        } catch (err) {
          throw fsError(err, p, shown);
        }
        const fst = fs.fstatSync(fd);
        if (!fst.isFile()) {
          fs.closeSync(fd);
          continue;
        }
        await addEntry({ ...common, name: relName, type: 'file', size: fst.size }, async (entry) => {
          await streamFile(fd, fst.size, entry, p);
          entry.end();
        });
      }
      // Sockets, fifos and devices have no content to carry: not part of the archive.
    }
  };
  try {
    await walk('');
    pack.finalize();
  } catch (err) {
    // The pipeline fails with it too; that rejection is this one, already thrown.
    done.catch(() => undefined);
    pack.destroy(err as Error);
    throw err;
  }
  await done;
}

/** Temporary files of this worker, removed on abort. */
const temporaries = new Set<string>();

export function removeTemporaries(): void {
  for (const t of temporaries) {
    try {
      fs.unlinkSync(t);
    } catch {
      // already gone
    }
  }
  temporaries.clear();
}

/**
 * Writes `source` to `dir/name` atomically: into a new temporary file beside it (O_EXCL,
 * O_NOFOLLOW), fsynced, then renamed over the name (rename replaces a symlink there, it never
 * writes through one). Returns the bytes written.
 */
export async function writeAtomically(dir: string, name: string, source: Readable, mode: number, shown: string): Promise<number> {
  const tmp = path.join(dir, `.${name.slice(0, 200)}.sandgate-${randomBytes(6).toString('hex')}.part`);
  let fd: number;
  try {
    fd = fs.openSync(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode);
  } catch (err) {
    throw fsError(err, path.join(dir, name), shown);
  }
  temporaries.add(tmp);
  let bytes = 0;
  try {
    const sink = fs.createWriteStream('', { fd, autoClose: false, highWaterMark: 256 * 1024 });
    source.on('data', (c: Buffer) => (bytes += c.length));
    await pipeline(source, sink);
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    fs.renameSync(tmp, path.join(dir, name));
    temporaries.delete(tmp);
  } catch (err) {
    try {
      fs.closeSync(fd);
    } catch {
      // closed already
    }
    removeTemporaries();
    throw err instanceof FileError ? err : fsError(err, path.join(dir, name), shown);
  }
  return bytes;
}

export function fsyncDirectory(dir: string): void {
  try {
    const fd = fs.openSync(dir, O_RDONLY | O_DIRECTORY);
    fs.fsyncSync(fd);
    fs.closeSync(fd);
  } catch {
    // best effort: the rename itself is what makes the file appear whole
  }
}

/**
 * Makes sure `rel`'s directories exist under `root` (a real directory), creating missing ones and
 * refusing any that is a symlink (an entry must never be written through one, even one this
 * very tar just created). Returns the real parent directory of `rel`.
 */
function parentInside(root: string, rel: string, entryName: string): string {
  const parts = rel.split('/');
  let dir = root;
  for (const part of parts.slice(0, -1)) {
    const next = path.join(dir, part);
    let st: fs.Stats | undefined;
    try {
      st = fs.lstatSync(next);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw fsError(err, next, entryName);
    }
    if (!st) {
      try {
        fs.mkdirSync(next, 0o755);
      } catch (err) {
        throw fsError(err, next, entryName);
      }
    } else if (st.isSymbolicLink()) {
      throw new FileError(
        Code.PERMISSION_DENIED,
        `tar entry ${JSON.stringify(entryName)} would be written through the symbolic link ${JSON.stringify(path.relative(root, next))}: refused`,
      );
    } else if (!st.isDirectory()) {
      throw new FileError(Code.FAILED_PRECONDITION, `tar entry ${JSON.stringify(entryName)}: ${JSON.stringify(path.relative(root, next))} is not a directory`);
    }
    dir = next;
  }
  return dir;
}

/**
 * Extracts the tar `input` into `root` (an existing real directory). Each file is written
 * atomically; `onAbort` runs when the tar fails. Resolves with the tar's size in bytes.
 */
export async function extractTar(input: Readable, root: string, onAbort: () => void = removeTemporaries): Promise<number> {
  const extract = tar.extract();
  let bytes = 0;
  input.on('data', (c: Buffer) => (bytes += c.length));
  extract.on('entry', (header, stream, next) => {
    const handle = async () => {
      const rel = tarEntryPath(header.name);
      const shown = header.name;
      const mode = (header.mode ?? 0o644) & 0o777;
      if (rel === '') {
        stream.resume();
        return;
      }
      const dir = parentInside(root, rel, shown);
      const dest = path.join(dir, path.basename(rel));
      switch (header.type) {
        case 'file':
        case 'contiguous-file':
        case undefined: {
          try {
            if (fs.lstatSync(dest).isDirectory()) throw new FileError(Code.FAILED_PRECONDITION, `tar entry ${JSON.stringify(shown)}: a directory is in the way`);
          } catch (err) {
            if (err instanceof FileError) throw err;
          }
          await writeAtomically(dir, path.basename(rel), stream, mode | 0o600, shown);
          return;
        }
        case 'directory': {
          stream.resume();
          let st: fs.Stats | undefined;
          try {
            st = fs.lstatSync(dest);
          } catch {
            // absent
          }
          if (!st) fs.mkdirSync(dest, mode | 0o700);
          else if (!st.isDirectory()) throw new FileError(Code.PERMISSION_DENIED, `tar entry ${JSON.stringify(shown)}: ${JSON.stringify(rel)} exists and is not a directory (a symbolic link?)`);
          return;
        }
        case 'symlink': {
          stream.resume();
          // The link itself is harmless (the workload can make any link); writing through it is
          // what parentInside and O_NOFOLLOW refuse.
          try {
            // Like a file entry, it replaces what is there (a file or a link; never a directory),
            // so the same tree can be uploaded again.
            const there = fs.lstatSync(dest, { throwIfNoEntry: false });
            if (there?.isDirectory()) throw new FileError(Code.FAILED_PRECONDITION, `tar entry ${JSON.stringify(shown)}: a directory is in the way`);
            if (there) fs.unlinkSync(dest);
            fs.symlinkSync(header.linkname ?? '', dest);
          } catch (err) {
            throw fsError(err, dest, shown);
          }
          return;
        }
        case 'pax-header':
        case 'pax-global-header':
        case 'gnu-long-path':
        case 'gnu-long-link-path':
          stream.resume();
          return;
        default:
          stream.resume();
          throw new FileError(
            Code.INVALID_ARGUMENT,
            `tar entry ${JSON.stringify(shown)} is a ${header.type === 'link' ? 'hard link' : header.type}: only files, directories and symbolic links can be uploaded`,
          );
      }
    };
    handle().then(
      () => next(),
      (err: unknown) => {
        stream.resume();
        next(err as Error);
      },
    );
  });
  try {
    await pipeline(input, extract);
  } catch (err) {
    onAbort();
    throw err instanceof FileError ? err : (err as NodeJS.ErrnoException).code ? fsError(err, root) : new FileError(Code.INVALID_ARGUMENT, `not a valid tar: ${(err as Error).message}`);
  }
  return bytes;
}
