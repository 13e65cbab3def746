// Network namespaces made before the create that needs one. Docker starts a container on a
// user-defined bridge ~250 ms slower than one that joins a running container's network
// namespace (`NetworkMode: container:<id>`): making the namespace, the veth pair, the address and
// the embedded DNS's iptables rules inside it is most of a container's start on this engine
// (BENCHMARKS.md, "Docker cold create"). So the driver keeps a few *holders*: tiny containers on
// the sandbox network that only hold a namespace (`sleep infinity` as an unprivileged user, no
// capabilities). A create claims one, renames it after its sandbox, and starts the sandbox's
// container in its namespace. The namespace is then the sandbox's alone, exactly as its own
// bridge endpoint would have been: one holder serves one sandbox for its whole life, and is
// removed with it. The workload still lives in a namespace of its own inside (the supervisor's
// netns agent); the holder only replaces the container's.
//
// Bounded lives, whatever is killed when:
// - A claimed holder is named `sandgate-netns-<sandbox id>`: the sandbox's delete removes it, and
//   the driver's list() reports one without its sandbox as leftover compute, which reconciliation
//   deletes.
// - A spare is named `sandgate-netns-spare-…` and carries its birth time. Its driver claims it only
//   while younger than half of SPARE_MAX_AGE_MS and replaces it after that; any driver removes a
//   spare older than SPARE_MAX_AGE_MS. A replica killed with spares leaves them for at most that
//   long after another docker-driver replica runs, and `close()` removes a replica's own.
// Nothing here is needed for a create: with no spare ready (a burst, an image without `sleep`, an
// engine error) the sandbox's container gets its own endpoint on the bridge, as before.
import { randomBytes } from 'node:crypto';
import type Dockerode from 'dockerode';
import { KeptReady } from '../kept-ready.ts';
import { LABEL_MANAGED } from './launch.ts';
import { statusOf } from './network.ts';

/** LABEL_MANAGED's value on holders (sandbox containers carry `true`, so they never mix). */
export const MANAGED_NETNS_HOLDER = 'netns-holder';
/** On a holder: when it was made, in ms since the epoch. */
export const LABEL_HOLDER_BORN = 'sandgate.netns-holder-born';
/** Any driver removes a spare older than this; its own driver stops claiming it at half. */
export const SPARE_MAX_AGE_MS = 10 * 60_000;
const SWEEP_EVERY_MS = 60_000;
/**
 * A claimed spare is replaced this long after the claim, not at once: making a holder is a
 * container start (~0.3 s of the engine's CPU), which on a small host would otherwise compete
 * with the very sandbox that claimed it, whose container and supervisor are starting then
 * (BENCHMARKS.md, "Network namespaces kept ready").
 */
export const REFILL_AFTER_CLAIM_MS = 1_000;
const SPARE_PREFIX = 'sandgate-netns-spare-';
const CLAIMED_PREFIX = 'sandgate-netns-';

/** The name of the holder a sandbox uses. */
export function holderName(sandboxId: string): string {
  return `${CLAIMED_PREFIX}${sandboxId}`;
}

/** The sandbox a holder serves, from its name (Docker lists names with a leading `/`); null for a spare. */
export function sandboxOfHolder(name: string): string | null {
  const bare = name.replace(/^\//, '');
  if (!bare.startsWith(CLAIMED_PREFIX) || bare.startsWith(SPARE_PREFIX)) return null;
  return bare.slice(CLAIMED_PREFIX.length);
}

/** The body of `POST /containers/create` for a holder: nothing but a sleeping process on the network. */
export function buildHolderCreateOptions(h: { image: string; network: string; name: string; bornMs: number }): Dockerode.ContainerCreateOptions {
  return {
    name: h.name,
    Image: h.image,
    Entrypoint: ['sleep'],
    Cmd: ['infinity'],
    User: '65534:65534',
    Labels: { [LABEL_MANAGED]: MANAGED_NETNS_HOLDER, [LABEL_HOLDER_BORN]: String(h.bornMs) },
    HostConfig: {
      NetworkMode: h.network,
      RestartPolicy: { Name: 'no' },
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges'],
      ReadonlyRootfs: true,
      PidsLimit: 4,
      Memory: 16 * 1024 * 1024,
      LogConfig: { Type: 'none', Config: {} },
    },
  };
}

interface Spare {
  id: string;
  bornMs: number;
  /** When it was running and added: a list of containers begun after this shows it running. */
  readyMs: number;
}

export interface NetnsHoldersOptions {
  /** Spares kept ready (0: none, every sandbox gets its own endpoint). */
  size: number;
  /** The image holders run (the driver's default image: it has `sleep`). */
  image: string;
  /** The sandbox network's name, once known. */
  network: () => Promise<string>;
  /**
   * Told when making spares failed (an image without `sleep`, an engine error): creates then take
   * the bridge until the next sweep tries again, so an operator should hear why.
   */
  onRefillFailed?: (err: unknown, retryInMs: number) => void;
}

export class NetnsHolders extends KeptReady<Spare> {
  private readonly docker: Dockerode;
  private readonly opts: NetnsHoldersOptions;

  constructor(docker: Dockerode, opts: NetnsHoldersOptions) {
    super({ size: opts.size, maxAgeMs: SPARE_MAX_AGE_MS, sweepEveryMs: SWEEP_EVERY_MS, refillAfterClaimMs: REFILL_AFTER_CLAIM_MS, onRefillFailed: opts.onRefillFailed });
    this.docker = docker;
    this.opts = opts;
  }

  /**
   * A running spare, renamed after `sandboxId`: its id, or null when none is ready (the caller
   * uses the bridge).
   */
  claim(sandboxId: string): Promise<string | null> {
    return this.claimWith(async (spare) => {
      try {
        await this.docker.getContainer(spare.id).rename({ name: holderName(sandboxId) });
        return { taken: spare.id };
      } catch (err) {
        // A holder of that name exists: an earlier attempt at this same sandbox left it (its
        // delete removes it). Never removed here, in case that attempt is still running: this
        // launch takes the bridge, and the spare stays for the next create.
        if (statusOf(err) === 409) return 'keep';
        // Gone behind our back: never a reason to fail the create.
        return 'gone';
      }
    });
  }

  protected async make(): Promise<Spare> {
    const network = await this.opts.network();
    const bornMs = Date.now();
    const name = `${SPARE_PREFIX}${randomBytes(6).toString('hex')}`;
    const container = await this.docker.createContainer(buildHolderCreateOptions({ image: this.opts.image, network, name, bornMs }));
    try {
      await container.start();
    } catch (err) {
      await this.removeContainer(container.id);
      throw err;
    }
    return { id: container.id, bornMs, readyMs: Date.now() };
  }

  protected remove(spare: Spare): Promise<void> {
    return this.removeContainer(spare.id);
  }

  /** Removes every driver's spares older than `oldestMs`, and this one's that stopped. */
  protected async sweepShared(oldestMs: number): Promise<void> {
    const listedAt = Date.now();
    let holders: Dockerode.ContainerInfo[];
    try {
      holders = await this.docker.listContainers({ all: true, filters: { label: [`${LABEL_MANAGED}=${MANAGED_NETNS_HOLDER}`] } });
    } catch {
      return;
    }
    for (const h of holders) {
      const spare = h.Names?.some((n) => n.replace(/^\//, '').startsWith(SPARE_PREFIX));
      const born = Number(h.Labels?.[LABEL_HOLDER_BORN]);
      if (spare && !(born >= oldestMs)) await this.removeContainer(h.Id);
    }
    // Ours that stopped (an engine restart stops every container): replaced, never claimed. Not
    // one the refill added while the list was being read: the list may not show it running.
    const running = new Set(holders.filter((h) => h.State === 'running').map((h) => h.Id));
    for (let i = this.spares.length - 1; i >= 0; i--) {
      if (this.spares[i]!.readyMs < listedAt && !running.has(this.spares[i]!.id)) void this.remove(this.spares.splice(i, 1)[0]!);
    }
  }

  private async removeContainer(id: string): Promise<void> {
    await this.docker
      .getContainer(id)
      .remove({ force: true })
      .catch(() => undefined);
  }
}
