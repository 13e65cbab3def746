// Descriptors the supervisor inherited without close-on-exec would pass into every process it
// starts: Node opens all of its own descriptors close-on-exec, but libuv does not close the
// others when it spawns, so a pipe or socket handed down by whatever started the supervisor (a
// driver's parent, a terminal) would reach untrusted code. Closing them once at start, before the
// first workload process, leaves only stdin/stdout/stderr to inherit.
import fs from 'node:fs';

const O_CLOEXEC = 0o2000000;

/** Closes every descriptor above 2 that lacks close-on-exec; returns their numbers. */
export function closeInheritedFds(procFdinfo = '/proc/self/fdinfo'): number[] {
  const closed: number[] = [];
  let entries: string[];
  try {
    entries = fs.readdirSync(procFdinfo);
  } catch {
    return closed;
  }
  for (const entry of entries) {
    const fd = Number(entry);
    if (!Number.isInteger(fd) || fd <= 2) continue;
    let info: string;
    try {
      info = fs.readFileSync(`${procFdinfo}/${fd}`, 'utf8');
    } catch {
      continue; // closed meanwhile (the directory listing's own descriptor)
    }
    const m = /^flags:\s+([0-7]+)$/m.exec(info);
    if (!m || (parseInt(m[1]!, 8) & O_CLOEXEC) !== 0) continue;
    try {
      fs.closeSync(fd);
      closed.push(fd);
    } catch {
      // already gone
    }
  }
  return closed;
}
