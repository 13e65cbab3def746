// The path rules of file transfers (ARCHITECTURE.md "Files"), used by the file worker (which runs
// as the workload: file-worker.ts). Pure where it can be; the checks that need the filesystem take
// the `fs` calls they make as arguments so the unit tests can drive them.
//
// The rules:
//   * a path is absolute or relative to the sandbox's default working directory;
//   * no `..` segment anywhere (refused, not normalised away: a client sending one is confused or
//     attacking), no NUL, not empty;
//   * the path must lie under one of the sandbox's file roots (its working directory and /tmp), both
//     as written and once every directory on the way is resolved (a symlinked directory pointing to
//     /, /proc/1/root, /etc or the checkout is refused);
//   * the final component is opened with O_NOFOLLOW (a symlink there is refused, never followed);
//   * a tar being extracted may only create entries under its target directory: absolute names,
//     `..`, hard links, devices and fifos are refused, and no entry may be written through a
//     symlink (one the tar created a moment ago included).
import path from 'node:path';

/**
 * The gRPC status numbers file transfers answer with (fixed by gRPC itself). Spelled here rather
 * than imported from @sandgate/core, whose entry loads every .proto: the file worker is a fresh
 * process per transfer, and that import alone cost it ~0.4 s of CPU before its first byte.
 */
export const Code = {
  INVALID_ARGUMENT: 3,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  INTERNAL: 13,
} as const;
export type Code = (typeof Code)[keyof typeof Code];

// ---- the file worker's protocol with the supervisor (file-worker.ts; never imported by it at run time) ----

export const REPORT_PREFIX = 'sandgate-file ';

export interface WorkerSpec {
  op: 'read' | 'write';
  path: string;
  archive: boolean;
  /** The sandbox's default working directory: relative paths resolve against it. */
  workdir: string;
  /** Where transfers may read and write (absolute). */
  roots: string[];
}

export interface WorkerReport {
  ok: boolean;
  path?: string;
  archive?: boolean;
  size?: number;
  code?: number;
  message?: string;
}

/** A refusal or failure with the gRPC code the client should see. */
export class FileError extends Error {
  readonly code: Code;
  constructor(code: Code, message: string) {
    super(message);
    this.code = code;
  }
}

/** The longest path accepted (Linux' PATH_MAX). */
const MAX_PATH = 4096;

/**
 * The absolute path `requested` names (relative ones against `workdir`), lexically inside one of
 * `roots`; INVALID_ARGUMENT or PERMISSION_DENIED naming it otherwise. Nothing is resolved here.
 */
export function lexicalPath(requested: string, workdir: string, roots: readonly string[]): string {
  if (requested === '') throw new FileError(Code.INVALID_ARGUMENT, 'path is required');
  if (requested.includes('\0')) throw new FileError(Code.INVALID_ARGUMENT, 'path must not contain a NUL byte');
  if (requested.length > MAX_PATH) throw new FileError(Code.INVALID_ARGUMENT, `path is longer than ${MAX_PATH} bytes`);
  if (requested.split('/').includes('..')) {
    throw new FileError(Code.INVALID_ARGUMENT, `path ${JSON.stringify(requested)} contains '..': give a path inside the sandbox without '..'`);
  }
  const abs = path.resolve(workdir, requested);
  if (!roots.some((root) => within(abs, root))) {
    throw new FileError(Code.PERMISSION_DENIED, `path ${JSON.stringify(requested)} is outside the sandbox's files (allowed: ${roots.join(', ')})`);
  }
  return abs;
}

/** `p` is `root` or below it (both absolute and normalised). */
export function within(p: string, root: string): boolean {
  if (root === '/') return true;
  return p === root || p.startsWith(root.endsWith('/') ? root : `${root}/`);
}

/**
 * Checks that `dir` (an existing directory, absolute) resolves inside one of the resolved roots;
 * returns its real path. `realpath` is fs.realpathSync (injected for tests).
 */
export function realDirectoryInside(dir: string, requested: string, realRoots: readonly string[], realpath: (p: string) => string): string {
  let real: string;
  try {
    real = realpath(dir);
  } catch (err) {
    throw fsError(err, dir, requested);
  }
  if (!realRoots.some((root) => within(real, root))) {
    throw new FileError(
      Code.PERMISSION_DENIED,
      `path ${JSON.stringify(requested)} leads out of the sandbox's files: ${dir} resolves to ${real} (a symbolic link pointing outside)`,
    );
  }
  return real;
}

/**
 * The name of a tar entry as a relative path under the target directory, or INVALID_ARGUMENT:
 * absolute names and `..` segments are refused (never stripped), `./` prefixes dropped. Empty
 * (the archive's root itself) is returned as ''.
 */
export function tarEntryPath(name: string): string {
  if (name.includes('\0')) throw new FileError(Code.INVALID_ARGUMENT, 'tar entry name contains a NUL byte');
  if (name.startsWith('/')) throw new FileError(Code.INVALID_ARGUMENT, `tar entry ${JSON.stringify(name)} is an absolute path: entries must be relative to the target directory`);
  const parts = name.split('/').filter((s) => s !== '' && s !== '.');
  if (parts.includes('..')) throw new FileError(Code.INVALID_ARGUMENT, `tar entry ${JSON.stringify(name)} contains '..': entries must stay inside the target directory`);
  return parts.join('/');
}

/** The gRPC code and message for a failed filesystem call on `p`. */
export function fsError(err: unknown, p: string, requested = p): FileError {
  if (err instanceof FileError) return err;
  const e = err as NodeJS.ErrnoException;
  const what = requested === p ? JSON.stringify(p) : `${JSON.stringify(requested)} (${p})`;
  switch (e?.code) {
    case 'ENOENT':
      return new FileError(Code.NOT_FOUND, `${what} does not exist`);
    case 'ENOTDIR':
      return new FileError(Code.FAILED_PRECONDITION, `${what}: a component of the path is not a directory`);
    case 'EACCES':
    case 'EPERM':
      return new FileError(Code.PERMISSION_DENIED, `${what}: permission denied (the sandbox's user may not do this)`);
    case 'ELOOP':
      return new FileError(Code.PERMISSION_DENIED, `${what} is a symbolic link: file transfers never follow one at the end of a path`);
    case 'EISDIR':
      return new FileError(Code.FAILED_PRECONDITION, `${what} is a directory: transfer directories as a tar (archive)`);
    case 'EEXIST':
      return new FileError(Code.ALREADY_EXISTS, `${what} already exists`);
    case 'ENOSPC':
    case 'EDQUOT':
      return new FileError(Code.RESOURCE_EXHAUSTED, `${what}: no space left in the sandbox`);
    case 'EROFS':
      return new FileError(Code.PERMISSION_DENIED, `${what} is on a read-only filesystem`);
    case 'ENAMETOOLONG':
      return new FileError(Code.INVALID_ARGUMENT, `${what}: name too long`);
    default:
      return new FileError(Code.INTERNAL, `${what}: ${e?.message ?? String(err)}`);
  }
}
