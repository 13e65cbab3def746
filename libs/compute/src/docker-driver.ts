// The `docker` compute driver: each sandbox is one container (plus one named volume for
// /sandbox) on a Docker engine, reached through dockerode (DOCKER_HOST or /var/run/docker.sock).
//
// Supervisor delivery: nothing is baked into the user's image. The host's Node binary and the
// repository root (apps/supervisor + node_modules) are bind-mounted read-only at /opt/sandgate/…
// and the container's ENTRYPOINT is `node …/apps/supervisor/src/main.ts --`, its CMD the sandbox
// command. Docker's init (HostConfig.Init, tini) runs in front as PID 1 and reaps zombies. The
// credential is a root-owned 0600 file under <stateDir>/docker/<id>/ bind-mounted read-only at
// /run/sandgate/credential, never an environment variable. See deploy/README.md for which images
// can run the supervisor.
//
// Confinement: the container is on sandgate's own bridge network with inter-container traffic
// off (docker/network.ts), never the host's; the supervisor runs as root with only the few
// capabilities it needs (SUPERVISOR_CAPABILITIES) and no-new-privileges, and runs every workload
// process as the workload's uid, without capabilities, in a network namespace of its own
// (WorkloadIsolation in its environment). Memory, CPU and pids limits (the spec's over the
// driver's defaults) are on the workload's own cgroups beside the container (docker/cgroups.ts),
// so the supervisor stays outside them; HostConfig limits on the whole container only where the
// engine's cgroup driver is systemd (or limitsOn: 'container').
//
// Lifetime: the container belongs to no replica; any replica talking to the same engine finds it
// again by name (sandgate-<id>) or label (sandgate.sandbox-id=<id>). Restarts are sandgate's, so
// Docker's restart policy is off. stop/start keep the container and its volume (the sandbox's
// files); delete removes both.
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Docker from 'dockerode';
import type Dockerode from 'dockerode';
import { NODE_COMPILE_CACHE_VAR, renderSandboxEnvironment, SANDBOX_GID, SANDBOX_UID, type WorkloadIsolation } from '@sandgate/protocols/contract';
import { waitForCompileCache, type ComputeDriver, type ComputeHandle, type ComputeState, type ComputeUsage, type LaunchSpec, type ObservedCompute, type ResourceLimits } from './driver.ts';
import { assertLaunchSpec, assertSandboxId } from './validate.ts';
import {
  assertLimits,
  assertWorkloadUser,
  buildCompileCacheFillOptions,
  buildContainerCreateOptions,
  containerName,
  DEFAULT_IMAGE,
  LABEL_MANAGED,
  LABEL_SANDBOX_ID,
  LABEL_SANDBOX_OWNER,
  labelsFor,
  SANDBOX_DIR,
  STOP_TIMEOUT_S,
  volumeName,
} from './docker/launch.ts';
import { assertGatewayReachable, DEFAULT_NETWORK, endpointsForBridge, ensureSandboxNetwork, errMessage, statusOf, type SandboxNetwork } from './docker/network.ts';
import { demuxDockerStream, describeFailure, elfInterpreter, tailLines } from './docker/diagnose.ts';
import { DockerCgroups } from './docker/cgroups.ts';
import { holderName, MANAGED_NETNS_HOLDER, NetnsHolders, sandboxOfHolder } from './docker/netns-holders.ts';

export { DEFAULT_IMAGE } from './docker/launch.ts';
export { DEFAULT_NETWORK } from './docker/network.ts';

export interface DockerDriverOptions {
  /** Host directory for per-sandbox state (the credential files live in <stateDir>/docker/<id>/). */
  stateDir: string;
  /** Absolute path of the supervisor entry (apps/supervisor/src/main.ts); must be inside repoRoot. */
  supervisorEntry: string;
  /** Repository root: mounted read-only at /opt/sandgate/app (needs apps/, libs/, node_modules/). */
  repoRoot: string;
  /** The Node binary to mount into containers. Defaults to process.execPath. Must be glibc-linked. */
  nodePath?: string;
  /** Image used when the launch spec names none. Default `sandgate-sandbox:latest`. */
  defaultImage?: string;
  /** A dockerode client. Default: `new Docker()` (DOCKER_HOST, else /var/run/docker.sock). */
  docker?: Dockerode;
  /** Default limits for every sandbox; a launch spec's `limits` override them field by field. */
  limits?: ResourceLimits;
  /**
   * The user-defined bridge network sandbox containers join (created when missing, with
   * inter-container communication off). Default `sandgate`.
   */
  network?: string;
  /**
   * Where the limits go. `workload` (default when the engine uses the cgroupfs cgroup driver): the
   * workload's own cgroups beside the container (docker/cgroups.ts), the supervisor outside them.
   * `container`: HostConfig limits on the whole container, the supervisor counted in (the only
   * way with the systemd cgroup driver, chosen then by default).
   */
  limitsOn?: 'workload' | 'container';
  /** Workload cgroups (tests pass their own); default: this host's, under `sandgate-docker`. */
  cgroups?: DockerCgroups;
  /**
   * The supervisor's compile cache (default true), as the local driver has one: filled once per
   * driver by a container of the default image that runs `main.ts --fill-compile-cache` with the
   * same mounts (Node keys the cache by file path, so it must be filled where the supervisors read
   * it), then bound read-only into every sandbox. false: every supervisor compiles its ~300
   * modules itself.
   */
  compileCache?: boolean;
  /**
   * Network namespaces kept ready for creates (docker/netns-holders.ts): a create that claims one
   * starts its container ~250 ms sooner than one given its own bridge endpoint. Default 0 (each
   * container gets its own endpoint); the gateway keeps 2.
   */
  netnsSpares?: number;
  /**
   * Where the driver says what failed in work nobody waits on (making network namespaces ready).
   * Default: nowhere.
   */
  warn?: (msg: string, fields: Record<string, unknown>) => void;
}

/** The docker driver's handle, as persisted by the gateway. */
export interface DockerHandle {
  containerId: string;
  container: string;
  volume: string;
  image: string;
}

const CREDENTIAL_FILE = 'credential';
/** The sandbox's variables, handed to the supervisor as a file (renderSandboxEnvironment). */
const ENVIRONMENT_FILE = 'environment.json';
const GATEWAY_CA_FILE = 'gateway-ca.pem';

export class DockerDriver implements ComputeDriver {
  readonly name = 'docker';
  // /sandbox is a named volume, which Docker's local volume driver cannot cap.
  readonly enforcesDiskLimit = false;
  readonly defaultImage: string;
  private readonly docker: Dockerode;
  private readonly stateDir: string;
  private readonly supervisorEntry: string;
  private readonly repoRoot: string;
  private readonly nodePath: string;
  private readonly limits: ResourceLimits;
  private readonly networkName: string;
  private runtimeCache: Runtime | null = null;
  private networkCache: Promise<SandboxNetwork> | null = null;
  private readonly limitsOn: 'workload' | 'container' | undefined;
  private cgroupsCache: Promise<DockerCgroups | null> | null = null;
  private readonly cgroupsOpt: DockerCgroups | undefined;
  private readonly useCompileCache: boolean;
  /** The compile cache's host directory once its fill was started (null: off or unusable). */
  private compileCacheDir: string | null | undefined;
  /** Settles when the fill's container is gone (however its fill ended). */
  private compileCacheFilled: Promise<void> | undefined;
  private readonly holders: NetnsHolders;

  constructor(opts: DockerDriverOptions) {
    if (!opts.stateDir) throw new Error('DockerDriver: stateDir is required');
    for (const [k, v] of [
      ['supervisorEntry', opts.supervisorEntry],
      ['repoRoot', opts.repoRoot],
    ] as const) {
      if (!path.isAbsolute(v ?? '')) throw new Error(`DockerDriver: ${k} must be an absolute path (got ${JSON.stringify(v)})`);
    }
    this.stateDir = path.resolve(opts.stateDir);
    if (this.stateDir === '/') throw new Error('DockerDriver: stateDir must not be /');
    this.supervisorEntry = opts.supervisorEntry;
    this.repoRoot = opts.repoRoot;
    this.nodePath = opts.nodePath ?? process.execPath;
    if (!path.isAbsolute(this.nodePath)) throw new Error('DockerDriver: nodePath must be an absolute path');
    this.defaultImage = opts.defaultImage || DEFAULT_IMAGE;
    assertLimits(opts.limits, 'DockerDriver limits');
    this.limits = { ...opts.limits };
    this.networkName = opts.network ?? DEFAULT_NETWORK;
    if (opts.limitsOn !== undefined && opts.limitsOn !== 'workload' && opts.limitsOn !== 'container') {
      throw new Error(`DockerDriver: limitsOn must be workload or container (got ${JSON.stringify(opts.limitsOn)})`);
    }
    this.limitsOn = opts.limitsOn;
    this.cgroupsOpt = opts.cgroups;
    if (!/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(this.networkName)) {
      throw new Error(`DockerDriver: network must be a Docker network name (got ${JSON.stringify(opts.network)})`);
    }
    this.docker = opts.docker ?? new Docker();
    this.useCompileCache = opts.compileCache ?? true;
    const spares = opts.netnsSpares ?? 0;
    if (!Number.isInteger(spares) || spares < 0 || spares > 64) throw new Error(`DockerDriver: netnsSpares must be an integer from 0 to 64 (got ${spares})`);
    const warn = opts.warn;
    this.holders = new NetnsHolders(this.docker, {
      size: spares,
      image: this.defaultImage,
      network: async () => (await this.network()).name,
      onRefillFailed: warn
        ? (err, retryInMs) => warn('docker: a network namespace could not be made ready; creates take the sandbox network until the next try', { err, image: this.defaultImage, retry_in_s: retryInMs / 1000 })
        : undefined,
    });
    // Ready before the first create, not after it.
    this.holders.warm();
  }

  /** Removes the network namespaces kept ready (a replica shutting down). */
  async close(): Promise<void> {
    await this.holders.close();
  }

  async create(spec: LaunchSpec): Promise<ComputeHandle> {
    const plan = await this.plan(spec);
    const id = spec.sandboxId;
    const existing = await this.containersOf(id);
    if (existing.length > 0) {
      throw new Error(`sandbox ${id} already exists (container ${containerName(id)} is ${existing[0].State})`);
    }
    // A volume without a container is a leftover (a crash between the two): the new sandbox
    // starts with an empty /sandbox, not someone else's files.
    await this.removeVolume(id);
    return this.launch(plan, true);
  }

  /** Everything a container for `spec` needs, checked: runtime paths, image, command, limits. */
  private async plan(spec: LaunchSpec): Promise<LaunchPlan> {
    assertSandboxId(spec.sandboxId);
    const id = spec.sandboxId;
    const image = (spec.image ?? '').trim() || this.defaultImage;
    if (image.includes('\0')) throw new Error('image must not contain NUL');
    const rt = await this.runtime();
    const imageInfo = await this.imageInfo(image);
    // An empty command means the image's own ENTRYPOINT + CMD, as `docker run IMAGE` would.
    const command =
      spec.command && spec.command.length > 0
        ? spec.command
        : [...(imageInfo.Config?.Entrypoint ?? []), ...(imageInfo.Config?.Cmd ?? [])];
    if (command.length === 0) throw new Error(`sandbox ${id}: no command given and image ${image} has no ENTRYPOINT/CMD`);
    assertLaunchSpec({ ...spec, command });
    assertLimits(spec.limits, 'limits');
    const limits: ResourceLimits = { ...this.limits, ...stripUndefined(spec.limits ?? {}) };
    const user = spec.workloadUser ?? { uid: SANDBOX_UID, gid: SANDBOX_GID };
    assertWorkloadUser(user, 'workloadUser');
    const network = await this.network();
    const gatewayEndpoints = endpointsForBridge(spec.gatewayEndpoints, network.gateway);
    await assertGatewayReachable(spec.gatewayEndpoints, network.gateway);
    const dir = path.join(this.stateDir, 'docker', id);
    const cg = await this.cgroups();
    const compileCacheHostPath = await this.compileCache(rt);
    // A warm-pool member waits for the fill (driver.ts, COMPILE_CACHE_WAIT_MS): nobody waits for it.
    if (spec.deferMain && this.compileCacheFilled) await waitForCompileCache(this.compileCacheFilled);
    const dirs = cg ? cg.dirs(id) : [];
    return {
      spec: { ...spec, command, gatewayEndpoints, environment: withImageNodeCompileCache(spec.environment, imageInfo) },
      image,
      command,
      runtime: rt,
      dir,
      credentialHostPath: path.join(dir, CREDENTIAL_FILE),
      environmentHostPath: path.join(dir, ENVIRONMENT_FILE),
      gatewayCaHostPath: spec.gatewayTls ? path.join(dir, GATEWAY_CA_FILE) : undefined,
      compileCacheHostPath,
      network: network.name,
      limits,
      cgroups: cg ? { parent: cg.cgroupParent(id), dirs, hostNamespace: cg.anyV2 } : undefined,
      workload: { uid: user.uid, gid: user.gid, isolateNetwork: true, cgroupDirs: dirs.map((d) => d.containerDir) },
      imageOwnsSandboxDir: imageInfo.Config?.Labels?.[LABEL_SANDBOX_OWNER] === `${user.uid}:${user.gid}`,
    };
  }

  /**
   * The workload cgroups, or null when the limits are the container's: decided once, from the
   * option or else the engine's cgroup driver (a CgroupParent path needs cgroupfs).
   */
  private cgroups(): Promise<DockerCgroups | null> {
    if (!this.cgroupsCache) {
      const p = (async () => {
        if (this.limitsOn === 'container') return null;
        if (this.limitsOn === undefined) {
          const info = (await this.docker.info()) as { CgroupDriver?: string };
          if (info.CgroupDriver !== 'cgroupfs') return null;
        }
        return this.cgroupsOpt ?? DockerCgroups.detect();
      })();
      this.cgroupsCache = p;
      p.catch(() => {
        if (this.cgroupsCache === p) this.cgroupsCache = null;
      });
    }
    return this.cgroupsCache;
  }

  /** Makes the plan's workload cgroups (again) with its limits: before every container start. */
  private async ensureCgroups(plan: LaunchPlan): Promise<void> {
    const cg = await this.cgroups();
    if (cg) await cg.ensure(plan.spec.sandboxId, plan.limits);
  }

  /**
   * Where supervisors in sandbox containers reach this host: the sandbox network's address on
   * the host's side of the bridge. A replica whose supervisors dial it directly (`sandgate up`)
   * also listens there, so the docker driver needs no --host of its own.
   */
  async supervisorAddress(): Promise<string> {
    return (await this.network()).gateway;
  }

  /** The sandbox network, made once per driver (and by whichever replica comes first). */
  private network(): Promise<SandboxNetwork> {
    if (!this.networkCache) {
      const p = ensureSandboxNetwork(this.docker, this.networkName);
      this.networkCache = p;
      // A failure is not cached: the next create tries again (the engine may have come up).
      p.catch(() => {
        if (this.networkCache === p) this.networkCache = null;
      });
    }
    return this.networkCache;
  }

  /** The container's definition; in `holderId`'s network namespace when given, else on the bridge. */
  private createOptions(plan: LaunchPlan, holderId: string | null): Dockerode.ContainerCreateOptions {
    return buildContainerCreateOptions({
      spec: plan.spec,
      image: plan.image,
      command: plan.command,
      nodeHostPath: plan.runtime.nodeHostPath,
      appHostPath: plan.runtime.appHostPath,
      supervisorRelPath: plan.runtime.supervisorRelPath,
      credentialHostPath: plan.credentialHostPath,
      environmentHostPath: plan.environmentHostPath,
      gatewayCaHostPath: plan.gatewayCaHostPath,
      compileCacheHostPath: plan.compileCacheHostPath,
      network: holderId ? `container:${holderId}` : plan.network,
      limits: plan.limits,
      cgroups: plan.cgroups,
      workload: plan.workload,
    });
  }

  /**
   * Writes the credential, makes sure the labelled volume exists, creates and starts the
   * container. On failure a fresh sandbox is removed whole; a restart keeps its volume.
   */
  private async launch(plan: LaunchPlan, fresh: boolean): Promise<ComputeHandle> {
    const id = plan.spec.sandboxId;
    let container: Dockerode.Container | null = null;
    try {
      await fsp.mkdir(plan.dir, { recursive: true, mode: 0o700 });
      await writeCredential(plan.credentialHostPath, plan.spec.credential);
      await writeCredential(plan.environmentHostPath, renderSandboxEnvironment(plan.spec.environment));
      await writeGatewayCa(plan);
      await this.ensureCgroups(plan);
      // Creating an existing volume is a no-op in Docker (a restart reuses the kept one).
      await this.docker.createVolume({ Name: volumeName(id), Labels: labelsFor(id) });
      for (let holderId = await this.holderFor(id, fresh); ; holderId = null) {
        try {
          container = await this.docker.createContainer(this.createOptions(plan, holderId));
        } catch (err) {
          if (statusOf(err) === 409) {
            throw new AlreadyExists(`sandbox ${id} already exists (a container named ${containerName(id)} was created concurrently)`);
          }
          // The sandbox network was removed behind the driver's back: made again on the next try.
          if (statusOf(err) === 404 && /network/i.test(errMessage(err))) this.networkCache = null;
          throw new Error(`sandbox ${id}: docker could not create the container: ${errMessage(err)}`);
        }
        // The engine mounts the container's whole filesystem for an archive upload: about 50-130 ms
        // of every create on the project's machine (BENCHMARKS.md, "Docker cold create").
        if (!plan.imageOwnsSandboxDir) await this.ownSandboxDir(container, plan);
        try {
          await container.start();
          break;
        } catch (err) {
          // A holder that stopped since it was claimed (an engine restart): the bridge instead.
          if (holderId) {
            await this.removeContainers(id, [container.id]);
            await this.removeHolder(id);
            container = null;
            continue;
          }
          throw new Error(`sandbox ${id}: docker could not start the container (image ${plan.image}): ${errMessage(err)}`);
        }
      }
      const handle: DockerHandle = { containerId: container.id, container: containerName(id), volume: volumeName(id), image: plan.image };
      return { ...handle };
    } catch (err) {
      // Never undo a concurrent create's work: its container is not ours.
      if (!(err instanceof AlreadyExists)) {
        if (fresh) await this.delete(id, container ? { containerId: container.id } : null).catch(() => {});
        else if (container) await this.removeContainers(id, [container.id]).catch(() => {});
      }
      throw err;
    }
  }

  /**
   * Gives the /sandbox volume's root to the workload's uid/gid. Docker fills a new volume from the
   * image (owner included) when the container is created; the image's /sandbox is usually root's
   * (not the default image's, whose LABEL_SANDBOX_OWNER spares this step).
   * Done through the engine's archive API (a one-entry tar whose `sandbox/` directory carries the
   * owner), so it needs no host access to /var/lib/docker. Only the directory itself: files the
   * image put there keep their owners.
   */
  private async ownSandboxDir(container: Dockerode.Container, plan: LaunchPlan): Promise<void> {
    const tar = directoryTar(SANDBOX_DIR.slice(1), plan.workload.uid, plan.workload.gid, 0o755);
    try {
      await container.putArchive(tar, { path: '/' });
    } catch (err) {
      throw new Error(`sandbox ${plan.spec.sandboxId}: cannot give ${SANDBOX_DIR} to uid ${plan.workload.uid}: ${errMessage(err)}`);
    }
  }

  async inspect(sandboxId: string, handle: ComputeHandle | null): Promise<ComputeState> {
    assertSandboxId(sandboxId);
    const info = await this.findContainer(sandboxId, handle);
    return info ? stateOf(info.State.Status) : 'gone';
  }

  /**
   * The container's stats, one shot (no two-sample wait): cpu_stats total_usage and memory usage
   * minus inactive file cache, as `docker stats` counts it. By the handle's container id, so it
   * is one Docker API call.
   */
  async usage(sandboxId: string, handle: ComputeHandle | null): Promise<ComputeUsage | null> {
    assertSandboxId(sandboxId);
    const id = parseDockerHandle(handle)?.containerId;
    if (!id) return null;
    let stats: Dockerode.ContainerStats;
    try {
      stats = await this.docker.getContainer(id).stats({ stream: false, 'one-shot': true } as { stream: false });
    } catch {
      return null; // gone meanwhile
    }
    const total = stats.cpu_stats?.cpu_usage?.total_usage;
    const mem = stats.memory_stats;
    if (total === undefined && mem?.usage === undefined) return null;
    const cache = (mem?.stats as Record<string, number> | undefined)?.inactive_file ?? (mem?.stats as Record<string, number> | undefined)?.total_inactive_file ?? 0;
    return { cpuSeconds: (total ?? 0) / 1e9, memoryBytes: Math.max(0, (mem?.usage ?? 0) - cache) };
  }

  async delete(sandboxId: string, handle: ComputeHandle | null): Promise<boolean> {
    assertSandboxId(sandboxId);
    let existed = false;
    const ids = new Set((await this.containersOf(sandboxId)).map((c) => c.Id));
    const h = parseDockerHandle(handle);
    if (h?.containerId && !ids.has(h.containerId)) {
      const info = await this.inspectContainer(h.containerId);
      if (info && info.Config.Labels?.[LABEL_SANDBOX_ID] === sandboxId) ids.add(info.Id);
    }
    if (await this.removeContainers(sandboxId, [...ids])) existed = true;
    // After the container that lives in its namespace.
    if (await this.removeHolder(sandboxId)) existed = true;
    if (await this.removeVolume(sandboxId)) existed = true;
    const cg = await this.cgroups();
    if (cg) await cg.remove(sandboxId);
    const dir = path.join(this.stateDir, 'docker', sandboxId);
    await fsp.rm(dir, { recursive: true, force: true });
    return existed;
  }

  async list(): Promise<ObservedCompute[]> {
    const containers = await this.docker.listContainers({ all: true, filters: { label: [`${LABEL_MANAGED}=true`] } });
    const out: ObservedCompute[] = [];
    const seen = new Set<string>();
    for (const c of containers) {
      const id = c.Labels?.[LABEL_SANDBOX_ID];
      if (!validId(id)) continue;
      seen.add(id);
      const handle: DockerHandle = { containerId: c.Id, container: containerName(id), volume: volumeName(id), image: c.Image };
      out.push({ sandboxId: id, handle: { ...handle }, state: stateOf(c.State) });
    }
    // A labelled volume without its container is leftover compute too: reported as gone, so that
    // reconciliation deletes it with the sandbox.
    const vols = await this.docker.listVolumes({ filters: { label: [`${LABEL_MANAGED}=true`] } });
    for (const v of vols.Volumes ?? []) {
      const id = v.Labels?.[LABEL_SANDBOX_ID];
      if (!validId(id) || seen.has(id)) continue;
      seen.add(id);
      out.push({ sandboxId: id, handle: { volume: v.Name }, state: 'gone' });
    }
    // A holder named after a sandbox without container or volume (a crash between its claim and
    // the container's create, or a delete cut short): gone, so that reconciliation removes it.
    const holders = await this.docker.listContainers({ all: true, filters: { label: [`${LABEL_MANAGED}=${MANAGED_NETNS_HOLDER}`] } });
    for (const h of holders) {
      const id = (h.Names ?? []).map(sandboxOfHolder).find((x) => x !== null) ?? undefined;
      if (!validId(id) || seen.has(id)) continue;
      seen.add(id);
      out.push({ sandboxId: id, handle: {}, state: 'gone' });
    }
    // Workload cgroups without container or volume (a container removed behind the driver's
    // back): gone as well, so that reconciliation's delete removes them.
    const cg = await this.cgroups();
    for (const id of cg ? await cg.list() : []) {
      if (!validId(id) || seen.has(id)) continue;
      seen.add(id);
      out.push({ sandboxId: id, handle: {}, state: 'gone' });
    }
    return out;
  }

  /**
   * Stops the sandbox's container (SIGTERM to the supervisor through Docker's init, SIGKILL after
   * 15 s), keeping its filesystem and volume. Idempotent: nothing to stop is not an error.
   */
  async stop(sandboxId: string, handle: ComputeHandle | null): Promise<void> {
    assertSandboxId(sandboxId);
    const info = await this.findContainer(sandboxId, handle);
    if (!info) return;
    try {
      await this.docker.getContainer(info.Id).stop({ t: STOP_TIMEOUT_S });
    } catch (err) {
      const code = statusOf(err);
      if (code === 304 || code === 404) return; // already stopped, or gone
      throw new Error(`sandbox ${sandboxId}: cannot stop container: ${errMessage(err)}`);
    }
  }

  /**
   * A new run of a stopped (or finished) sandbox on the filesystem it kept, with the spec's new
   * credential: a running container is stopped first, the credential file replaced, and the same
   * container started again (its whole filesystem, not only /sandbox, is kept). If the spec no
   * longer matches the container (image, command or sandgate's environment, e.g. a new gateway
   * endpoint), or the container vanished but its volume did not, a new container is made on the
   * kept /sandbox volume instead. Returns the (possibly new) handle.
   */
  async start(spec: LaunchSpec, handle: ComputeHandle | null): Promise<ComputeHandle> {
    const plan = await this.plan(spec);
    const id = spec.sandboxId;
    const info = await this.findContainer(id, handle);
    if (info) {
      const wanted = this.createOptions(plan, await this.holderOf(id, info));
      if (sameLaunch(info, wanted)) {
        await this.stop(id, { containerId: info.Id });
        await writeCredential(plan.credentialHostPath, spec.credential);
        await writeCredential(plan.environmentHostPath, renderSandboxEnvironment(spec.environment));
        await writeGatewayCa(plan);
        // Gone after a reboot (cgroupfs is not persistent), and the limits may have changed.
        await this.ensureCgroups(plan);
        try {
          await this.docker.getContainer(info.Id).start();
        } catch (err) {
          if (statusOf(err) !== 304) throw new Error(`sandbox ${id}: cannot start container: ${errMessage(err)}`);
        }
        const h: DockerHandle = { containerId: info.Id, container: containerName(id), volume: volumeName(id), image: plan.image };
        return { ...h };
      }
      await this.removeContainers(id, [info.Id]);
    } else if (!(await this.volumeExists(id))) {
      throw new Error(`sandbox ${id}: nothing to start (its container and its volume are gone)`);
    }
    return this.launch(plan, false);
  }

  /**
   * Why the sandbox's container is not running, when that is a failure: null while it runs,
   * after a clean stop (exit 0, or 143: died of docker stop's SIGTERM), or when there is no
   * container. Otherwise one line such as `supervisor could not start in image busybox: exit
   * code 127: the image has no glibc dynamic loader (…): … | [FATAL tini (7)] exec
   * /opt/sandgate/node/bin/node failed: No such file or directory`.
   */
  async failureReason(sandboxId: string, handle: ComputeHandle | null = null): Promise<string | null> {
    assertSandboxId(sandboxId);
    const info = await this.findContainer(sandboxId, handle);
    if (!info) return null;
    const s = info.State;
    if (s.Running || s.Restarting || s.Paused) return null;
    // A clean stop: the supervisor exits 0 on SIGTERM; 143 is a process that died of that SIGTERM.
    if (!s.Error && !s.OOMKilled && (s.Status === 'created' || s.ExitCode === 0 || s.ExitCode === 143)) return null;
    const container = this.docker.getContainer(info.Id);
    let logTail = '';
    try {
      const raw = (await container.logs({ stdout: true, stderr: true, tail: 20, follow: false })) as unknown;
      logTail = tailLines(demuxDockerStream(Buffer.isBuffer(raw) ? raw : Buffer.from(String(raw))), 6, 1500);
    } catch {
      // logs unavailable (another log driver): the exit code alone still says something
    }
    const rt = await this.runtime().catch(() => null);
    const loader = rt?.loader ?? null;
    let imageHasLoader: boolean | null = null;
    if (loader && s.ExitCode === 127) {
      try {
        await container.infoArchive({ path: loader });
        imageHasLoader = true;
      } catch (err) {
        if (statusOf(err) === 404) imageHasLoader = false;
      }
    }
    const started = Date.parse(s.StartedAt);
    const finished = Date.parse(s.FinishedAt);
    const ranMs = started > 0 && finished >= started ? finished - started : null;
    return describeFailure({
      image: info.Config.Image,
      exitCode: s.ExitCode,
      oomKilled: s.OOMKilled,
      dockerError: s.Error ?? '',
      ranMs,
      logTail,
      loader,
      imageHasLoader,
      imageUser: info.Config.User ?? '',
    });
  }

  // ---- internals -------------------------------------------------------------------------------

  /**
   * The compile cache's host directory, its fill started by the first call (not awaited: a
   * sandbox started meanwhile reads what is there, and Node writes each entry by rename, so never
   * a partial one). undefined: no cache, because it is off or the directory cannot be made; a
   * failed fill only costs the speed-up, never a create.
   *
   * Always the operator's default image, never the image a caller asked for: node runs on the
   * image's libraries, and the cache it writes is code every later supervisor runs as root. A
   * caller's image may compromise its own sandbox's supervisor, never the others' through here.
   */
  private async compileCache(rt: Runtime): Promise<string | undefined> {
    if (!this.useCompileCache || this.compileCacheDir === null) return undefined;
    if (this.compileCacheDir !== undefined) return this.compileCacheDir;
    const dir = path.join(this.stateDir, 'docker-compile-cache');
    try {
      await fsp.mkdir(dir, { recursive: true, mode: 0o755 });
    } catch {
      this.compileCacheDir = null;
      return undefined;
    }
    if (this.compileCacheDir !== undefined) return this.compileCacheDir ?? undefined;
    this.compileCacheDir = dir;
    // The container removes itself when the fill ends (AutoRemove); a wait that comes too late
    // for it fails, which is the same answer.
    this.compileCacheFilled = this.docker
      .createContainer(buildCompileCacheFillOptions({ image: this.defaultImage, nodeHostPath: rt.nodeHostPath, appHostPath: rt.appHostPath, supervisorRelPath: rt.supervisorRelPath, cacheHostPath: dir }))
      .then(async (c) => {
        await c.start();
        await c.wait({ condition: 'removed' });
      })
      .catch(() => undefined);
    return dir;
  }

  private async runtime(): Promise<Runtime> {
    if (this.runtimeCache) return this.runtimeCache;
    let nodeHostPath: string;
    let appHostPath: string;
    let entry: string;
    try {
      nodeHostPath = await fsp.realpath(this.nodePath);
      await fsp.access(nodeHostPath, fs.constants.X_OK);
    } catch {
      throw new Error(`docker driver: node is not executable at ${this.nodePath}`);
    }
    try {
      appHostPath = await fsp.realpath(this.repoRoot);
      entry = await fsp.realpath(this.supervisorEntry);
      await fsp.access(entry, fs.constants.R_OK);
    } catch (err) {
      throw new Error(`docker driver: supervisor entry ${this.supervisorEntry} or repo root ${this.repoRoot} unreadable: ${errMessage(err)}`);
    }
    const rel = path.relative(appHostPath, entry);
    if (rel === '' || rel.startsWith('..') || path.isAbsolute(rel)) {
      throw new Error(`docker driver: supervisor entry ${entry} is not inside the repo root ${appHostPath}`);
    }
    this.runtimeCache = {
      nodeHostPath,
      appHostPath,
      supervisorRelPath: rel.split(path.sep).join('/'),
      loader: elfInterpreter(nodeHostPath),
    };
    return this.runtimeCache;
  }

  private async imageInfo(image: string): Promise<Dockerode.ImageInspectInfo> {
    const info = await this.inspectImage(image);
    if (!info) {
      throw new Error(
        `docker image ${image} is not available on this Docker engine (no registry is used); ` +
          (image === DEFAULT_IMAGE
            ? 'build it with scripts/build-sandbox-image.sh'
            : `load it first (docker pull/load/import), or build the default ${DEFAULT_IMAGE} with scripts/build-sandbox-image.sh`),
      );
    }
    return info;
  }

  private async inspectImage(image: string): Promise<Dockerode.ImageInspectInfo | null> {
    try {
      return await this.docker.getImage(image).inspect();
    } catch (err) {
      if (statusOf(err) === 404) return null;
      // The first Docker call of every create and start: no HTTP status means nothing answered.
      if (statusOf(err) === undefined) {
        throw new Error(`docker driver: no Docker engine answers (${errMessage(err)}); start one, e.g. scripts/ensure-docker.sh`);
      }
      throw new Error(`docker: cannot inspect image ${image}: ${errMessage(err)}`);
    }
  }

  private async inspectContainer(ref: string): Promise<Dockerode.ContainerInspectInfo | null> {
    try {
      return await this.docker.getContainer(ref).inspect();
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw err;
    }
  }

  /** The sandbox's container, by the handle's id or by name; only if labelled with this id. */
  private async findContainer(sandboxId: string, handle: ComputeHandle | null): Promise<Dockerode.ContainerInspectInfo | null> {
    const h = parseDockerHandle(handle);
    for (const ref of [h?.containerId, containerName(sandboxId)]) {
      if (!ref) continue;
      const info = await this.inspectContainer(ref);
      if (info && info.Config.Labels?.[LABEL_SANDBOX_ID] === sandboxId && info.State.Status !== 'removing') return info;
    }
    return null;
  }

  /**
   * The network namespace a launch uses: a fresh create claims a spare; a relaunch keeps the
   * sandbox's holder when it has one (started again if it stopped). null: the bridge.
   */
  private async holderFor(sandboxId: string, fresh: boolean): Promise<string | null> {
    if (!fresh) {
      const kept = await this.inspectContainer(holderName(sandboxId));
      if (kept) {
        const id = await this.runHolder(kept);
        if (id) return id;
        await this.removeHolder(sandboxId);
      }
    }
    return this.holders.claim(sandboxId);
  }

  /** The holder `info` (the sandbox's container) lives in, running; null when it has none (or it cannot run). */
  private async holderOf(sandboxId: string, info: Dockerode.ContainerInspectInfo): Promise<string | null> {
    const mode = (info.HostConfig as Dockerode.HostConfig).NetworkMode ?? '';
    if (!mode.startsWith('container:')) return null;
    const holder = await this.inspectContainer(mode.slice('container:'.length));
    return holder && holder.Name.replace(/^\//, '') === holderName(sandboxId) ? this.runHolder(holder) : null;
  }

  /** `holder`'s id once it runs (started again if it stopped); null when it cannot run. */
  private async runHolder(holder: Dockerode.ContainerInspectInfo): Promise<string | null> {
    try {
      if (!holder.State.Running) await this.docker.getContainer(holder.Id).start();
      return holder.Id;
    } catch {
      return null;
    }
  }

  /** Removes the sandbox's holder. Resolves true if one existed. */
  private async removeHolder(sandboxId: string): Promise<boolean> {
    try {
      await this.docker.getContainer(holderName(sandboxId)).remove({ force: true });
      return true;
    } catch (err) {
      if (statusOf(err) === 404) return false;
      if (statusOf(err) === 409) {
        await this.waitContainerGone(holderName(sandboxId), 10_000);
        return true;
      }
      throw new Error(`sandbox ${sandboxId}: cannot remove its network holder: ${errMessage(err)}`);
    }
  }

  private async containersOf(sandboxId: string): Promise<Dockerode.ContainerInfo[]> {
    return this.docker.listContainers({
      all: true,
      filters: { label: [`${LABEL_MANAGED}=true`, `${LABEL_SANDBOX_ID}=${sandboxId}`] },
    });
  }

  /** Removes the sandbox's volume(s). Resolves true if one existed. Retries while still in use. */
  private async removeVolume(sandboxId: string): Promise<boolean> {
    const names = new Set([volumeName(sandboxId)]);
    const labelled = await this.docker.listVolumes({
      filters: { label: [`${LABEL_MANAGED}=true`, `${LABEL_SANDBOX_ID}=${sandboxId}`] },
    });
    for (const v of labelled.Volumes ?? []) names.add(v.Name);
    let existed = false;
    for (const name of names) {
      const deadline = Date.now() + 10_000;
      for (;;) {
        try {
          await this.docker.getVolume(name).remove();
          existed = true;
          break;
        } catch (err) {
          const code = statusOf(err);
          if (code === 404) break;
          // 409: still referenced by a container that is being removed.
          if (code === 409 && Date.now() < deadline) {
            await sleep(100);
            continue;
          }
          throw new Error(`sandbox ${sandboxId}: cannot remove volume ${name}: ${errMessage(err)}`);
        }
      }
    }
    return existed;
  }

  /** Force-removes the given containers. Resolves true if any existed. */
  private async removeContainers(sandboxId: string, ids: string[]): Promise<boolean> {
    let existed = false;
    for (const cid of ids) {
      try {
        await this.docker.getContainer(cid).remove({ force: true, v: true });
        existed = true;
      } catch (err) {
        const code = statusOf(err);
        if (code === 404) continue;
        // 409 "removal already in progress": another replica is deleting it; wait for it to go.
        if (code === 409) {
          existed = true;
          await this.waitContainerGone(cid, 10_000);
          continue;
        }
        throw new Error(`sandbox ${sandboxId}: cannot remove container ${cid.slice(0, 12)}: ${errMessage(err)}`);
      }
    }
    return existed;
  }

  private async volumeExists(sandboxId: string): Promise<boolean> {
    try {
      await this.docker.getVolume(volumeName(sandboxId)).inspect();
      return true;
    } catch (err) {
      if (statusOf(err) === 404) return false;
      throw err;
    }
  }

  private async waitContainerGone(ref: string, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (!(await this.inspectContainer(ref))) return;
      await sleep(100);
    }
    throw new Error(`container ${ref.slice(0, 12)} still exists ${timeoutMs} ms after its removal began`);
  }
}

class AlreadyExists extends Error {}

interface LaunchPlan {
  spec: LaunchSpec;
  image: string;
  command: string[];
  runtime: Runtime;
  /** <stateDir>/docker/<id> */
  dir: string;
  credentialHostPath: string;
  environmentHostPath: string;
  gatewayCaHostPath?: string;
  /** The supervisors' compile cache, bound read-only; absent: none. */
  compileCacheHostPath?: string;
  network: string;
  limits: ResourceLimits;
  cgroups: { parent: string; dirs: { hostDir: string; containerDir: string }[]; hostNamespace: boolean } | undefined;
  workload: WorkloadIsolation;
  /** The image's label says its /sandbox is the workload's already: no owner change (LABEL_SANDBOX_OWNER). */
  imageOwnsSandboxDir: boolean;
}

/**
 * An image's own NODE_COMPILE_CACHE was its workloads' (Docker merges an image's ENV into the
 * process environment they inherit). The container's environment now sets that name for the
 * supervisor (compileCacheEnvironment), and the supervisor leaves it out of what its workload
 * inherits, so the image's value reaches the workload through the environment file instead,
 * unless the sandbox's own variables set one.
 */
function withImageNodeCompileCache(environment: Record<string, string>, image: Dockerode.ImageInspectInfo): Record<string, string> {
  if (Object.hasOwn(environment, NODE_COMPILE_CACHE_VAR)) return environment;
  const prefix = `${NODE_COMPILE_CACHE_VAR}=`;
  const fromImage = (image.Config?.Env ?? []).findLast((e) => e.startsWith(prefix));
  return fromImage === undefined ? environment : { ...environment, [NODE_COMPILE_CACHE_VAR]: fromImage.slice(prefix.length) };
}

/**
 * Whether a container was made from the same image, command, sandgate environment, network,
 * limits and confinement. A container made by an older sandgate (the host's network, all of
 * Docker's default capabilities) never matches, so a restart replaces it with a confined one.
 */
function sameLaunch(info: Dockerode.ContainerInspectInfo, wanted: Dockerode.ContainerCreateOptions): boolean {
  if (info.Config.Image !== wanted.Image) return false;
  if (JSON.stringify(info.Config.Cmd ?? []) !== JSON.stringify(wanted.Cmd ?? [])) return false;
  if (JSON.stringify(info.Config.Entrypoint ?? []) !== JSON.stringify(wanted.Entrypoint ?? [])) return false;
  if ((info.Config.User ?? '') !== (wanted.User ?? '')) return false;
  const have = new Set(info.Config.Env ?? []);
  if (!(wanted.Env ?? []).every((e) => have.has(e))) return false;
  const h = info.HostConfig as Dockerode.HostConfig;
  const w = wanted.HostConfig ?? {};
  const same = (a: unknown, b: unknown) => JSON.stringify(a ?? null) === JSON.stringify(b ?? null);
  const num = (v: number | undefined) => (v === undefined || v === 0 ? null : v);
  return (
    h.NetworkMode === w.NetworkMode &&
    (h.CgroupParent ?? '') === (w.CgroupParent ?? '') &&
    same([...(h.CapAdd ?? [])].sort(), [...(w.CapAdd ?? [])].sort()) &&
    same(h.CapDrop, w.CapDrop) &&
    same(h.SecurityOpt, w.SecurityOpt) &&
    num(h.NanoCpus) === num(w.NanoCpus) &&
    num(h.Memory) === num(w.Memory) &&
    num(h.MemorySwap) === num(w.MemorySwap) &&
    (h.PidsLimit ?? null) === (w.PidsLimit ?? null) &&
    (h.OomScoreAdj ?? 0) === (w.OomScoreAdj ?? 0)
  );
}

/** A tar archive of one directory entry `name/` owned by uid:gid with `mode`. */
function directoryTar(name: string, uid: number, gid: number, mode: number): Buffer {
  const header = Buffer.alloc(512, 0);
  const field = (value: string, offset: number, length: number) => header.write(value, offset, length, 'ascii');
  const octal = (n: number, length: number) => n.toString(8).padStart(length - 1, '0') + '\0';
  field(`${name}/`, 0, 100);
  field(octal(mode, 8), 100, 8);
  field(octal(uid, 8), 108, 8);
  field(octal(gid, 8), 116, 8);
  field(octal(0, 12), 124, 12); // size
  field(octal(Math.floor(Date.now() / 1000), 12), 136, 12); // mtime
  field('        ', 148, 8); // checksum placeholder: spaces while summing
  field('5', 156, 1); // typeflag: directory
  field('ustar\0', 257, 6);
  field('00', 263, 2);
  let sum = 0;
  for (const b of header) sum += b;
  field(sum.toString(8).padStart(6, '0') + '\0 ', 148, 8);
  // Two zero blocks end the archive.
  return Buffer.concat([header, Buffer.alloc(1024, 0)]);
}

interface Runtime {
  nodeHostPath: string;
  appHostPath: string;
  supervisorRelPath: string;
  /** The ELF interpreter the node binary needs (null: static or unknown). */
  loader: string | null;
}

/** A handle from Redis, or null if it is not one of ours. */
export function parseDockerHandle(h: ComputeHandle | null | undefined): Partial<DockerHandle> | null {
  if (h === null || h === undefined || typeof h !== 'object') return null;
  const { containerId, container, volume, image } = h as Record<string, unknown>;
  const out: Partial<DockerHandle> = {};
  if (typeof containerId === 'string' && /^[0-9a-f]{12,64}$/.test(containerId)) out.containerId = containerId;
  if (typeof container === 'string') out.container = container;
  if (typeof volume === 'string') out.volume = volume;
  if (typeof image === 'string') out.image = image;
  return out;
}

function stateOf(status: string): ComputeState {
  switch (status) {
    case 'running':
    case 'restarting':
    case 'paused':
      return 'running';
    case 'created':
    case 'exited':
    case 'dead':
      return 'stopped';
    default: // 'removing'
      return 'gone';
  }
}

function validId(id: string | undefined): id is string {
  try {
    assertSandboxId(id);
    return true;
  } catch {
    return false;
  }
}

async function writeCredential(file: string, credential: string): Promise<void> {
  // Written whole, then renamed: a container started later bind-mounts the complete file. Owned
  // by whoever runs the driver (root, for the engine's socket) and 0600: inside the container
  // (no user namespace) only root, i.e. the supervisor, reads it; never the workload's uid.
  const tmp = `${file}.${process.pid}.tmp`;
  await fsp.writeFile(tmp, credential, { mode: 0o600 });
  await fsp.chmod(tmp, 0o600);
  await fsp.rename(tmp, file);
}

/** The gateway's CA (public) for the supervisor to verify it with, written whole then renamed. */
async function writeGatewayCa(plan: LaunchPlan): Promise<void> {
  if (!plan.gatewayCaHostPath || !plan.spec.gatewayTls) return;
  const tmp = `${plan.gatewayCaHostPath}.${process.pid}.tmp`;
  await fsp.writeFile(tmp, plan.spec.gatewayTls.ca, { mode: 0o644 });
  await fsp.rename(tmp, plan.gatewayCaHostPath);
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

