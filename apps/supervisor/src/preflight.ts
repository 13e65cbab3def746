// Checks, before spawning, that a command can actually be executed, so that failures are reported
// the way a shell reports them (`<argv0>: <reason>`, exit 127 for "not found", 126 for "found but
// cannot run"). Neither child_process (which reports a bad cwd as ENOENT of the command) nor
// node-pty (whose forked child prints "execvp(3) failed" and exits 1) gets this right on its own.
// For a confined workload the supervisor (root) checks on behalf of the workload's uid/gid: what
// root may execute or enter, the workload may not (a 0700 directory of root's).
import fs from 'node:fs';
import path from 'node:path';

export const EXIT_NOT_FOUND = 127;
export const EXIT_NOT_EXECUTABLE = 126;

const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** Whose permissions to check; absent: the supervisor's own (access(2)). */
export interface Identity {
  uid: number;
  gid: number;
}

export type Preflight = { ok: true } | { ok: false; exitCode: number; message: string };

const REASONS: Record<string, string> = {
  ENOENT: 'No such file or directory',
  EACCES: 'Permission denied',
  EPERM: 'Operation not permitted',
  ENOTDIR: 'Not a directory',
  EISDIR: 'Is a directory',
  ELOOP: 'Too many levels of symbolic links',
  ENAMETOOLONG: 'File name too long',
  ENOEXEC: 'Exec format error',
};

export function reasonOf(err: unknown): string {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return (code && REASONS[code]) || (err as Error | undefined)?.message || String(err);
}

/** The shell-style exit status for a failed spawn: 127 when nothing was found, else 126. */
export function exitCodeForSpawnError(err: unknown): number {
  return (err as NodeJS.ErrnoException | undefined)?.code === 'ENOENT' ? EXIT_NOT_FOUND : EXIT_NOT_EXECUTABLE;
}

const EACCES = () => Object.assign(new Error('permission denied'), { code: 'EACCES' });

/** The owner, group or other bits of `st` that apply to `who` (no supplementary groups: setpriv clears them). */
function permits(st: fs.Stats, who: Identity, bit: number): boolean {
  if (st.uid === who.uid) return ((st.mode >> 6) & bit) !== 0;
  if (st.gid === who.gid) return ((st.mode >> 3) & bit) !== 0;
  return (st.mode & bit) !== 0;
}

/** access(2) for another identity: search permission on every directory above `file`, then `bit` on it. */
function accessAs(file: string, who: Identity | undefined, bit: number): void {
  if (!who) {
    fs.accessSync(file, bit);
    return;
  }
  const abs = path.resolve(file);
  let dir = path.dirname(abs);
  const ancestors: string[] = [];
  for (;;) {
    ancestors.unshift(dir);
    const up = path.dirname(dir);
    if (up === dir) break;
    dir = up;
  }
  for (const d of ancestors) if (!permits(fs.statSync(d), who, fs.constants.X_OK)) throw EACCES();
  if (!permits(fs.statSync(abs), who, bit)) throw EACCES();
}

/** A PATH directory without the command (ENOENT or ENOTDIR: the lookup goes on either way). */
const NOT_HERE: NodeJS.ErrnoException = Object.freeze(Object.assign(new Error('no such file or directory'), { code: 'ENOENT' }));

/**
 * 'ok', or why `file` cannot be executed. `onPath`: one candidate of a PATH lookup, which misses
 * in most directories before it hits (`true` is in the fourth of the default PATH), so a miss is
 * answered without the exception Node builds for it: that cost more than the stat on every exec.
 */
function executableFile(file: string, who: Identity | undefined, onPath = false): 'ok' | NodeJS.ErrnoException {
  try {
    const st = fs.statSync(file, { throwIfNoEntry: !onPath });
    if (!st) return NOT_HERE;
    if (st.isDirectory()) return Object.assign(new Error('is a directory'), { code: 'EISDIR' });
    accessAs(file, who, fs.constants.X_OK);
    return 'ok';
  } catch (err) {
    return err as NodeJS.ErrnoException;
  }
}

export function preflight(argv0: string | undefined, cwd: string, env: Record<string, string>, who?: Identity): Preflight {
  const name = argv0 ?? '';
  try {
    if (!fs.statSync(cwd).isDirectory()) {
      return { ok: false, exitCode: EXIT_NOT_EXECUTABLE, message: `${name}: ${cwd}: Not a directory` };
    }
    accessAs(cwd, who, fs.constants.X_OK);
  } catch (err) {
    return { ok: false, exitCode: EXIT_NOT_EXECUTABLE, message: `${name}: ${cwd}: ${reasonOf(err)}` };
  }
  if (!name) return { ok: false, exitCode: EXIT_NOT_FOUND, message: `${name}: command not found` };

  if (name.includes('/')) {
    const result = executableFile(path.resolve(cwd, name), who);
    if (result === 'ok') return { ok: true };
    return { ok: false, exitCode: exitCodeForSpawnError(result), message: `${name}: ${reasonOf(result)}` };
  }

  // Like execvp: the first executable match on PATH wins; a match that exists but cannot be
  // executed only matters when nothing later on PATH can.
  let denied: NodeJS.ErrnoException | undefined;
  for (const dir of (env.PATH ?? DEFAULT_PATH).split(':')) {
    const result = executableFile(path.resolve(cwd, dir || '.', name), who, true);
    if (result === 'ok') return { ok: true };
    if (result.code !== 'ENOENT' && result.code !== 'ENOTDIR') denied ??= result;
  }
  if (denied) return { ok: false, exitCode: EXIT_NOT_EXECUTABLE, message: `${name}: ${reasonOf(denied)}` };
  return { ok: false, exitCode: EXIT_NOT_FOUND, message: `${name}: command not found` };
}
