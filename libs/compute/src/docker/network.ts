// The network every sandbox container is attached to: a user-defined bridge that sandgate's docker
// driver creates when it is missing. Never the host's network (a workload on the host's network
// namespace reaches every loopback port of the host: the replicas, Redis, the peer port).
//
// - Inter-container communication is off (com.docker.network.bridge.enable_icc=false): Docker
//   drops bridge-to-bridge traffic, so no sandbox container can reach another one's ports.
// - The supervisor reaches the gateway on the host through the bridge's gateway address (the
//   host's side of the bridge): loopback endpoints in SANDGATE_GATEWAY are rewritten to it. The
//   listener (a replica or the load balancer) must therefore listen on that address too (bind
//   0.0.0.0 or the bridge's address); `assertGatewayReachable` says so at create instead of
//   letting the sandbox hang in Provisioning.
// - Not `Internal`: the supervisor's egress proxy needs a route out for what the policy allows.
//   The workload itself never uses this network directly: it lives in a network namespace of its
//   own inside the container (the supervisor's netns agent), with only loopback and the proxy.
import { setTimeout as sleep } from 'node:timers/promises';
import net from 'node:net';
import type Dockerode from 'dockerode';
import { loopbackHost, parseEndpoints } from '@sandgate/protocols/contract';
import { LABEL_MANAGED } from './launch.ts';

export const DEFAULT_NETWORK = 'sandgate';
/** Marks the network as sandgate's sandbox network (and says what it is for). */
export const LABEL_NETWORK = 'sandgate.network';
export const ICC_OPTION = 'com.docker.network.bridge.enable_icc';

export interface SandboxNetwork {
  id: string;
  name: string;
  /** The host's address on the bridge: what containers use to reach host listeners. */
  gateway: string;
}

/**
 * Finds the sandbox network `name`, creating it when missing. An existing network of that name
 * is used only if it is a bridge with inter-container communication disabled; anything else is
 * refused with an error saying what to do (it is not ours to change).
 */
export async function ensureSandboxNetwork(docker: Dockerode, name: string): Promise<SandboxNetwork> {
  let info = await settleDuplicates(docker, name);
  // Racing callers can each see a different set of the duplicates being made, so one may keep a
  // network another just removed (CI saw it: five at once, one found nothing left). Looking
  // again, and creating again if need be, converges on the survivor.
  for (let attempt = 0; !info && attempt < 3; attempt++) {
    try {
      await docker.createNetwork({
        Name: name,
        Driver: 'bridge',
        // Without it dockerd happily makes a second network of the same name (two replicas
        // racing here); the loser gets 409 and uses the winner's.
        CheckDuplicate: true,
        Internal: false,
        Attachable: false,
        Labels: { [LABEL_MANAGED]: 'true', [LABEL_NETWORK]: 'sandbox' },
        Options: { [ICC_OPTION]: 'false' },
      });
    } catch (err) {
      if (statusOf(err) !== 409) throw new Error(`docker: cannot create the sandbox network ${name}: ${errMessage(err)}`);
    }
    info = await settleDuplicates(docker, name);
  }
  if (!info) throw new Error(`docker: the sandbox network ${name} vanished right after it was created, three times`);
  // A network another caller was still creating can turn out older than the one kept here, and
  // that caller then removes this one (CI saw two callers end with different networks). So the
  // choice stands only once a later listing, after such a create had time to finish, shows it alone.
  for (let round = 1; round <= SETTLE_ROUNDS; round++) {
    await sleep(SETTLE_PAUSE_MS * round);
    const again = await settleDuplicates(docker, name);
    if (!again) throw new Error(`docker: the sandbox network ${name} vanished while it was being settled`);
    if (again.Id === info.Id) break;
    info = again;
  }
  return describe(info, name);
}

/** Listings that must agree on the kept network before it is used, and the pause before each. */
const SETTLE_ROUNDS = 5;
const SETTLE_PAUSE_MS = 100;

/**
 * Two replicas creating the network at the same moment can still both succeed (dockerd's
 * duplicate check is not atomic). Every replica keeps the oldest of sandgate's networks of that
 * name and removes the others while they are still empty, so all containers end up on one.
 */
async function settleDuplicates(docker: Dockerode, name: string): Promise<Dockerode.NetworkInspectInfo | null> {
  let listed: Dockerode.NetworkInspectInfo[];
  try {
    listed = await docker.listNetworks({ filters: { name: [name] } });
  } catch (err) {
    if (statusOf(err) === undefined) {
      throw new Error(`docker driver: no Docker engine answers (${errMessage(err)}); start one, e.g. scripts/ensure-docker.sh`);
    }
    throw new Error(`docker: cannot list networks: ${errMessage(err)}`);
  }
  // The name filter matches substrings.
  const all = listed.filter((n) => n.Name === name);
  if (all.length === 0) return null;
  if (all.length === 1) return inspectNetwork(docker, all[0]!.Id);
  const sorted = [...all].sort((a, b) => (a.Created < b.Created ? -1 : a.Created > b.Created ? 1 : a.Id < b.Id ? -1 : 1));
  for (const extra of sorted.slice(1)) {
    if (extra.Labels?.[LABEL_MANAGED] !== 'true') continue;
    await docker
      .getNetwork(extra.Id)
      .remove()
      .catch(() => undefined); // in use or already gone: someone attached to it; leave it
  }
  return inspectNetwork(docker, sorted[0]!.Id);
}

function describe(info: Dockerode.NetworkInspectInfo, name: string): SandboxNetwork {
  if (info.Driver !== 'bridge') {
    throw new Error(`docker: network ${name} exists but is a ${info.Driver} network; sandgate needs its own bridge (remove it, or name another with the driver's network option)`);
  }
  if (info.Options?.[ICC_OPTION] !== 'false') {
    throw new Error(
      `docker: network ${name} exists but lets containers reach each other (${ICC_OPTION} is not false); ` +
        `remove it (docker network rm ${name}) and sandgate recreates it isolated`,
    );
  }
  const gateway = (info.IPAM?.Config ?? []).map((c) => c.Gateway).find((g): g is string => typeof g === 'string' && net.isIPv4(g));
  if (!gateway) throw new Error(`docker: network ${name} has no IPv4 gateway address`);
  return { id: info.Id, name: info.Name, gateway };
}

async function inspectNetwork(docker: Dockerode, id: string): Promise<Dockerode.NetworkInspectInfo | null> {
  try {
    return (await docker.getNetwork(id).inspect()) as Dockerode.NetworkInspectInfo;
  } catch (err) {
    if (statusOf(err) === 404) return null;
    throw new Error(`docker: cannot inspect network ${id.slice(0, 12)}: ${errMessage(err)}`);
  }
}

/** `host:port` / `[v6]:port` split; null when there is no port. */
export function splitEndpoint(endpoint: string): { host: string; port: string } | null {
  const m = /^(\[[^\]]*\]|[^:]*|.*):(\d+)$/.exec(endpoint.trim());
  if (!m) return null;
  return { host: m[1]!, port: m[2]! };
}

/**
 * SANDGATE_GATEWAY as a supervisor on the bridge must dial it: every loopback endpoint
 * (127.0.0.0/8, localhost, ::1) becomes `<bridge gateway>:port`, since the container's own
 * loopback is not the host's. Other endpoints (a load balancer's name or address) stay as they are.
 */
export function endpointsForBridge(endpoints: string, bridgeGateway: string): string {
  return parseEndpoints(endpoints)
    .map((e) => {
      const hp = splitEndpoint(e);
      if (!hp || loopbackHost(hp.host) === null) return e;
      return `${bridgeGateway}:${hp.port}`;
    })
    .join(',');
}

/** Whether a TCP connection to host:port is accepted within timeoutMs. */
export function tcpAccepts(host: string, port: number, timeoutMs = 1_000): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ host, port });
    const done = (ok: boolean) => {
      clearTimeout(timer);
      s.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    s.once('connect', () => done(true));
    s.once('error', () => done(false));
  });
}

/**
 * Refuses a launch whose supervisor could never reach the gateway: loopback endpoints rewritten to
 * the bridge address where nothing listens although the same port answers on loopback (the
 * replica or load balancer binds 127.0.0.1 only). A gateway that is down on both is an outage,
 * not a configuration mistake: the supervisor keeps dialling and connects once it is back.
 * Only meaningful when the Docker engine runs on this host (the driver bind-mounts host paths,
 * so it always does).
 */
export async function assertGatewayReachable(endpoints: string, bridgeGateway: string): Promise<void> {
  const loopback = parseEndpoints(endpoints)
    .map((e) => splitEndpoint(e))
    .filter((hp): hp is { host: string; port: string } => hp !== null && loopbackHost(hp.host) !== null);
  if (loopback.length === 0) return;
  const onBridge = await Promise.all(loopback.map((hp) => tcpAccepts(bridgeGateway, Number(hp.port))));
  if (onBridge.some(Boolean)) return;
  const onLoopback = await Promise.all(loopback.map((hp) => tcpAccepts(loopbackHost(hp.host)!, Number(hp.port))));
  if (!onLoopback.some(Boolean)) return;
  const eps = loopback.map((hp) => `${hp.host}:${hp.port}`).join(', ');
  throw new Error(
    `docker sandboxes reach the gateway (${eps}) through the sandbox network's address ${bridgeGateway}, ` +
      `but it listens on loopback only: start the replicas (or the load balancer) with --host 0.0.0.0 or --host ${bridgeGateway}, ` +
      'or give --supervisor-endpoint an address containers can reach',
  );
}

/** The HTTP status of a failed Docker API call (dockerode's statusCode), if any. */
export function statusOf(err: unknown): number | undefined {
  const c = (err as { statusCode?: unknown } | null)?.statusCode;
  return typeof c === 'number' ? c : undefined;
}

/** The Docker engine's own message for a failed API call, else the error's. */
export function errMessage(err: unknown): string {
  const e = err as { json?: { message?: string }; message?: string } | null;
  return (e?.json?.message ?? e?.message ?? String(err)).trim();
}
