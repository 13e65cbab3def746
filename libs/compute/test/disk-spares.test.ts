// Sandbox disks kept ready (the local driver), for real: ext4 images made by mkfs.ext4,
// loop-mounted, claimed by rename by real bubblewrap launches, removed with nothing left mounted.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { waitFor } from '@sandgate/test-harness/wait';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_DISK_BYTES, isMountPoint } from '../src/disk.ts';
import { DISK_SPARE_MAX_AGE_MS, DISK_SPARES_DIR, DiskSpares } from '../src/disk-spares.ts';
import type { LaunchSpec } from '../src/driver.ts';
import { LocalDriver } from '../src/local-driver.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const fakeSupervisor = path.join(here, 'fixtures', 'fake-supervisor.mjs');
const RUN = process.pid.toString(36);
const dirs: string[] = [];
const drivers: { driver: LocalDriver; ids: string[] }[] = [];

function stateDir(): string {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sg-spares-')));
  dirs.push(dir);
  return dir;
}

function driverWith(dir: string, diskSpares: number): { driver: LocalDriver; ids: string[] } {
  const d = { driver: new LocalDriver({ stateDir: dir, supervisorEntry: fakeSupervisor, diskSpares }), ids: [] as string[] };
  drivers.push(d);
  return d;
}

/** A create of the driver's own: spares are made only once a driver is used. */
async function firstCreate(d: { driver: LocalDriver; ids: string[] }, name: string): Promise<void> {
  const id = `${name}-${RUN}`;
  d.ids.push(id);
  await d.driver.create(spec(id));
}

function spec(sandboxId: string, over: Partial<LaunchSpec> = {}): LaunchSpec {
  return {
    sandboxId,
    command: ['sleep', '100000'],
    tty: false,
    environment: {},
    image: 'ignored-by-local',
    gatewayEndpoints: '127.0.0.1:7443',
    credential: `cred-${sandboxId}-s3cr3t`,
    logLevel: 'info',
    ...over,
  };
}

/** Mount points at or below `dir`. */
function mountsUnder(dir: string): string[] {
  return fs
    .readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => (l.split(' ')[4] ?? '').replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8))))
    .filter((m) => m === dir || m.startsWith(`${dir}/`));
}

/** The spares ready in a state dir (not half-made, not half-removed). */
function sparesIn(dir: string): string[] {
  try {
    return fs.readdirSync(path.join(dir, DISK_SPARES_DIR)).filter((n) => !n.startsWith('.'));
  } catch {
    return [];
  }
}

afterAll(async () => {
  for (const { driver, ids } of drivers) {
    for (const id of ids) await driver.delete(id, null).catch(() => undefined);
    await driver.close();
  }
  for (const dir of dirs) {
    for (const m of mountsUnder(dir).sort((a, b) => b.length - a.length)) await import('node:child_process').then((cp) => cp.spawnSync('umount', ['-l', m]));
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

describe('sandbox disks kept ready (local driver)', () => {
  it('a create claims a ready spare: its disk is the spare itself, mounted; the spare is then replaced', async () => {
    const dir = stateDir();
    const d = driverWith(dir, 2);
    // None until the driver is used: a replica that never creates a local sandbox keeps no disks.
    await sleep(1500);
    expect(sparesIn(dir)).toEqual([]);
    await firstCreate(d, 'spare-first');
    const [spare] = await waitFor('two spares', () => (sparesIn(dir).length === 2 ? sparesIn(dir) : null));
    const spareImages = new Set(sparesIn(dir).map((n) => fs.statSync(path.join(dir, DISK_SPARES_DIR, n, 'disk.img')).ino));
    expect(spare).toBeDefined();
    expect(await isMountPoint(path.join(dir, DISK_SPARES_DIR, spare!, 'work'))).toBe(true);
    const id = `spare-claim-${RUN}`;
    d.ids.push(id);
    await d.driver.create(spec(id));
    const sandbox = path.join(dir, 'sandboxes', id);
    // The very image a spare held (same inode: renamed, not made again), mounted where bwrap binds it.
    expect(spareImages.has(fs.statSync(path.join(sandbox, 'disk.img')).ino)).toBe(true);
    expect(await isMountPoint(path.join(sandbox, 'work'))).toBe(true);
    expect(sparesIn(dir).length).toBe(1);
    expect(fs.statSync(path.join(sandbox, 'disk.img')).size).toBe(DEFAULT_DISK_BYTES);
    // The workload's uid owns its filesystem's root, as on a disk made at the create.
    expect(fs.statSync(path.join(sandbox, 'work')).uid).toBe(10001);
    // Replaced after the claim (DISK_REFILL_AFTER_CLAIM_MS), not during it.
    await waitFor('the spare replaced', () => sparesIn(dir).length === 2);
    // Deleting the sandbox unmounts what it claimed.
    await d.driver.delete(id, null);
    expect(mountsUnder(sandbox)).toEqual([]);
  });

  it('a create with a disk size of its own makes its own disk and leaves the spares alone', async () => {
    const dir = stateDir();
    const d = driverWith(dir, 1);
    await firstCreate(d, 'spare-sized-first');
    await waitFor('a spare', () => sparesIn(dir).length === 1);
    const before = sparesIn(dir);
    const id = `spare-sized-${RUN}`;
    d.ids.push(id);
    await d.driver.create(spec(id, { limits: { diskBytes: 128 * 2 ** 20 } }));
    expect(fs.statSync(path.join(dir, 'sandboxes', id, 'disk.img')).size).toBe(128 * 2 ** 20);
    expect(sparesIn(dir)).toEqual(before);
  });

  it('two drivers on one host never hand one spare to two sandboxes, and every create still gets a disk', async () => {
    const dir = stateDir();
    const a = driverWith(dir, 2);
    const b = driverWith(dir, 2);
    await Promise.all([firstCreate(a, 'spare-race-a'), firstCreate(b, 'spare-race-b')]);
    await waitFor('four spares', () => sparesIn(dir).length === 4);
    const ids = [0, 1, 2, 3, 4, 5].map((i) => `spare-race-${i}-${RUN}`);
    await Promise.all(ids.map((id, i) => ((i % 2 ? a : b).ids.push(id), (i % 2 ? a : b).driver.create(spec(id)))));
    const inodes = ids.map((id) => fs.statSync(path.join(dir, 'sandboxes', id, 'disk.img')).ino);
    expect(new Set(inodes).size).toBe(ids.length);
    for (const id of ids) expect(await isMountPoint(path.join(dir, 'sandboxes', id, 'work'))).toBe(true);
  });

  it('a spare left by a killed replica is removed by another driver once past its age, unmounted', async () => {
    const dir = stateDir();
    // A killed replica's spare: made by a DiskSpares that is then abandoned (never closed), and
    // dated back past the age any driver removes it at.
    const dead = new DiskSpares({ size: 1, root: async () => dir, owner: { uid: 10001, gid: 10001 } });
    dead.warm();
    const [name] = await waitFor('the dead replica’s spare', () => (sparesIn(dir).length === 1 ? sparesIn(dir) : null));
    const old = `${Date.now() - DISK_SPARE_MAX_AGE_MS - 1000}-deadbeef0000`;
    fs.renameSync(path.join(dir, DISK_SPARES_DIR, name!), path.join(dir, DISK_SPARES_DIR, old));
    // …and what a replica killed while making or removing one leaves.
    for (const half of [`.making-${old}`, `.removing-${old}`]) fs.mkdirSync(path.join(dir, DISK_SPARES_DIR, half));
    expect(mountsUnder(dir)).toEqual([path.join(dir, DISK_SPARES_DIR, old, 'work')]);
    // Another replica starts on the host: its first sweep removes all three, then it makes its own.
    const live = driverWith(dir, 1);
    await waitFor('the stale entries removed', () => !fs.readdirSync(path.join(dir, DISK_SPARES_DIR)).some((n) => n.includes(old)));
    await firstCreate(live, 'spare-live-first');
    await waitFor('its own spare', () => sparesIn(dir).length === 1);
    expect(mountsUnder(path.join(dir, DISK_SPARES_DIR))).toEqual([path.join(dir, DISK_SPARES_DIR, sparesIn(dir)[0]!, 'work')]);
    await live.driver.close();
    // close() removes a replica's own: nothing mounted, nothing left.
    expect(mountsUnder(path.join(dir, DISK_SPARES_DIR))).toEqual([]);
    expect(fs.readdirSync(path.join(dir, DISK_SPARES_DIR))).toEqual([]);
  });

  it('a driver with none keeps none', async () => {
    const dir = stateDir();
    const d = driverWith(dir, 0);
    const id = `spare-none-${RUN}`;
    d.ids.push(id);
    await d.driver.create(spec(id));
    expect(fs.existsSync(path.join(dir, DISK_SPARES_DIR))).toBe(false);
    expect(await isMountPoint(path.join(dir, 'sandboxes', id, 'work'))).toBe(true);
  });

  it('refuses a count it cannot honour', () => {
    expect(() => new LocalDriver({ stateDir: stateDir(), supervisorEntry: fakeSupervisor, diskSpares: 65 })).toThrow(/diskSpares must be an integer from 0 to 64/);
    expect(() => new LocalDriver({ stateDir: stateDir(), supervisorEntry: fakeSupervisor, diskSpares: 1.5 })).toThrow(/diskSpares must be an integer from 0 to 64/);
  });
});
