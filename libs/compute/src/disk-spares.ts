// Sandbox disks made before the create that needs one (the local driver). A sandbox's /sandbox is
// an ext4 image of its own, loop-mounted (disk.ts): two processes, mkfs.ext4 and mount, each a
// fork of the replica, whose event loop waits for every one of them (BENCHMARKS.md, "Disks kept
// ready"). So the driver keeps a few *spares*: a directory holding a formatted image of the
// default size mounted at work/, exactly what mountDisk leaves in a sandbox's directory. A create
// claims one by renaming the spare's directory to the sandbox's (the mount moves with it), and
// mountDisk then finds its work directory already mounted. A create with a disk size of its own
// makes its disk as before.
//
// Claims and removals are renames, which the kernel makes atomic: of two replicas on one host
// that want the same spare, one gets it and the other finds it gone.
//
// Bounded lives, whatever is killed when:
// - A spare is made under `.making-<born ms>-<random>` and renamed to `<born ms>-<random>` once
//   mounted: nothing ever claims half a spare.
// - A removal first renames the spare to `.removing-…`, then unmounts it and removes it.
// - Its driver claims a spare only while younger than half of DISK_SPARE_MAX_AGE_MS and replaces it
//   after that; any driver's sweep removes every entry (spare, half-made, half-removed) older than
//   DISK_SPARE_MAX_AGE_MS. A replica killed with spares leaves them for at most that long after
//   another local replica on the host runs; `close()` removes a replica's own.
// - A replica in another mount namespace that claims a spare gets its image unmounted: mountDisk
//   mounts it, as at a restart.
// Nothing here is needed for a create: with no spare ready (a burst, mkfs failing) the create makes
// its disk itself.
import { randomBytes } from 'node:crypto';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { DEFAULT_DISK_BYTES, mountDisk, unmountDisk } from './disk.ts';

/** Below the driver's state root. */
export const DISK_SPARES_DIR = 'disk-spares';
/** Any driver removes a spare older than this; its own driver stops claiming it at half. */
export const DISK_SPARE_MAX_AGE_MS = 10 * 60_000;
const SWEEP_EVERY_MS = 60_000;
/**
 * A claimed spare is replaced this long after the claim, not at once: its two processes would
 * otherwise fork the replica while the sandbox that claimed it is starting.
 */
export const DISK_REFILL_AFTER_CLAIM_MS = 1_000;
const MAKING = '.making-';
const REMOVING = '.removing-';

interface Spare {
  path: string;
  bornMs: number;
}

export interface DiskSparesOptions {
  /** Spares kept ready (0: none, every create makes its disk). */
  size: number;
  /** The driver's state root (a real path); spares live in its DISK_SPARES_DIR. */
  root: () => Promise<string>;
  /** Owner of a spare filesystem's root (a launch sets its workload's own on it). */
  owner: { uid: number; gid: number };
  /** Told when making a spare failed: creates make their disks until the next sweep tries again. */
  onRefillFailed?: (err: unknown, retryInMs: number) => void;
}

export class DiskSpares {
  private readonly spares: Spare[] = [];
  private refilling: Promise<void> | null = null;
  private sweeper: NodeJS.Timeout | null = null;
  private refillTimer: NodeJS.Timeout | null = null;
  private failed = false;
  private closed = false;
  private readonly opts: DiskSparesOptions;

  constructor(opts: DiskSparesOptions) {
    if (!Number.isInteger(opts.size) || opts.size < 0 || opts.size > 64) throw new Error(`DiskSpares: size must be an integer from 0 to 64 (got ${opts.size})`);
    this.opts = opts;
  }

  /** Starts making spares (and sweeping stale ones) in the background, if there are to be any. */
  warm(): void {
    if (this.opts.size <= 0 || this.closed) return;
    if (!this.sweeper) {
      this.sweeper = setInterval(() => void this.sweep().then(() => this.warm()), SWEEP_EVERY_MS).unref();
      void this.sweep();
    }
    if (!this.refilling && !this.failed && this.spares.length < this.opts.size) {
      this.refilling = this.refill().finally(() => {
        this.refilling = null;
      });
    }
  }

  /**
   * Renames a ready spare to `dir` (which must not exist, or be empty; its parent must exist):
   * true if `dir` is now a sandbox directory with its disk, false if none was ready (the caller
   * makes the directory and the disk itself).
   */
  async claim(dir: string): Promise<boolean> {
    if (this.opts.size <= 0 || this.closed) return false;
    const fresh = Date.now() - DISK_SPARE_MAX_AGE_MS / 2;
    try {
      for (let spare = this.spares.pop(); spare; spare = this.spares.pop()) {
        if (spare.bornMs < fresh) {
          void this.remove(spare.path);
          continue;
        }
        try {
          await fsp.rename(spare.path, dir);
          return true;
        } catch (err) {
          // Gone: another driver's sweep removed it. Anything else (the directory exists): the
          // spare stays for the next create, and this one takes the usual path.
          if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
          this.spares.push(spare);
          return false;
        }
      }
      return false;
    } finally {
      this.warmLater();
    }
  }

  /** Spares ready now (for tests and logs). */
  get ready(): number {
    return this.spares.length;
  }

  /** Removes this driver's spares (a replica shutting down); later claims find none. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.sweeper) clearInterval(this.sweeper);
    if (this.refillTimer) clearTimeout(this.refillTimer);
    await this.refilling?.catch(() => undefined);
    await Promise.all(this.spares.splice(0).map((s) => this.remove(s.path)));
  }

  private warmLater(): void {
    if (this.refillTimer || this.closed) return;
    this.refillTimer = setTimeout(() => {
      this.refillTimer = null;
      this.warm();
    }, DISK_REFILL_AFTER_CLAIM_MS).unref();
  }

  private async base(): Promise<string> {
    const base = path.join(await this.opts.root(), DISK_SPARES_DIR);
    await fsp.mkdir(base, { recursive: true, mode: 0o700 });
    return base;
  }

  private async refill(): Promise<void> {
    try {
      const base = await this.base();
      while (!this.closed && this.spares.length < this.opts.size) {
        const bornMs = Date.now();
        const name = `${bornMs}-${randomBytes(6).toString('hex')}`;
        const making = path.join(base, `${MAKING}${name}`);
        const ready = path.join(base, name);
        await fsp.mkdir(making, { mode: 0o700 });
        try {
          await mountDisk(making, DEFAULT_DISK_BYTES, this.opts.owner);
          await fsp.rename(making, ready);
        } catch (err) {
          await removeEntry(making);
          throw err;
        }
        if (this.closed) await this.remove(ready);
        else this.spares.push({ path: ready, bornMs });
      }
    } catch (err) {
      // Creates go on making their own disks. Not retried until the next sweep.
      this.failed = true;
      if (!this.closed) this.opts.onRefillFailed?.(err, SWEEP_EVERY_MS);
    }
  }

  /** Removes every driver's entries older than DISK_SPARE_MAX_AGE_MS, and this one's past claiming. */
  private async sweep(): Promise<void> {
    this.failed = false;
    const oldest = Date.now() - DISK_SPARE_MAX_AGE_MS;
    const fresh = Date.now() - DISK_SPARE_MAX_AGE_MS / 2;
    for (let i = this.spares.length - 1; i >= 0; i--) {
      if (this.spares[i]!.bornMs < fresh) void this.remove(this.spares.splice(i, 1)[0]!.path);
    }
    let base: string;
    let names: string[];
    try {
      base = await this.base();
      names = await fsp.readdir(base);
    } catch {
      return;
    }
    for (const name of names) {
      const born = Number(name.replace(MAKING, '').replace(REMOVING, '').split('-')[0]);
      if (born >= oldest) continue;
      const p = path.join(base, name);
      // Half-made or half-removed entries are nobody's to claim: removed where they are.
      if (name.startsWith('.')) await removeEntry(p).catch(() => undefined);
      else await this.remove(p);
    }
  }

  /** Takes a spare out of reach of claims (a rename), then unmounts and removes it. */
  private async remove(spare: string): Promise<void> {
    const removing = path.join(path.dirname(spare), `${REMOVING}${path.basename(spare)}`);
    try {
      await fsp.rename(spare, removing);
    } catch {
      return; // claimed or removed by someone else
    }
    await removeEntry(removing).catch(() => undefined);
  }
}

async function removeEntry(p: string): Promise<void> {
  // Unmounted first: removing the directory would otherwise empty the filesystem file by file
  // and then fail on the mount point.
  await unmountDisk(p);
  await fsp.rm(p, { recursive: true, force: true });
}
