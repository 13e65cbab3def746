// `sandgate worker`: the durable job workers alone, without listeners. It holds no supervisor
// session, so everything it does to a session goes through Redis (ownership revoke) or the owner
// replica's peer port (Peer.KillExec on an authenticated peer link).
import { createRedisConnection, deleteLeftoverPeerSecret, loadRedisCa, OwnershipStore, ReplicaRegistry, resolvePeerSecret, PoolStore, SandboxLogStore, SandboxStore, type RedisClient } from '@sandgate/store';
import { createLogger, Metrics } from '@sandgate/telemetry';
import { JobScheduler, jobConnectionNames } from '@sandgate/jobs';
import type { ReplicaConfig } from './config.ts';
import { createDriver } from './replica.ts';
import { DockerDriver } from '@sandgate/compute';
import { runJobWorker } from './job-runtime.ts';
import { ExecRouter, NO_LOCAL_SESSIONS } from './relay/exec-router.ts';
import { LifecycleService } from './sandboxes/lifecycle-service.ts';
import { PoolService } from './pools/pool-service.ts';
import { loadSupervisorTls } from './tls.ts';
import { buildHttp } from './api/http.ts';
import type { AddressInfo } from 'node:net';

/** `sandgate worker`: what a worker needs of a replica's configuration, and nothing that listens. */
export interface WorkerConfig
  extends Pick<
    ReplicaConfig,
    'host' | 'redisUrl' | 'driver' | 'stateDir' | 'dockerImage' | 'ownerTtlMs' | 'provisionTimeoutMs' | 'peerSecret' | 'redisCa' | 'logLevel' | 'debugBreaks' | 'tlsCert' | 'tlsCa' | 'orphanGraceMs' | 'pendingGraceMs' | 'supervisorCompileCache'
  > {
  /** OTLP metrics export (OTEL_*): a worker has no /metrics, so its job metrics go out only this way. */
  otlpMetrics?: ReplicaConfig['otlpMetrics'];
  workerId: string;
  /** Port of its /healthz, /readyz and /metrics on `host`; null: it listens on nothing. */
  metricsPort?: number | null;
  /** What restarted supervisors dial (the load balancer): a worker has no gRPC address of its own. */
  supervisorEndpoint: string;
  /** DEBUG ONLY (the `jobs` debug fault): enqueue nothing. */
  jobsEnabled: boolean;
}

export interface RunningStandaloneWorker {
  readonly workerId: string;
  /** host:port of its /metrics, when it serves one. */
  readonly metricsAddress: string | null;
  /** Drains: stops taking jobs, lets the running ones finish, closes every connection. */
  close(): Promise<void>;
}

export async function startWorker(config: WorkerConfig): Promise<RunningStandaloneWorker> {
  const log = createLogger({ component: 'worker', worker: config.workerId }, config.logLevel);
  const supervisorTls = loadSupervisorTls(config) ?? undefined;
  const metrics = new Metrics({ serviceName: 'sandgate-worker', instanceId: config.workerId, otlp: config.otlpMetrics });
  const peerSecret = resolvePeerSecret(config.peerSecret, config.redisUrl);
  const redisTlsCa = loadRedisCa(config.redisCa);
  const redis = createRedisConnection(config.redisUrl, 'commands', { lazyConnect: true, connectionName: `sandgate:${config.workerId}`, tlsCa: redisTlsCa });
  redis.on('error', (err: Error) => log.warn('redis error', { err: err.message }));
  await redis.connect();
  if (await deleteLeftoverPeerSecret(redis)) log.warn('deleted the peer secret an older version had left in Redis (sg:peer-secret)');

  const store = new SandboxStore(redis);
  const ownership = new OwnershipStore(redis, config.ownerTtlMs);
  const replicas = new ReplicaRegistry(redis, config.ownerTtlMs);
  const driver = createDriver(config, 'worker', log);
  const scheduler = new JobScheduler(config.redisUrl, { connectionName: jobConnectionNames(config.workerId).scheduler, enabled: config.jobsEnabled, redisTlsCa });
  // It holds no supervisor session: the router always finds the owner replica in Redis and kills
  // execs there (Peer.KillExec).
  const router = new ExecRouter({ replicaId: config.workerId, sessions: NO_LOCAL_SESSIONS, ownership, replicas, peerSecret, log });
  const lifecycle = new LifecycleService({
    store,
    logs: new SandboxLogStore(redis),
    driver,
    scheduler,
    supervisorEndpoint: () => config.supervisorEndpoint,
    supervisorTls,
    sessionLive: (id) => router.sessionLive(id),
    // The session is on some replica: moving the fence makes its next renewal fail there.
    revokeSessions: (id) => ownership.revoke(id),
    provisionTimeoutMs: config.provisionTimeoutMs,
    debugBreaks: config.debugBreaks,
    log,
    metrics,
  });
  const pools = new PoolService({
    pools: new PoolStore(redis, store),
    lifecycle,
    scheduler,
    startMain: (id) => router.startMain(id),
    defaultImage: driver instanceof DockerDriver ? driver.defaultImage : 'host',
    log,
    metrics,
  });
  const worker = await runJobWorker(config.workerId, { ...config, redisTlsCa }, { redis, store, driver, scheduler, lifecycle, router, pools, log, metrics });
  // Its own /metrics, when asked: where only workers run jobs, their job metrics are scraped here.
  let http: ReturnType<typeof buildHttp> | null = null;
  let metricsAddress: string | null = null;
  if (config.metricsPort !== undefined && config.metricsPort !== null) {
    http = buildHttp({
      https: null,
      replicaId: config.workerId,
      ready: async () => ((await redis.ping()) === 'PONG' ? { ok: true, detail: 'redis answers' } : { ok: false, detail: 'redis did not answer PONG' }),
      metrics,
      debugBreaks: [...config.debugBreaks],
    });
    await http.listen({ host: config.host, port: config.metricsPort });
    metricsAddress = `${config.host}:${(http.server.address() as AddressInfo).port}`;
  }
  log.info('worker running', { driver: config.driver, supervisorEndpoint: config.supervisorEndpoint, ...(metricsAddress ? { metrics: metricsAddress } : {}) });

  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      await http?.close();
      await worker.close();
      await scheduler.close();
      router.close();
      await redis.quit().catch(() => redis.disconnect());
      await metrics.shutdown();
      log.info('worker stopped');
    })());
  return { workerId: config.workerId, metricsAddress, close };
}
