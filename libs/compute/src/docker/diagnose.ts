// Turning a dead sandbox container into one sentence a person can act on: Docker's log stream
// decoding, the ELF interpreter the supervisor's Node binary needs, and the known ways an image
// fails to run it.
import fs from 'node:fs';

/**
 * Docker's log endpoint multiplexes stdout and stderr for containers without a TTY: frames of an
 * 8-byte header (stream type, 3 zero bytes, big-endian length) and a payload. Returns the
 * payloads in order. A buffer that does not look multiplexed is returned as is (TTY containers).
 */
export function demuxDockerStream(buf: Buffer): string {
  const parts: Buffer[] = [];
  let off = 0;
  while (off + 8 <= buf.length) {
    const type = buf[off];
    if ((type !== 0 && type !== 1 && type !== 2) || buf[off + 1] !== 0 || buf[off + 2] !== 0 || buf[off + 3] !== 0) {
      return buf.toString('utf8');
    }
    const len = buf.readUInt32BE(off + 4);
    parts.push(buf.subarray(off + 8, Math.min(buf.length, off + 8 + len)));
    off += 8 + len;
  }
  if (off < buf.length && parts.length === 0) return buf.toString('utf8');
  return Buffer.concat(parts).toString('utf8');
}

/** The last `maxLines` non-empty lines of `text`, at most `maxChars` characters (the end kept). */
export function tailLines(text: string, maxLines: number, maxChars: number): string {
  const lines = text.split(/\r?\n/).filter((l) => l.trim() !== '');
  let out = lines.slice(-maxLines).join(' | ');
  if (out.length > maxChars) out = '…' + out.slice(out.length - maxChars + 1);
  return out;
}

/**
 * PT_INTERP of an ELF executable: the dynamic loader it needs (/lib64/ld-linux-x86-64.so.2 for
 * glibc on x86-64). null for a static binary or anything unreadable.
 */
export function elfInterpreter(file: string): string | null {
  let fd: number | null = null;
  try {
    fd = fs.openSync(file, 'r');
    const hdr = Buffer.alloc(64);
    fs.readSync(fd, hdr, 0, 64, 0);
    if (hdr.readUInt32BE(0) !== 0x7f454c46) return null; // \x7fELF
    const is64 = hdr[4] === 2;
    const le = hdr[5] === 1;
    const u16 = (b: Buffer, o: number) => (le ? b.readUInt16LE(o) : b.readUInt16BE(o));
    const u32 = (b: Buffer, o: number) => (le ? b.readUInt32LE(o) : b.readUInt32BE(o));
    const u64 = (b: Buffer, o: number) => Number(le ? b.readBigUInt64LE(o) : b.readBigUInt64BE(o));
    const phoff = is64 ? u64(hdr, 32) : u32(hdr, 28);
    const phentsize = u16(hdr, is64 ? 54 : 42);
    const phnum = u16(hdr, is64 ? 56 : 44);
    const ph = Buffer.alloc(phentsize);
    for (let i = 0; i < phnum; i++) {
      fs.readSync(fd, ph, 0, phentsize, phoff + i * phentsize);
      if (u32(ph, 0) !== 3) continue; // PT_INTERP
      const off = is64 ? u64(ph, 8) : u32(ph, 4);
      const size = is64 ? u64(ph, 32) : u32(ph, 16);
      if (size <= 1 || size > 4096) return null;
      const s = Buffer.alloc(size);
      fs.readSync(fd, s, 0, size, off);
      return s.toString('utf8').replace(/\0+$/, '');
    }
    return null;
  } catch {
    return null;
  } finally {
    if (fd !== null) fs.closeSync(fd);
  }
}

export interface ExitFacts {
  image: string;
  exitCode: number;
  oomKilled: boolean;
  /** Docker's own error (start failed: bad mount, runtime error), if any. */
  dockerError: string;
  /** How long the container ran, ms; null if unknown. */
  ranMs: number | null;
  /** The last lines of the container's output. */
  logTail: string;
  /** The loader the supervisor's node binary needs, and whether the image has it (null: unknown). */
  loader: string | null;
  imageHasLoader: boolean | null;
  /** The image's USER, if any. */
  imageUser: string;
}

/** Within this long after start, an exit counts as "could not start". */
export const STARTUP_WINDOW_MS = 15_000;

/** A hint for the known ways an image cannot run the supervisor, or null. */
export function explainExit(f: ExitFacts): string | null {
  const log = f.logTail;
  if (f.oomKilled) return 'the container ran out of memory (raise the sandbox memory limit)';
  const execFailed = /exec \S*node\S* failed: No such file or directory/i.test(log);
  if (f.imageHasLoader === false || (execFailed && f.imageHasLoader !== true)) {
    return (
      `the image has no glibc dynamic loader${f.loader ? ` (${f.loader})` : ''}: the supervisor's Node runtime ` +
      'needs a glibc-based image (musl/Alpine, busybox and static/distroless-static images cannot run it)'
    );
  }
  const missingLib = /error while loading shared libraries: ([^:\s]+)/.exec(log);
  if (missingLib) {
    return `the image lacks ${missingLib[1]}, which the supervisor's Node runtime needs (install libstdc++6/libgcc-s1, or use a Debian/Ubuntu-based image)`;
  }
  const oldGlibc = /version `(GLIBC[^']*)' not found/.exec(log);
  if (oldGlibc) return `the image's glibc is too old for the supervisor's Node runtime (needs ${oldGlibc[1]})`;
  if (/exec \S+ failed: Permission denied/i.test(log)) {
    return 'the supervisor runtime is not executable in this container (noexec mount or security policy)';
  }
  if (/SANDGATE_CREDENTIAL_FILE/.test(log) && /EACCES|permission denied/i.test(log)) {
    return `the image runs as user ${JSON.stringify(f.imageUser)}, which cannot read the credential file (use a numeric USER or root)`;
  }
  if (/invalid configuration/.test(log)) return 'the supervisor rejected its configuration';
  return null;
}

/** The sentence failureReason returns for an exited or failed container. */
export function describeFailure(f: ExitFacts): string {
  const early = f.ranMs === null || f.ranMs < STARTUP_WINDOW_MS;
  const head = early
    ? `supervisor could not start in image ${f.image}`
    : `supervisor exited in image ${f.image} after ${Math.round((f.ranMs ?? 0) / 1000)} s`;
  const what = f.dockerError
    ? `docker: ${f.dockerError}`
    : f.oomKilled
      ? `killed (out of memory), exit code ${f.exitCode}`
      : `exit code ${f.exitCode}`;
  const hint = explainExit(f);
  return `${head}: ${what}${hint ? `: ${hint}` : ''}${f.logTail ? `: ${f.logTail}` : ''}`;
}
