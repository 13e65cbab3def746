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
// Replicas that share a state directory share its mounts, as every local sandbox already needs:
// any of them unmounts a sandbox's disk at its delete.
// The first spares are made a second after the driver's first claim (which finds none), not at
// its start: a replica that never creates a local sandbox keeps no disks.
// Nothing here is needed for a create: with no spare ready (a burst, mkfs failing) the create makes
// its disk itself.
import { randomBytes } from 'node:crypto';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { DEFAULT_DISK_BYTES, mountDisk, unmountDisk } from './disk.ts';
import { KeptReady } from './kept-ready.ts';

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

export class DiskSpares extends KeptReady<Spare> {
  private readonly opts: DiskSparesOptions;

  constructor(opts: DiskSparesOptions) {
    super({ size: opts.size, maxAgeMs: DISK_SPARE_MAX_AGE_MS, sweepEveryMs: SWEEP_EVERY_MS, refillAfterClaimMs: DISK_REFILL_AFTER_CLAIM_MS, onRefillFailed: opts.onRefillFailed });
    this.opts = opts;
  }

  /**
   * Renames a ready spare to `dir` (which must not exist, or be empty; its parent must exist):
   * true if `dir` is now a sandbox directory with its disk, false if none was ready (the caller
   * makes the directory and the disk itself).
   */
  async claim(dir: string): Promise<boolean> {
    const claimed = await this.claimWith(async (spare) => {
      try {
        await fsp.rename(spare.path, dir);
        return { taken: true };
      } catch (err) {
        // Gone: another driver's sweep removed it. Anything else (the directory exists): the
        // spare stays for the next create, and this one takes the usual path.
        return (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'gone' : 'keep';
      }
    });
    return claimed ?? false;
  }

  protected async make(): Promise<Spare> {
    const base = await this.base();
    const bornMs = Date.now();
    const name = `${bornMs}-${randomBytes(6).toString('hex')}`;
    const making = path.join(base, `${MAKING}${name}`);
    const ready = path.join(base, name);
    await fsp.mkdir(making, { mode: 0o700 });
    try {
      await mountDisk(making, DEFAULT_DISK_BYTES, this.opts.owner);
      await fsp.rename(making, ready);
    } catch (err) {
      await removeEntry(making).catch(() => undefined);
      throw err;
    }
    return { path: ready, bornMs };
  }

  /** Takes a spare out of reach of claims (a rename), then unmounts and removes it. */
  protected async remove(spare: Spare): Promise<void> {
    const removing = path.join(path.dirname(spare.path), `${REMOVING}${path.basename(spare.path)}`);
    try {
      await fsp.rename(spare.path, removing);
    } catch {
      return; // claimed or removed by someone else
    }
    await removeEntry(removing).catch(() => undefined);
  }

  /** Removes every driver's entries older than `oldestMs`: spares, half-made and half-removed ones. */
  protected async sweepShared(oldestMs: number): Promise<void> {
    const base = await this.base();
    for (const name of await fsp.readdir(base)) {
      const born = Number(name.replace(MAKING, '').replace(REMOVING, '').split('-')[0]);
      if (born >= oldestMs) continue;
      const p = path.join(base, name);
      // Half-made or half-removed entries are nobody's to claim: removed where they are.
      if (name.startsWith('.')) await removeEntry(p).catch(() => undefined);
      else await this.remove({ path: p, bornMs: born });
    }
  }

  private async base(): Promise<string> {
    const base = path.join(await this.opts.root(), DISK_SPARES_DIR);
    await fsp.mkdir(base, { recursive: true, mode: 0o700 });
    return base;
  }
}

async function removeEntry(p: string): Promise<void> {
  // Unmounted first: removing the directory would otherwise empty the filesystem file by file
  // and then fail on the mount point.
  await unmountDisk(p);
  await fsp.rm(p, { recursive: true, force: true });
}
