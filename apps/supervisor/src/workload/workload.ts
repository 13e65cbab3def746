// The confinement of the sandbox's workload as one object the supervisor holds: how workload
// processes are launched (launcher.ts), how connections into the sandbox's loopback are made
// (dial.ts, through the netns agent), and the egress proxy with its live policy.
//
// Started before the main process: nothing of the workload may run before its namespace,
// proxy and policy exist, or it would run with the supervisor's network.
import type { WorkloadIsolation } from '@sandgate/protocols';
import type { Logger } from '@sandgate/telemetry/log';
import { directDial, type Dialer } from './dial.ts';
import { decodePolicy, EgressProxy } from './egress-proxy.ts';
import { ConfinedLauncher, type WorkloadLauncher } from './launcher.ts';
import { NetnsAgent } from './netns.ts';

/** Where the egress proxy listens inside the workload's namespace (its own loopback, so any free port). */
export const PROXY_PORT = 3128;

export interface Workload {
  readonly launcher: WorkloadLauncher;
  /** Connections to the sandbox's own loopback ports. */
  readonly dial: Dialer;
  /** Swaps the egress policy; throws (keeping the old one) if the bytes do not decode or cannot be enforced. */
  applyPolicy(bytes: Uint8Array): void;
  stop(): void;
}

export async function startWorkload(opts: {
  isolation: WorkloadIsolation;
  policy: Uint8Array;
  log: Logger;
  /** The workload lost its network namespace: the supervisor cannot go on (see netns.ts). */
  onFatal(reason: string): void;
  /** The supervisors' compile cache, which the netns agent starts through too; absent: none. */
  compileCacheDir?: string;
}): Promise<Workload> {
  const { isolation, log } = opts;
  if (!isolation.isolateNetwork) {
    const launcher = new ConfinedLauncher(isolation);
    launcher.keepSpareReady();
    log.warn('workload network isolation is off: egress is not restricted', { uid: isolation.uid, launcher: launcher.kind, spare_spawner: launcher.spareSpawner, pty_spawner: launcher.ptySpawner });
    return {
      launcher,
      dial: directDial,
      applyPolicy: (bytes) => {
        decodePolicy(bytes);
        throw new Error('this sandbox has no network isolation: its egress policy cannot be enforced');
      },
      stop: () => launcher.close(),
    };
  }
  // A policy that does not decode is a driver bug: refuse to start rather than run without one.
  const initial = decodePolicy(opts.policy);
  const agent = await NetnsAgent.start({ proxyPort: PROXY_PORT, log, onDeath: opts.onFatal, compileCacheDir: opts.compileCacheDir });
  const proxy = new EgressProxy(agent.proxyServer, initial, log);
  const launcher = new ConfinedLauncher(isolation, { netnsPath: agent.netnsPath, proxyPort: agent.proxyPort });
  launcher.keepSpareReady();
  log.info('workload confined', {
    uid: isolation.uid,
    gid: isolation.gid,
    cgroups: isolation.cgroupDirs,
    netns_agent: agent.pid,
    launcher: launcher.kind,
    spare_spawner: launcher.spareSpawner,
    pty_spawner: launcher.ptySpawner,
    policy_rules: Object.keys(initial.network_policies ?? {}).length,
  });
  return {
    launcher,
    dial: (host, port, timeoutMs) => agent.dial(host, port, timeoutMs),
    applyPolicy: (bytes) => proxy.setPolicy(decodePolicy(bytes)),
    stop: () => {
      launcher.close();
      proxy.close();
      agent.stop();
    },
  };
}
