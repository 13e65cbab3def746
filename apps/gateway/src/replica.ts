// One gateway replica: the public gRPC listener (OpenShell API + supervisor protocol), the peer
// listener (replica-to-replica relay), the HTTP listener, and the loops that keep its Redis
// facts fresh. Stateless apart from the supervisor sessions it holds, which any other replica
// can take over.
import { Server, ServerCredentials } from '@grpc/grpc-js';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { serviceDefinition } from '@sandgate/protocols';
import { OwnershipStore, ReplicaRegistry, SandboxLogStore, SandboxStore, SshSessionStore } from '@sandgate/store';
import { DockerDriver, LocalDriver, type ComputeDriver, type ComputeHandle, type LaunchSpec } from '@sandgate/compute';
import { supervisorDebugBreaks, type DebugBreak } from '@sandgate/core';
import { createLogger, Metrics, type Logger } from '@sandgate/telemetry';
import { JobScheduler, startJobWorker, type JobProcessors, type RunningWorker } from '@sandgate/worker';
import type { ReplicaConfig, RunningReplica } from './config.ts';
import { SessionRegistry, type ControlCall, type ExecChannelCall, type TcpChannelCall } from './sessions/sessions.ts';
import { ExecRouter } from './relay/exec-router.ts';
import { servePeerPort } from './relay/peer-port.ts';
import { ExecService } from './exec/exec-service.ts';
import { SandboxService } from './sandboxes/sandbox-service.ts';
import { openShellDefinition, openShellImplementation } from './api/openshell-service.ts';
import { buildHttp } from './api/http.ts';
import { LifecycleService } from './sandboxes/lifecycle-service.ts';
import { WatchService } from './sandboxes/watch-service.ts';
import { gatewayHostForResponse, SshService, sshSessionTtlFromEnv, DEFAULT_SSH_MAX_PER_SANDBOX, DEFAULT_SSH_MAX_PER_TOKEN } from './ssh/ssh-service.ts';
import { TcpForwardService } from './ssh/tcp-forward.ts';

const supervisorEntry = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../supervisor/src/main.ts');

// Channelz bookkeeping costs every call and message; nothing here reads it.
const GRPC_SERVER_OPTIONS = {
  'grpc.enable_channelz': 0,
  'grpc.keepalive_time_ms': 10_000,
  'grpc.keepalive_timeout_ms': 5_000,
  'grpc.keepalive_permit_without_calls': 1,
};
// Peers are on a local network: a stalled or vanished replica is noticed within ~4 s, which bounds
// how long a relayed exec can outlive its client after the entry replica froze.
const PEER_SERVER_OPTIONS = {
  'grpc.enable_channelz': 0,
  'grpc.keepalive_time_ms': 2_000,
  'grpc.keepalive_timeout_ms': 2_000,
  'grpc.keepalive_permit_without_calls': 1,
};

function bindGrpc(server: Server, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(`${host}:${port}`, ServerCredentials.createInsecure(), (err, bound) => (err ? reject(err) : resolve(bound)));
  });
}

export function createDriver(config: ReplicaConfig): ComputeDriver {
  if (config.driver === 'local') return new LocalDriver({ stateDir: config.stateDir, supervisorEntry });
  if (config.driver === 'docker') {
    return new DockerDriver({
      stateDir: config.stateDir,
      supervisorEntry,
      // The supervisor and its node_modules are bind-mounted read-only from this checkout.
      repoRoot: path.resolve(path.dirname(supervisorEntry), '../../..'),
      defaultImage: process.env.SANDGATE_DOCKER_IMAGE || undefined,
    });
  }
  throw new Error(`unknown driver '${config.driver}': use local or docker`);
}

// PLUMBING (chaos branch; the wire engineer owns the supervisor environment builder): hands the
// supervisor-side debug faults to every supervisor this replica launches.
function withSupervisorDebugBreaks(driver: ComputeDriver, breaks: string): ComputeDriver {
  if (!breaks) return driver;
  return new Proxy(driver, {
    get(target, prop) {
      if (prop === 'create') return (spec: LaunchSpec) => target.create({ ...spec, debugBreaks: breaks });
      if (prop === 'start') return (spec: LaunchSpec, handle: ComputeHandle | null) => target.start({ ...spec, debugBreaks: breaks }, handle);
      const value: unknown = Reflect.get(target, prop);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

export async function startReplica(config: ReplicaConfig): Promise<RunningReplica> {
  const log = createLogger({ component: 'gateway', replica: config.replicaId });
  const metrics = new Metrics();
  const redis = new Redis(config.redisUrl, { maxRetriesPerRequest: 2, lazyConnect: true });
  redis.on('error', (err: Error) => log.warn('redis error', { err: err.message }));
  await redis.connect();

  const store = new SandboxStore(redis);
  // PLUMBING (chaos branch; the config engineer owns refusal, /readyz, the metric and the log).
  const debugBreaks = config.debugBreaks ?? new Set<DebugBreak>();
  if (debugBreaks.size > 0) log.error('DEBUG FAULTS ACTIVE: safety mechanisms are switched off', { breaks: [...debugBreaks] });
  const ownership = new OwnershipStore(redis, config.ownerTtlMs, { fencing: !debugBreaks.has('fencing') });
  const replicas = new ReplicaRegistry(redis, config.ownerTtlMs);
  const driver = withSupervisorDebugBreaks(createDriver(config), supervisorDebugBreaks(debugBreaks));
  // The peer secret is shared through Redis on first start (replicas trust the same Redis).
  const peerSecret = process.env.SANDGATE_PEER_SECRET || (await sharedPeerSecret(redis));

  const logs = new SandboxLogStore(redis);
  // BullMQ gets its own connections: workers block on Redis, and must retry forever.
  const scheduler = new JobScheduler(new Redis(config.redisUrl, { maxRetriesPerRequest: 2 }), { enabled: !debugBreaks.has('jobs') });
  // Sessions report to the lifecycle, which asks the router about sessions: bound late.
  let lifecycle: LifecycleService | undefined;
  const sessions = new SessionRegistry({
    replicaId: config.replicaId,
    store,
    ownership,
    heartbeatIntervalMs: config.heartbeatIntervalMs,
    heartbeatMisses: config.heartbeatMisses,
    maxExecsPerSandbox: config.maxExecsPerSandbox ?? 64,
    disconnectGraceMs: 5_000,
    reports: {
      mainExit: (id, instance, code) => lifecycle!.mainProcessExited(id, instance, code),
      terminalFinal: (id, instance) => lifecycle!.terminalFinal(id, instance),
    },
    log,
    metrics,
  });
  const router = new ExecRouter({ replicaId: config.replicaId, sessions, ownership, replicas, peerSecret, log });
  const exec = new ExecService({ store, router, peerSecret, scheduler, log, metrics });

  const publicServer = new Server(GRPC_SERVER_OPTIONS);
  const peerServer = new Server(PEER_SERVER_OPTIONS);
  const grpcPort = await bindGrpc(publicServer, config.host, config.grpcPort);
  const grpcAddress = `${config.host}:${grpcPort}`;
  const supervisorEndpoint = config.supervisorEndpoint || grpcAddress;

  lifecycle = new LifecycleService({
    incrementCounter: async (key) => void (await redis.incr(key)),
    store,
    logs,
    driver,
    scheduler,
    supervisorEndpoint: () => supervisorEndpoint,
    sessionLive: (id) => router.sessionLive(id),
    revokeSessions: async (id, reason) => {
      await ownership.revoke(id);
      await sessions.drop(id, reason);
    },
    provisionTimeoutMs: config.provisionTimeoutMs ?? 300_000,
    debugBreaks,
    log,
    metrics,
  });
  const sandboxes = new SandboxService({
    store,
    driver,
    defaultImage: config.driver === 'local' ? 'host' : process.env.SANDGATE_DOCKER_IMAGE || 'sandgate-sandbox:latest',
    supervisorEndpoint: () => supervisorEndpoint,
    lifecycle,
    log,
    metrics,
  });
  const watch = new WatchService({ redis, store, logs, log });
  const ssh = new SshService({
    store,
    sessions: new SshSessionStore(redis),
    sessionLive: (id) => router.sessionLive(id),
    gatewayHost: gatewayHostForResponse(config.advertiseHost || config.host),
    gatewayPort: grpcPort,
    ttlSeconds: config.sshSessionTtlSeconds ?? sshSessionTtlFromEnv(process.env),
    maxPerToken: config.sshMaxConnectionsPerToken ?? DEFAULT_SSH_MAX_PER_TOKEN,
    maxPerSandbox: config.sshMaxConnectionsPerSandbox ?? DEFAULT_SSH_MAX_PER_SANDBOX,
    log,
    metrics,
  });
  const forward = new TcpForwardService({ ssh, router, log, metrics });
  publicServer.addService(openShellDefinition, openShellImplementation(sandboxes, exec, lifecycle, watch, log, { sessions: ssh, forward }));
  publicServer.addService(serviceDefinition('sandgate.v1.SupervisorGateway'), {
    Control: (call: ControlCall) => sessions.handleControl(call),
    ExecChannel: (call: ExecChannelCall) => sessions.handleExecChannel(call),
    TcpChannel: (call: TcpChannelCall) => sessions.handleTcpChannel(call),
  });
  peerServer.addService(serviceDefinition('sandgate.v1.Peer'), {
    KillExec: (call: Parameters<ExecService['handlePeerKill']>[0], cb: Parameters<ExecService['handlePeerKill']>[1]) => exec.handlePeerKill(call, cb),
  });
  const peerPort = await servePeerPort({
    host: config.host,
    port: config.peerPort,
    peerSecret,
    grpc: peerServer,
    onExec: (channel) => exec.servePeer(channel),
    onTcp: (channel) => forward.servePeer(channel),
    log,
  });
  const peerAddress = `${config.advertiseHost || config.host}:${peerPort.port}`;

  let worker: RunningWorker | null = null;
  if (config.workers) {
    const processors = jobProcessors({ store, router, redis, lifecycle, log, metrics });
    await scheduler.ensureReconcile();
    worker = startJobWorker(new Redis(config.redisUrl, { maxRetriesPerRequest: null }), processors, (err) =>
      log.warn('job worker error', { err: err.message }),
    );
  }

  const info = { replicaId: config.replicaId, peerAddress, grpcAddress, pid: process.pid, startedAtMs: Date.now() };
  let registered = false;
  const heartbeat = async () => {
    try {
      await replicas.heartbeat(info);
      registered = true;
    } catch (err) {
      registered = false;
      log.warn('replica heartbeat failed', { err });
    }
  };
  await heartbeat();
  const heartbeatTimer = setInterval(() => void heartbeat(), Math.max(200, Math.floor(config.ownerTtlMs / 3)));

  const http = buildHttp({
    replicaId: config.replicaId,
    metrics,
    ready: async () => {
      const pong = await redis.ping();
      const ok = pong === 'PONG' && registered;
      return { ok, detail: ok ? 'redis reachable, replica registered' : `redis=${pong} registered=${registered}` };
    },
  });
  await http.listen({ host: config.host, port: config.httpPort });
  const httpAddress = http.server.address();
  const httpPort = typeof httpAddress === 'object' && httpAddress ? httpAddress.port : config.httpPort;
  const httpUrl = `http://${config.host}:${httpPort}`;
  log.info('replica listening', { grpcAddress, peerAddress, httpUrl, supervisorEndpoint });

  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= (async () => {
      clearInterval(heartbeatTimer);
      ssh.close();
      await worker?.close();
      await sessions.drain();
      await scheduler.close().catch(() => undefined);
      await replicas.remove(config.replicaId).catch(() => undefined);
      router.close();
      peerPort.close();
      await Promise.all([shutdownGrpc(publicServer), shutdownGrpc(peerServer), http.close()]);
      redis.disconnect();
      log.info('replica stopped');
    })();
    return closing;
  };

  return { replicaId: config.replicaId, grpcAddress, httpUrl, peerAddress, close };
}

/** Cluster-wide count of processes the exec backstop had to kill (zero in a healthy system). */
export const BACKSTOP_KILLS_KEY = 'sg:metrics:exec_backstop_kills';

function jobProcessors(deps: {
  store: SandboxStore;
  router: ExecRouter;
  redis: Redis;
  lifecycle: LifecycleService;
  log: Logger;
  metrics: Metrics;
}): JobProcessors {
  return {
    deleteSandbox: (data) => deps.lifecycle.jobDelete(data),
    provisionDeadline: (data) => deps.lifecycle.jobProvisionDeadline(data),
    restart: (data) => deps.lifecycle.jobRestart(data),
    reconcile: () => deps.lifecycle.jobReconcile(),
    async execDeadline(data) {
      if (!(await deps.store.get(data.sandboxId))) return { skipped: 'sandbox gone' };
      // Throws UNAVAILABLE while no replica holds the session: BullMQ retries with backoff.
      const killed = await deps.router.killExec(data.sandboxId, data.execId);
      if (killed > 0) {
        deps.metrics.inc('sandgate_exec_backstop_kills_total', killed);
        await deps.redis.incrby(BACKSTOP_KILLS_KEY, killed);
        deps.log.warn('exec backstop killed processes past the deadline', { ...data, killed });
      }
      return { killed };
    },
  };
}

/** Waits briefly for calls to finish, then forces the rest closed. */
function shutdownGrpc(server: Server): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      server.forceShutdown();
      resolve();
    }, 2000);
    server.tryShutdown(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}

async function sharedPeerSecret(redis: Redis): Promise<string> {
  const candidate = (await import('node:crypto')).randomBytes(24).toString('base64url');
  await redis.set('sg:peer-secret', candidate, 'NX');
  return (await redis.get('sg:peer-secret')) ?? candidate;
}
