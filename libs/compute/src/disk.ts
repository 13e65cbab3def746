// The local driver's disk quota. A sandbox's /sandbox is an ext4 filesystem of its own, in a
// sparse image file (<dir>/disk.img) loop-mounted at <dir>/work: filling it ends in ENOSPC inside
// the sandbox instead of filling the host's disk, which Redis, the replicas and every other
// sandbox share. The image costs only what is written; its size is the cap
// (template.resources.limits.ephemeral-storage, else DEFAULT_DISK_BYTES).
//
// Lifetime: mounted at launch, unmounted when the sandbox stops or is deleted (after its
// processes are gone); the image stays with a stopped sandbox, so start() finds its files again.
// Every step is idempotent and keyed by the directory alone, so any replica can finish what a
// crashed one began.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export const DEFAULT_DISK_BYTES = 10 * 2 ** 30;
/** ext4 needs room for its own metadata; below this a sandbox could not even write a file. */
export const MIN_DISK_BYTES = 64 * 2 ** 20;

export const DISK_IMAGE = 'disk.img';
export const WORK_DIR = 'work';

/**
 * Makes sure <dir>/work is the sandbox's own filesystem: creates the image the first time (owned
 * by uid:gid at its root) and mounts it if it is not mounted yet. A work directory from before
 * disk quotas (no image, files in it) is left as it is, unbounded, rather than hidden.
 */
export async function mountDisk(dir: string, sizeBytes: number, owner: { uid: number; gid: number }): Promise<'mounted' | 'legacy'> {
  const image = path.join(dir, DISK_IMAGE);
  const work = path.join(dir, WORK_DIR);
  if (await isMountPoint(work)) return 'mounted';
  if (!fs.existsSync(image)) {
    if (fs.existsSync(work) && (await fsp.readdir(work)).length > 0) return 'legacy';
    if (!Number.isSafeInteger(sizeBytes) || sizeBytes < MIN_DISK_BYTES) {
      throw new Error(`disk size ${sizeBytes} is below the minimum ${MIN_DISK_BYTES} bytes`);
    }
    const partial = `${image}.partial`;
    await fsp.rm(partial, { force: true });
    const fh = await fsp.open(partial, 'wx', 0o600);
    try {
      await fh.truncate(sizeBytes);
    } finally {
      await fh.close();
    }
    // No journal: /sandbox is scratch space whose owner is gone after a host crash anyway, and a
    // journal makes both mkfs and mount slower. No reserved blocks: the workload is the only user.
    // One inode per 64 KiB (a quarter of the default) and inode tables left unwritten: their
    // zeroing is the only thing that would make a sparse image cost real disk up front. No
    // resize inode: its reserved descriptor blocks are for growing a mounted filesystem, which
    // nothing here does, and writing them was most of mkfs's time (10 GiB: 17 → 7 ms on every
    // cold create) and of the image's own size (4.3 MiB → 228 KiB).
    await run('mkfs.ext4', ['-q', '-F', '-m', '0', '-i', '65536', '-O', '^has_journal,^resize_inode', '-E', `lazy_itable_init=1,root_owner=${owner.uid}:${owner.gid}`, partial]).catch(
      (err: unknown) => {
        throw new Error(`mkfs.ext4 for the sandbox's disk failed: ${stderrOf(err)}`);
      },
    );
    // Renamed only once complete: an image that exists is always a filesystem.
    await fsp.rename(partial, image);
  }
  await fsp.mkdir(work, { recursive: true, mode: 0o755 });
  // noinit_itable: the kernel would otherwise zero every inode table in the background some time
  // after the mount (≈40 MiB per 10Gi disk at one inode per 64 KiB, ≈160 MiB at the default),
  // writing zeros the sparse image already reads as to the host's disk.
  await run('mount', ['-o', 'loop,nosuid,nodev,noatime,noinit_itable', image, work]).catch((err: unknown) => {
    throw new Error(`mounting the sandbox's disk failed: ${stderrOf(err)}`);
  });
  return 'mounted';
}

/**
 * Unmounts <dir>/work if it is mounted (the loop device goes with it: mount sets autoclear).
 * The sandbox's processes must be gone; if something still holds the filesystem, it is detached
 * lazily so the directory can still be removed.
 */
export async function unmountDisk(dir: string): Promise<boolean> {
  const work = path.join(dir, WORK_DIR);
  if (!(await isMountPoint(work))) return false;
  try {
    await run('umount', [work]);
  } catch {
    // Busy, or already unmounted by a concurrent delete of the same sandbox (the API and the
    // durable delete job may race): only a mount that is still there is a failure.
    if (!(await isMountPoint(work))) return true;
    await run('umount', ['-l', work]).catch(async (err: unknown) => {
      if (await isMountPoint(work)) throw new Error(`unmounting the sandbox's disk at ${work} failed: ${stderrOf(err)}`);
    });
  }
  return true;
}

/** Whether `p` (a real path) is a mount point in this process's mount namespace. */
export async function isMountPoint(p: string): Promise<boolean> {
  const table = await fsp.readFile('/proc/self/mountinfo', 'utf8');
  for (const line of table.split('\n')) {
    const mountPoint = line.split(' ')[4];
    if (mountPoint !== undefined && unescapeMountPath(mountPoint) === p) return true;
  }
  return false;
}

/** mountinfo writes space, tab, newline and backslash as octal escapes. */
function unescapeMountPath(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_m, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

function stderrOf(err: unknown): string {
  const e = err as { stderr?: string; message?: string };
  return (e.stderr || e.message || String(err)).trim();
}
