// One gateway replica: the public gRPC listener (OpenShell API + supervisor protocol), the peer
// listener (replica-to-replica relay), the HTTP listener, and the loops that keep its Redis
// facts fresh. Stateless apart from the supervisor sessions it holds, which any other replica
// can take over.
import { Server, ServerCredentials } from '@grpc/grpc-js';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { loopbackHost, serviceDefinition } from '@sandgate/protocols';
import {
  ClusterCounter,
  ClusterCounters,
  PhaseCounts,
  createRedisConnection,
  deleteLeftoverPeerSecret,
  loadRedisCa,
  OwnershipStore,
  ReplicaRegistry,
  ReplicationGuard,
  resolvePeerSecret,
  SandboxFeed,
  SandboxLogStore,
  SandboxStore,
  SandboxUsageStore,
  ServiceEndpointStore,
  SshSessionStore,
  timeRedisCommands,
  WorkspaceExecSlots,
  WorkspaceStore,
  PoolStore,
  type RedisClient,
} from '@sandgate/store';
import { DockerDriver, LocalDriver, type ComputeDriver } from '@sandgate/compute';
import { createLogger, Metrics, type Logger } from '@sandgate/telemetry';
import { JobScheduler, jobConnectionNames, type RunningWorker } from '@sandgate/jobs';
import type { ReplicaConfig, RunningReplica } from './config.ts';
import { SessionRegistry, type ControlCall, type ExecChannelCall, type TcpChannelCall } from './sessions/sessions.ts';
import { ExecRouter } from './relay/exec-router.ts';
import { servePeerPort } from './relay/peer-port.ts';
import { ExecService } from './exec/exec-service.ts';
import { SandboxService } from './sandboxes/sandbox-service.ts';
import { PoolService } from './pools/pool-service.ts';
import { openShellDefinition, openShellImplementation, sandgateDefinition, sandgateImplementation } from './api/openshell-service.ts';
import { rpcMetricsInterceptor } from './api/rpc-metrics.ts';
import { SandboxMetrics } from './sandboxes/sandbox-metrics.ts';
import type { Authenticator } from './auth/authenticator.ts';
import { authenticatorFor } from './auth/chain.ts';
import { WorkspaceService } from './workspaces/workspace-service.ts';
import { WorkspaceAccess } from './api/access.ts';
import { buildHttp } from './api/http.ts';
import { registerRest } from './api/rest/index.ts';
import { FileService } from './files/file-service.ts';
import { LifecycleService } from './sandboxes/lifecycle-service.ts';
import { WatchService } from './sandboxes/watch-service.ts';
import { ConfigService } from './sandboxes/config-service.ts';
import { gatewayHostForResponse, SshService } from './ssh/ssh-service.ts';
import { TcpForwardService } from './ssh/tcp-forward.ts';
import { announceDebugBreaks } from './debug-breaks.ts';
import { runJobWorker } from './job-runtime.ts';
import { grpcServerCredentials, httpsOptions, loadServerTls, warnIfPlaintext } from './tls.ts';
import { ServiceEndpointService } from './services/service-endpoints.ts';
import { ServiceLinks } from './services/service-links.ts';
import { ServiceProxy } from './services/service-proxy.ts';

const supervisorEntry = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../supervisor/src/main.ts');

// Channelz bookkeeping costs every call and message; nothing here reads it.
/** How long /readyz waits for Redis to answer PING before it says not ready. */
const READY_PING_TIMEOUT_MS = 2000;

const GRPC_SERVER_OPTIONS = {
  'grpc.enable_channelz': 0,
  'grpc.keepalive_time_ms': 10_000,
  'grpc.keepalive_timeout_ms': 5_000,
  'grpc.keepalive_permit_without_calls': 1,
};

function bindGrpc(server: Server, host: string, port: number, credentials: ServerCredentials = ServerCredentials.createInsecure()): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(`${host}:${port}`, credentials, (err, bound) => (err ? reject(err) : resolve(bound)));
  });
}

/**
 * With the docker driver, supervisors live on sandgate's bridge network and reach a loopback
 * gateway through the bridge's host address (the driver rewrites loopback endpoints to it). A
 * replica bound to loopback therefore also listens there, on the same port: `sandgate up
 * --driver docker` works without a --host, and the gateway is still not on any outside
 * interface. (Behind a load balancer, the balancer must listen there: deploy/README.md.)
 */
async function listenForDockerSupervisors(server: Server, driver: ComputeDriver, host: string, port: number, credentials: ServerCredentials, log: Logger): Promise<void> {
  if (!(driver instanceof DockerDriver) || loopbackHost(host) === null) return;
  try {
    const address = await driver.supervisorAddress();
    await bindGrpc(server, address, port, credentials);
    log.info('listening for docker supervisors on the sandbox network', { address: `${address}:${port}` });
  } catch (err) {
    // No engine yet: creates say so themselves; this replica just is not reachable from containers.
    log.warn('cannot listen on the docker sandbox network; docker sandboxes will not reach this replica directly', { err });
  }
}

/**
 * `role`: a replica's docker driver keeps `dockerNetnsSpares` network namespaces ready
 * (docker/netns-holders.ts), its local driver `localDiskSpares` disks (disk-spares.ts); the
 * worker's none, since it only restarts sandboxes, which keep theirs.
 */
export function createDriver(
  config: Pick<ReplicaConfig, 'driver' | 'stateDir' | 'dockerImage' | 'supervisorCompileCache'> & Partial<Pick<ReplicaConfig, 'dockerNetnsSpares' | 'localDiskSpares'>>,
  role: 'replica' | 'worker' = 'replica',
  log?: Logger,
): ComputeDriver {
  if (config.driver === 'local') {
    return new LocalDriver({
      stateDir: config.stateDir,
      supervisorEntry,
      compileCache: config.supervisorCompileCache,
      diskSpares: role === 'replica' ? (config.localDiskSpares ?? 0) : 0,
      warn: log ? (msg, fields) => log.warn(msg, fields) : undefined,
    });
  }
  if (config.driver === 'docker') {
    return new DockerDriver({
      stateDir: config.stateDir,
      supervisorEntry,
      // The supervisor and its node_modules are bind-mounted read-only from this checkout.
      repoRoot: path.resolve(path.dirname(supervisorEntry), '../../..'),
      defaultImage: config.dockerImage || undefined,
      compileCache: config.supervisorCompileCache,
      netnsSpares: role === 'replica' ? (config.dockerNetnsSpares ?? 0) : 0,
      warn: log ? (msg, fields) => log.warn(msg, fields) : undefined,
    });
  }
  throw new Error(`unknown driver '${config.driver}': use local or docker`);
}

export async function startReplica(config: ReplicaConfig, opts: { authenticator?: Authenticator } = {}): Promise<RunningReplica> {
  const log = createLogger({ component: 'gateway', replica: config.replicaId }, config.logLevel);
  // Before anything connects: a bad certificate or key is a start-up error naming the flag.
  const tls = loadServerTls(config);
  warnIfPlaintext(config.host, tls, log);
  const grpcCredentials = grpcServerCredentials(tls);
  const metrics = new Metrics({ serviceName: 'sandgate-gateway', instanceId: config.replicaId, otlp: config.otlpMetrics });
  const stopDebugReminder = announceDebugBreaks(config.debugBreaks, log, metrics);
  // Before anything connects: a replica without a peer secret must not start (and says how to fix it).
  const peerSecret = resolvePeerSecret(config.peerSecret, config.redisUrl);
  const redisTlsCa = loadRedisCa(config.redisCa);
  const redis = createRedisConnection(config.redisUrl, 'commands', { lazyConnect: true, tlsCa: redisTlsCa });
  redis.on('error', (err: Error) => log.warn('redis error', { err: err.message }));
  timeRedisCommands(redis, (operation, seconds) =>
    metrics.record('db.client.operation.duration', seconds, { 'db.system.name': 'redis', 'db.operation.name': operation }),
  );
  await redis.connect();
  if (await deleteLeftoverPeerSecret(redis)) log.warn('deleted the peer secret an older version had left in Redis (sg:peer-secret)');

  const store = new SandboxStore(redis);
  const workspaceStore = new WorkspaceStore(redis);
  await workspaceStore.ensureDefault();
  const workspaces = new WorkspaceAccess(workspaceStore);
  const execSlots = new WorkspaceExecSlots(redis);
  const ownership = new OwnershipStore(redis, config.ownerTtlMs, { fencing: !config.debugBreaks.has('fencing') });
  const replicas = new ReplicaRegistry(redis, config.ownerTtlMs);
  const driver = createDriver(config, 'replica', log);
  // On `redis`, the connection every acknowledged write goes through (WAIT counts per connection).
  const replication = new ReplicationGuard(redis, {
    minReplicas: config.debugBreaks.has('redis-wait') ? 0 : config.redisMinReplicas,
    timeoutMs: config.redisWaitTimeoutMs,
  });

  const logs = new SandboxLogStore(redis);
  // BullMQ gets its own connections (workers block on Redis), named after the replica.
  const scheduler = new JobScheduler(config.redisUrl, {
    connectionName: jobConnectionNames(config.replicaId).scheduler,
    enabled: !config.debugBreaks.has('jobs'),
    redisTlsCa,
  });
  scheduler.reportDepth(metrics);
  // Sessions report to the lifecycle, which asks the router about sessions: bound late.
  let lifecycle: LifecycleService | undefined;
  const sessions = new SessionRegistry({
    replicaId: config.replicaId,
    store,
    ownership,
    heartbeatIntervalMs: config.heartbeatIntervalMs,
    heartbeatMisses: config.heartbeatMisses,
    maxExecsPerSandbox: config.maxExecsPerSandbox,
    disconnectGraceMs: 5_000,
    replication,
    reports: {
      mainExit: (id, instance, code, oomKilled) => lifecycle!.mainProcessExited(id, instance, code, oomKilled),
      terminalFinal: (id, instance) => lifecycle!.terminalFinal(id, instance),
    },
    log,
    metrics,
  });
  const router = new ExecRouter({ replicaId: config.replicaId, sessions, ownership, replicas, peerSecret, log, debugBreaks: config.debugBreaks });
  const exec = new ExecService({
    store,
    replicaId: config.replicaId,
    router,
    scheduler,
    log,
    metrics,
    debugBreaks: config.debugBreaks,
    note: (id, message, level) => lifecycle?.note(id, message, level),
    workspaces,
    execSlots,
    maxExecsPerWorkspace: config.maxExecsPerWorkspace,
  });

  // Before any listener: an unusable OIDC or client-CA setting stops the start. A test may hand
  // in its own authenticator instead.
  const authenticator = opts.authenticator ?? authenticatorFor(config, { redis, log });
  const publicServer = new Server({ ...GRPC_SERVER_OPTIONS, interceptors: [rpcMetricsInterceptor(metrics)] });
  const grpcPort = await bindGrpc(publicServer, config.host, config.grpcPort, grpcCredentials);
  const grpcAddress = `${config.host}:${grpcPort}`;
  await listenForDockerSupervisors(publicServer, driver, config.host, grpcPort, grpcCredentials, log);
  const supervisorEndpoint = config.supervisorEndpoint || grpcAddress;

  lifecycle = new LifecycleService({
    store,
    logs,
    driver,
    scheduler,
    supervisorEndpoint: () => supervisorEndpoint,
    supervisorTls: tls?.supervisor,
    sessionLive: (id) => router.sessionLive(id),
    revokeSessions: async (id, reason) => {
      await ownership.revoke(id);
      await sessions.drop(id, reason);
    },
    provisionTimeoutMs: config.provisionTimeoutMs,
    debugBreaks: config.debugBreaks,
    workspaces,
    replication,
    log,
    metrics,
  });
  const defaultImage = driver instanceof DockerDriver ? driver.defaultImage : 'host';
  const pools = new PoolService({
    pools: new PoolStore(redis, store),
    lifecycle,
    scheduler,
    startMain: (id) => router.startMain(id),
    defaultImage,
    replication,
    log,
    metrics,
  });
  const sandboxes = new SandboxService({
    store,
    driver,
    defaultImage,
    pools,
    supervisorEndpoint: () => supervisorEndpoint,
    lifecycle,
    workspaces,
    maxSandboxesPerWorkspace: config.maxSandboxesPerWorkspace,
    replication,
    log,
    metrics,
  });
  const watch = new WatchService({ feed: new SandboxFeed(redis), store, logs, workspaces, log });
  const ssh = new SshService({
    store,
    sessions: new SshSessionStore(redis),
    sessionLive: (id) => router.sessionLive(id),
    gatewayHost: gatewayHostForResponse(config.advertiseHost || config.host),
    gatewayPort: grpcPort,
    gatewayScheme: tls ? 'https' : 'http',
    ttlSeconds: config.sshSessionTtlSeconds,
    maxPerToken: config.sshMaxConnectionsPerToken,
    maxPerSandbox: config.sshMaxConnectionsPerSandbox,
    workspaces,
    log,
    metrics,
  });
  const forward = new TcpForwardService({ ssh, router, log, metrics, debugBreaks: config.debugBreaks });
  const configService = new ConfigService({
    store,
    pushPolicy: (id, revision) => router.pushPolicy(id, revision),
    pushPolicyLocal: (id, revision) => sessions.pushPolicy(id, revision),
    workspaces,
    log,
  });
  const door = { workspaces: new WorkspaceService({ workspaces: workspaceStore, log }), driverName: driver.name };
  // Exposed services: URLs name the public scheme and port of the HTTP port (a load balancer's
  // when configured, else this replica's own, known once it listens: read per response).
  let ownHttpPort = config.httpPort;
  const serviceLinks = new ServiceLinks(peerSecret);
  const serviceScheme = config.servicePublicScheme || (tls ? 'https' : 'http');
  const services = new ServiceEndpointService({
    endpoints: new ServiceEndpointStore(redis),
    store,
    workspaceStore,
    workspaces,
    links: serviceLinks,
    urlBase: () => ({ domain: config.serviceDomain, scheme: serviceScheme, port: config.servicePublicPort || ownHttpPort }),
    note: (id, message) => lifecycle!.note(id, message),
    log,
  });
  publicServer.addService(
    openShellDefinition,
    openShellImplementation(authenticator, sandboxes, exec, lifecycle, watch, log, { sessions: ssh, forward }, configService, door, services),
  );
  const sandboxMetrics = new SandboxMetrics({
    replicaId: config.replicaId,
    store,
    phaseCounts: new PhaseCounts(redis),
    usage: new SandboxUsageStore(redis),
    driver,
    owned: () => sessions.ownedSandboxIds(),
    workspaces,
    metrics,
    log,
  });
  sandboxMetrics.start();
  const files = new FileService({ store, router, workspaces, log });
  publicServer.addService(sandgateDefinition, sandgateImplementation(authenticator, log, sandboxMetrics, services, files, pools));
  publicServer.addService(serviceDefinition('sandgate.v1.SupervisorGateway'), {
    Control: (call: ControlCall) => sessions.handleControl(call),
    ExecChannel: (call: ExecChannelCall) => sessions.handleExecChannel(call),
    TcpChannel: (call: TcpChannelCall) => sessions.handleTcpChannel(call),
  });
  const peerPort = await servePeerPort({
    host: config.host,
    port: config.peerPort,
    replicaId: config.replicaId,
    peerSecret,
    onExec: (channel) => exec.servePeer(channel),
    onTcp: (channel) => forward.servePeer(channel),
    calls: {
      KillExec: (request) => exec.handlePeerKill(request),
      PushPolicy: (request) => configService.handlePeerPushPolicy(request),
      StartMain: async (request) => ({ connected: (await sessions.startMain(request.sandbox_id ?? '')) === 'started' }),
    },
    log,
    metrics,
  });
  const peerAddress = `${config.advertiseHost || config.host}:${peerPort.port}`;

  let worker: RunningWorker | null = null;
  if (config.workers) {
    worker = await runJobWorker(config.replicaId, { ...config, redisTlsCa }, { redis, store, driver, scheduler, lifecycle, router, pools, log, metrics });
  }

  const info = { replicaId: config.replicaId, peerAddress, grpcAddress, pid: process.pid, startedAtMs: Date.now() };
  let registered = false;
  // Heartbeats can overlap while Redis fails over (one can wait seconds for a reconnect), and they
  // settle in any order: only the newest one to settle may set `registered`, or an old failure
  // arriving after a newer success would turn /readyz back to "not ready" on a healthy Redis.
  let heartbeatsSent = 0;
  let newestSettled = 0;
  const heartbeat = async () => {
    const sent = ++heartbeatsSent;
    const ok = await replicas.heartbeat(info).then(
      () => true,
      (err: unknown) => {
        log.warn('replica heartbeat failed', { err });
        return false;
      },
    );
    if (sent < newestSettled) return;
    newestSettled = sent;
    registered = ok;
  };
  await heartbeat();
  // Redis reachability as a metric (what /readyz also checks): Prometheus cannot read /readyz,
  // and the alert SandgateRedisUnreachable (deploy/prometheus/alerts.yml) fires on 0.
  metrics.gauge('sandgate_redis_up', () => (registered ? 1 : 0));
  const heartbeatTimer = setInterval(() => void heartbeat(), Math.max(200, Math.floor(config.ownerTtlMs / 3)));

  const http = buildHttp({
    https: httpsOptions(tls),
    replicaId: config.replicaId,
    metrics,
    debugBreaks: [...config.debugBreaks],
    serviceProxy: new ServiceProxy({
      services,
      links: serviceLinks,
      authenticator,
      workspaces,
      router,
      domain: config.serviceDomain,
      secureCookies: serviceScheme === 'https',
      log,
      metrics,
    }),
    ready: async () => {
      // Bounded: a primary frozen mid-failover holds a PING until the Sentinels move us off it,
      // and a probe that hangs tells a load balancer nothing.
      const pong = await Promise.race([redis.ping(), sleep(READY_PING_TIMEOUT_MS).then(() => `no answer within ${READY_PING_TIMEOUT_MS} ms`)]);
      const ok = pong === 'PONG' && registered;
      return { ok, detail: ok ? 'redis reachable, replica registered' : `redis=${pong} registered=${registered}` };
    },
  });
  await registerRest(http, { authenticator, sandboxes, exec, lifecycle, watch, ssh, router, store, workspaces, services, log, metrics, files, pools });
  await http.listen({ host: config.host, port: config.httpPort });
  const httpAddress = http.server.address();
  const httpPort = typeof httpAddress === 'object' && httpAddress ? httpAddress.port : config.httpPort;
  ownHttpPort = httpPort;
  const httpUrl = `${tls ? 'https' : 'http'}://${urlHost(config.host)}:${httpPort}`;
  log.info('replica listening', { grpcAddress, peerAddress, httpUrl, supervisorEndpoint, tls: tls !== null, mtls: Boolean(tls?.clientCa) });

  // A graceful stop, bounded: with Redis gone, releasing sessions, closing BullMQ and
  // deregistering can each wait on reconnects without end, and an operator's SIGTERM must still
  // end the process. Past drainTimeoutMs everything left is dropped; the sessions' ownership keys
  // and the replica's registration expire on their own (ownerTtlMs) and the supervisors reconnect
  // elsewhere, as after a crash.
  const abort = () => {
    worker?.abort();
    scheduler.abort();
    router.close();
    peerPort.close();
    publicServer.forceShutdown();
    http.server.closeAllConnections();
    void http.close().catch(() => undefined);
    redis.disconnect();
  };
  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= (async () => {
      const deadline = new AbortController();
      const outcome = await Promise.race([
        drain().then(() => 'drained' as const),
        sleep(config.drainTimeoutMs, 'deadline' as const, { signal: deadline.signal }).catch(() => 'drained' as const),
      ]);
      deadline.abort();
      if (outcome === 'deadline') {
        log.warn('drain deadline passed: dropping what is left (the sessions\' keys expire on their own)', { drainTimeoutMs: config.drainTimeoutMs });
        abort();
      }
      log.info('replica stopped', { drained: outcome === 'drained' });
    })();
    return closing;
  };
  const drain = async () => {
    clearInterval(heartbeatTimer);
    stopDebugReminder();
    sandboxMetrics.close();
    ssh.close();
    execSlots.close();
    await worker?.close();
    await sessions.drain();
    await scheduler.close().catch(() => undefined);
    await replicas.remove(config.replicaId).catch(() => undefined);
    router.close();
    peerPort.close();
    await Promise.all([shutdownGrpc(publicServer), http.close()]);
    redis.disconnect();
    await driver.close?.().catch(() => undefined);
    await metrics.shutdown();
  };

  return { replicaId: config.replicaId, grpcAddress, httpUrl, peerAddress, close };
}

/** A host as a URL spells it: an IPv6 address in brackets. */
function urlHost(host: string): string {
  return host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
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
