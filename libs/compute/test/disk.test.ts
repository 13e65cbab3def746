// The local driver's disk quota, for real: a loop-mounted ext4 image that a writer cannot grow
// past its size, which keeps its files across unmount/mount and leaves nothing mounted behind.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DISK_IMAGE, isMountPoint, mountDisk, unmountDisk } from '../src/disk.ts';

const MiB = 1024 * 1024;
const made: string[] = [];

function sandboxDir(): string {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sg-disk-')));
  // Traversable by the workload uid, as the sandbox's /sandbox is (mkdtemp makes it 0700).
  fs.chmodSync(dir, 0o755);
  made.push(dir);
  return dir;
}

afterEach(async () => {
  for (const dir of made.splice(0)) {
    await unmountDisk(dir);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

/** Runs `sh -c script` as uid/gid 10001, like a workload process. */
function asWorkload(script: string) {
  return spawnSync('setpriv', ['--reuid=10001', '--regid=10001', '--clear-groups', '--', 'sh', '-c', script], { encoding: 'utf8' });
}

describe('sandbox disk (local driver)', () => {
  it('stops a writer at its size with ENOSPC; the host file stays that small', async () => {
    const dir = sandboxDir();
    expect(await mountDisk(dir, 64 * MiB, { uid: 10001, gid: 10001 })).toBe('mounted');
    const work = path.join(dir, 'work');
    expect(await isMountPoint(work)).toBe(true);
    expect(fs.statSync(work).uid).toBe(10001);
    // Tries to write 200 MiB into a 64 MiB disk.
    const r = asWorkload(`dd if=/dev/zero of=${work}/fill bs=1M count=200 2>&1; echo rc=$?`);
    expect(r.stdout).toMatch(/No space left on device/);
    expect(r.stdout).not.toMatch(/rc=0/);
    expect(fs.statSync(path.join(work, 'fill')).size).toBeLessThanOrEqual(64 * MiB);
    // What the host's disk holds for it: allocated blocks of the sparse image.
    expect(fs.statSync(path.join(dir, DISK_IMAGE)).blocks * 512).toBeLessThanOrEqual(64 * MiB);
  });

  it('costs the host only what is written: the kernel is told not to zero the inode tables behind the mount', async () => {
    const dir = sandboxDir();
    await mountDisk(dir, 10 * 1024 * MiB, { uid: 10001, gid: 10001 });
    const work = path.join(dir, 'work');
    // Without noinit_itable the kernel's lazyinit thread writes ≈40 MiB of zeros per 10Gi disk
    // some time after the mount.
    const entry = fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n').find((l) => l.split(' ')[4] === work);
    expect(entry).toMatch(/ - ext4 \S+ \S*noinit_itable/);
    // Without a resize inode (no descriptor blocks reserved for growing it) an empty 10 GiB
    // filesystem is a few hundred KiB of metadata; with one it was 4.3 MiB.
    expect(fs.statSync(path.join(dir, DISK_IMAGE)).blocks * 512).toBeLessThan(1 * MiB);
    const features = spawnSync('dumpe2fs', ['-h', path.join(dir, DISK_IMAGE)], { encoding: 'utf8' }).stdout;
    expect(features).toMatch(/Filesystem features:/);
    expect(features).not.toMatch(/resize_inode|has_journal/);
  });

  it('keeps the files across unmount and mount (stop, then start), and mounting twice is a no-op', async () => {
    const dir = sandboxDir();
    await mountDisk(dir, 64 * MiB, { uid: 10001, gid: 10001 });
    expect(asWorkload(`echo kept > ${dir}/work/note`).status).toBe(0);
    expect(await mountDisk(dir, 64 * MiB, { uid: 10001, gid: 10001 })).toBe('mounted');
    expect(await unmountDisk(dir)).toBe(true);
    expect(fs.existsSync(path.join(dir, 'work', 'note'))).toBe(false);
    expect(await unmountDisk(dir)).toBe(false);
    await mountDisk(dir, 64 * MiB, { uid: 10001, gid: 10001 });
    expect(fs.readFileSync(path.join(dir, 'work', 'note'), 'utf8')).toBe('kept\n');
  });

  it('unmounts even while a process still has its cwd there (lazily), so the directory can go', async () => {
    const dir = sandboxDir();
    await mountDisk(dir, 64 * MiB, { uid: 10001, gid: 10001 });
    const holder = spawnSync('sh', ['-c', `cd ${dir}/work && (sleep 30 >/dev/null 2>&1 &) ; echo started`], { encoding: 'utf8' });
    expect(holder.stdout).toMatch(/started/);
    try {
      expect(await unmountDisk(dir)).toBe(true);
      expect(await isMountPoint(path.join(dir, 'work'))).toBe(false);
    } finally {
      spawnSync('pkill', ['-f', '^sleep 30$']);
    }
  });

  it('concurrent unmounts of one sandbox (the API and the delete job racing) all succeed', async () => {
    const dir = sandboxDir();
    await mountDisk(dir, 64 * MiB, { uid: 10001, gid: 10001 });
    const results = await Promise.allSettled([unmountDisk(dir), unmountDisk(dir), unmountDisk(dir), unmountDisk(dir)]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled', 'fulfilled']);
    expect(await isMountPoint(path.join(dir, 'work'))).toBe(false);
  });

  it('leaves a work directory from before disk quotas as it is (legacy), and refuses a size below 64Mi', async () => {
    const dir = sandboxDir();
    fs.mkdirSync(path.join(dir, 'work'));
    fs.writeFileSync(path.join(dir, 'work', 'old'), 'x');
    expect(await mountDisk(dir, 64 * MiB, { uid: 10001, gid: 10001 })).toBe('legacy');
    expect(fs.existsSync(path.join(dir, DISK_IMAGE))).toBe(false);
    await expect(mountDisk(sandboxDir(), 1 * MiB, { uid: 10001, gid: 10001 })).rejects.toThrow(/below the minimum/);
  });
});
