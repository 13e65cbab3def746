// N gateway replicas as separate processes (`sandgate gateway`), on one Redis. Supervisors are
// given every replica's gRPC address, as they would be given a load balancer's.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePorts } from './ports.ts';
import { Redis } from 'ioredis';
import { createRedisConnection, TokenStore } from '@sandgate/store';
import { cliEnv, credentialsFor, registerGateway, type GatewayCredentials } from './credentials.ts';
import { createCertificateAuthority, type CertificateAuthority, type PemPair } from '@sandgate/pki';
import { testRedisReplicaEnv } from './redis.ts';
import { waitFor } from './wait.ts';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const cliBin = path.join(repoRoot, 'apps/cli/bin/sandgate.js');

export interface ReplicaProcess {
  id: string;
  grpcPort: number;
  httpPort: number;
  peerPort: number;
  grpcAddress: string;
  httpUrl: string;
  proc: ChildProcess | null;
  logs: string[];
  /** Per-replica overrides (extra replicas for special cases). */
  env?: Record<string, string>;
  supervisorEndpoint?: string;
  /** This replica's own Redis URL (another ACL user, to cut it off alone); default: the cluster's. */
  redisUrl?: string;
}

export interface ClusterOptions {
  replicas?: number;
  redisUrl: string;
  env?: Record<string, string>;
  /** What supervisors dial (e.g. a load balancer); defaults to every replica's address. */
  supervisorEndpoint?: string;
  driver?: 'local' | 'docker';
  /**
   * Where replicas listen (and what clients and supervisors dial). Default 127.0.0.1. The docker
   * test uses the sandbox network's bridge address: containers are not on the host's network, so
   * they reach host listeners only there.
   */
  host?: string;
  /**
   * Serve TLS: a CA and a server certificate (localhost, 127.0.0.1 and the host) are generated,
   * replicas get --tls-cert/--tls-key/--tls-ca, and every replica's address is registered
   * (credentials.ts) with the CA, so openShellClient and runCli trust it. `{clientCa: true}`
   * also gives --client-ca (the same CA): certificates from `issueClientCertificate` are accepted.
   */
  tls?: boolean | { clientCa: true };
}

/** The TLS material of a cluster started with `tls`. */
export interface ClusterTls {
  ca: CertificateAuthority;
  /** Files in a directory of the cluster's own. */
  caFile: string;
  certFile: string;
  keyFile: string;
  /** --client-ca was given (the same CA). */
  clientCa: boolean;
  /** The name the server certificate is checked for. */
  servername: string;
}

export class Cluster {
  readonly replicas: ReplicaProcess[] = [];
  readonly stateDir: string;
  readonly redisUrl: string;
  private readonly env: Record<string, string>;
  private readonly endpointOverride: string | undefined;
  driver: 'local' | 'docker' = 'local';
  host = '127.0.0.1';
  /**
   * What clients present to every replica (registered for each replica's address, so
   * openShellClient and runCli use it unasked): an admin API token of workspace `default`, and
   * with `tls` the CA and name.
   */
  readonly credentials: GatewayCredentials = {};
  /** Set when started with `tls`. */
  tls: ClusterTls | null = null;
  private tlsDir: string | null = null;

  private constructor(redisUrl: string, env: Record<string, string>, endpointOverride: string | undefined) {
    this.redisUrl = redisUrl;
    this.env = env;
    this.endpointOverride = endpointOverride;
    this.stateDir = mkdtempSync(path.join(os.tmpdir(), 'sg-state-'));
  }

  static async start(opts: ClusterOptions): Promise<Cluster> {
    const cluster = new Cluster(opts.redisUrl, opts.env ?? {}, opts.supervisorEndpoint);
    cluster.driver = opts.driver ?? 'local';
    cluster.host = opts.host ?? '127.0.0.1';
    if (opts.tls) await cluster.makeTls(opts.tls !== true);
    const n = opts.replicas ?? 3;
    cluster.credentials.token = await cluster.tokenFor('default', 'admin', 'test harness');
    Object.assign(cluster.credentials, cluster.tlsCredentials());
    // A free port is only free until someone binds it: another test or chaos run on the machine
    // can take one between freePorts and the replica's bind (EADDRINUSE). The whole start is then
    // tried again on fresh ports, since every replica's supervisor endpoint names all of them.
    for (let attempt = 1; ; attempt++) {
      const ports = await freePorts(n * 3);
      cluster.replicas.length = 0;
      for (let i = 0; i < n; i++) {
        const [grpcPort, httpPort, peerPort] = [ports[i * 3]!, ports[i * 3 + 1]!, ports[i * 3 + 2]!];
        cluster.replicas.push({
          id: `r${i}`,
          grpcPort,
          httpPort,
          peerPort,
          grpcAddress: `${cluster.host}:${grpcPort}`,
          httpUrl: `${cluster.tls ? 'https' : 'http'}://${cluster.host}:${httpPort}`,
          proc: null,
          logs: [],
        });
      }
      const started = await Promise.allSettled(cluster.replicas.map((_, i) => cluster.startReplica(i)));
      const failures = started.filter((x): x is PromiseRejectedResult => x.status === 'rejected').map((x) => String(x.reason));
      if (failures.length === 0) return cluster;
      const portTaken = failures.every((f) => f.includes('EADDRINUSE'));
      await Promise.all(cluster.replicas.map((r) => (r.proc ? stopped(r.proc) : undefined)));
      if (!portTaken || attempt === 3) throw new Error(failures.join('\n'));
      console.warn(`cluster start, attempt ${attempt}: a port was taken before a replica bound it; starting again on fresh ports`);
    }
  }

  /** The cluster's admin API token (every test client sends it unless told otherwise). */
  get token(): string {
    return this.credentials.token!;
  }

  /** A new API token of `workspace` with `role`, made in the cluster's Redis as `sandgate token create` does. */
  async tokenFor(workspace: string, role: 'admin' | 'member' = 'member', name = ''): Promise<string> {
    // As the replicas connect (a Sentinel address too).
    const redis = createRedisConnection(this.redisUrl, 'commands');
    try {
      return (await new TokenStore(redis).create({ workspace, role, name })).token;
    } finally {
      redis.disconnect();
    }
  }

  /** Every regular replica's gRPC address (what supervisors dial, as they would a load balancer). */
  get supervisorEndpoint(): string {
    if (this.endpointOverride) return this.endpointOverride;
    return this.replicas
      .filter((r) => r.supervisorEndpoint === undefined)
      .map((r) => r.grpcAddress)
      .join(',');
  }

  /**
   * Adds one more replica (e.g. with a bogus supervisor endpoint) and starts it; returns its index.
   * `ownSupervisors`: the supervisors of sandboxes it creates dial it alone, so it holds their
   * sessions and records their reports (a replica started with a debug fault, beside guarded ones).
   */
  async addReplica(opts: { env?: Record<string, string>; supervisorEndpoint?: string; ownSupervisors?: boolean; redisUrl?: string } = {}): Promise<number> {
    const [grpcPort, httpPort, peerPort] = await freePorts(3);
    const i = this.replicas.length;
    this.replicas.push({
      id: `r${i}`,
      grpcPort: grpcPort!,
      httpPort: httpPort!,
      peerPort: peerPort!,
      grpcAddress: `${this.host}:${grpcPort}`,
      httpUrl: `${this.tls ? 'https' : 'http'}://${this.host}:${httpPort}`,
      proc: null,
      logs: [],
      env: opts.env,
      supervisorEndpoint: opts.ownSupervisors ? `${this.host}:${grpcPort}` : opts.supervisorEndpoint,
      redisUrl: opts.redisUrl,
    });
    await this.startReplica(i);
    return i;
  }

  /** (Re)starts replica i on its ports and waits until it is ready. */
  async startReplica(i: number): Promise<void> {
    const r = this.replicas[i]!;
    registerGateway(r.grpcAddress, this.credentials);
    const args = [
      cliBin,
      'gateway',
      '--host', this.host,
      '--grpc-port', String(r.grpcPort),
      '--http-port', String(r.httpPort),
      '--peer-port', String(r.peerPort),
      '--redis', r.redisUrl ?? this.redisUrl,
      '--replica-id', r.id,
      '--driver', this.driver,
      '--state-dir', this.stateDir,
      '--supervisor-endpoint', r.supervisorEndpoint ?? this.supervisorEndpoint,
      ...this.tlsArgs(),
    ];
    this.registerTls(r.grpcAddress);
    const proc = spawn(process.execPath, args, {
      // testRedisReplicaEnv: the Redis mode's settings (a Sentinel group's WAIT), as a deployment on that Redis sets them.
      env: { ...replicaBaseEnv(), ...testRedisReplicaEnv(this.redisUrl), SANDGATE_LOG_LEVEL: 'info', ...this.env, ...r.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    r.proc = proc;
    const collect = (chunk: Buffer) => {
      r.logs.push(chunk.toString());
      if (r.logs.length > 20000) r.logs.splice(0, 10000);
    };
    proc.stdout!.on('data', collect);
    proc.stderr!.on('data', collect);
    let lastReady = '';
    await waitFor(`replica ${r.id} ready`, async () => {
      if (proc.exitCode !== null) throw new Error(`replica ${r.id} exited ${proc.exitCode}: ${r.logs.join('').slice(-2000)}`);
      const res = await this.httpGet(r.httpUrl + '/readyz').catch(() => null);
      if (res) lastReady = res.body;
      return res?.status === 200;
    }, 90_000).catch((err: unknown) => {
      // generous timeout: CI machines with 2 cores run replicas, sandboxes and the workload at once.
      // A replica that did not come up is killed, so a caller may start it again.
      proc.kill('SIGKILL');
      r.proc = null;
      throw new Error(`${String(err)}; last /readyz: ${lastReady || 'no answer'}; log tail:\n${r.logs.join('').slice(-3000)}`);
    });
  }

  /** GET on a replica's HTTP port (https with the cluster's CA when it serves TLS: fetch cannot take a CA). */
  httpGet(url: string): Promise<{ status: number; body: string }> {
    return httpGet(url, this.tls ? { ca: readFileSync(this.tls.caFile), servername: this.tls.servername } : undefined);
  }

  /** A client certificate of the cluster's CA (mTLS), as buffers and files. */
  async issueClientCertificate(commonName: string, organizationalUnits: string[] = []): Promise<PemPair & { certFile: string; keyFile: string }> {
    if (!this.tls || !this.tlsDir) throw new Error('issueClientCertificate: the cluster was started without tls');
    const pair = await this.tls.ca.issue({ commonName, organizationalUnits, usage: 'client' });
    const base = path.join(this.tlsDir, `client-${commonName.replace(/[^A-Za-z0-9_-]/g, '_')}`);
    writeFileSync(`${base}.pem`, pair.cert);
    writeFileSync(`${base}-key.pem`, pair.key, { mode: 0o600 });
    return { ...pair, certFile: `${base}.pem`, keyFile: `${base}-key.pem` };
  }

  /** The TLS credentials a client needs for this cluster (CA and name), or none (plaintext). */
  tlsCredentials(): GatewayCredentials {
    if (!this.tls) return {};
    return { ca: readFileSync(this.tls.caFile), caFile: this.tls.caFile, servername: this.tls.servername };
  }

  private async makeTls(clientCa: boolean): Promise<void> {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'sg-tls-'));
    this.tlsDir = dir;
    const ca = await createCertificateAuthority('sandgate test CA');
    const ips = [...new Set(['127.0.0.1', this.host].filter((h) => /^[\d.]+$|:/.test(h)))];
    const dns = [...new Set(['localhost', ...[this.host].filter((h) => !/^[\d.]+$|:/.test(h))])];
    const server = await ca.issue({ commonName: 'sandgate test gateway', dnsNames: dns, ipAddresses: ips, usage: 'server' });
    const caFile = path.join(dir, 'ca.pem');
    const certFile = path.join(dir, 'server.pem');
    const keyFile = path.join(dir, 'server-key.pem');
    writeFileSync(caFile, ca.cert);
    writeFileSync(certFile, server.cert);
    writeFileSync(keyFile, server.key, { mode: 0o600 });
    this.tls = { ca, caFile, certFile, keyFile, clientCa, servername: 'localhost' };
  }

  private tlsArgs(): string[] {
    if (!this.tls) return [];
    return [
      '--tls-cert', this.tls.certFile,
      '--tls-key', this.tls.keyFile,
      '--tls-ca', this.tls.caFile,
      ...(this.tls.clientCa ? ['--client-ca', this.tls.caFile] : []),
    ];
  }

  /** Adds the CA to what is registered for `address` (a token the auth side registered stays). */
  registerTls(address: string): void {
    if (!this.tls) return;
    registerGateway(address, { ...credentialsFor(address), ...this.tlsCredentials() });
  }

  /** Sends a signal to replica i and waits for the process to exit. */
  async signal(i: number, sig: NodeJS.Signals): Promise<void> {
    const proc = this.replicas[i]!.proc;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((res) => proc.once('exit', res));
    proc.kill(sig);
    await exited;
    this.replicas[i]!.proc = null;
  }

  /** Every replica's log so far (for failure messages). */
  logs(): string {
    return this.replicas.map((r) => `--- ${r.id}\n${r.logs.join('').slice(-4000)}`).join('\n');
  }

  async stop(): Promise<void> {
    await Promise.all(this.replicas.map((_, i) => this.signal(i, 'SIGTERM')));
  }

  /** Removes the state dir (after sandboxes were deleted or killed). */
  cleanup(): void {
    // A sandbox a test left behind still has its disk (a loop-mounted /sandbox) mounted in the
    // state dir: detach it first, or rmSync would empty it and then fail on the mount point.
    for (const mountPoint of mountsUnder(this.stateDir)) spawnSync('umount', ['-l', mountPoint]);
    rmSync(this.stateDir, { recursive: true, force: true });
    if (this.tlsDir) rmSync(this.tlsDir, { recursive: true, force: true });
  }
}

/** GET over http or https (with `tls`: trusting that CA, checking that name). */
/** SIGKILLs a process and resolves once it has exited. */
function stopped(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    proc.once('exit', () => resolve());
    proc.kill('SIGKILL');
  });
}

export function httpGet(url: string, tls?: { ca: Buffer; servername?: string }): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    if (u.protocol === 'http:') {
      fetch(url).then(async (res) => resolve({ status: res.status, body: await res.text() }), reject);
      return;
    }
    const req = https.get(
      { host: u.hostname.replace(/^\[|\]$/g, ''), port: u.port, path: u.pathname + u.search, ca: tls?.ca, servername: tls?.servername, timeout: 5000 },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`GET ${url} timed out`)));
    req.on('error', reject);
  });
}

/**
 * What a replica inherits from the test process: only what a process needs to run (PATH, HOME,
 * locale, temp dir, the Docker endpoint). Never the whole environment: an exported SANDGATE_*
 * variable (a debug fault, a tuning knob) would silently change every replica of the suite.
 * Everything else a test wants a replica to see, it passes explicitly (`env`).
 */
export function replicaBaseEnv(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of ['PATH', 'HOME', 'USER', 'LANG', 'LC_ALL', 'TMPDIR', 'TZ', 'DOCKER_HOST', 'DOCKER_CONFIG']) {
    const value = process.env[name];
    if (value !== undefined) out[name] = value;
  }
  return out;
}

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: Buffer;
  stderr: string;
}

/** Runs the CLI against a gateway endpoint. `input` is piped to its stdin (or /dev/null). */
export function runCli(args: string[], opts: { gateway: string; input?: Buffer | string; env?: Record<string, string>; timeoutMs?: number }): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, [cliBin, ...args], {
      // No client config file of the machine's (a `sandgate up` someone ran) leaks into a test.
      env: {
        ...process.env,
        XDG_CONFIG_HOME: path.join(os.tmpdir(), 'sg-no-client-config'),
        SANDGATE_CONFIG: undefined,
        SANDGATE_GATEWAY: opts.gateway,
        ...cliEnv(credentialsFor(opts.gateway)),
        ...opts.env,
      },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    let err = '';
    proc.stdout.on('data', (c: Buffer) => out.push(c));
    proc.stderr.on('data', (c: Buffer) => (err += c.toString()));
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`sandgate ${args.join(' ')} timed out; stderr: ${err}`));
    }, opts.timeoutMs ?? 60_000);
    // 'close' fires after the process exited and its pipes drained.
    proc.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout: Buffer.concat(out), stderr: err });
    });
    proc.stdin.on('error', () => undefined);
    if (opts.input !== undefined) proc.stdin.end(opts.input);
    else proc.stdin.end();
  });
}

export interface WorkerProcess {
  id: string;
  proc: ChildProcess;
  logs: string[];
  /** host:port of its /metrics (started with SANDGATE_WORKER_METRICS_PORT), else null. */
  metricsAddress: string | null;
  /** Sends a signal and resolves once the process exited. */
  signal(sig: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Starts `sandgate worker` (the durable job workers alone) on the cluster's Redis, driver and
 * state dir; resolves once it is taking jobs. For clusters whose replicas run without workers
 * (env SANDGATE_WORKERS=0).
 */
export async function startWorker(cluster: Cluster, id: string, env: Record<string, string> = {}): Promise<WorkerProcess> {
  const args = [
    cliBin,
    'worker',
    '--redis', cluster.redisUrl,
    '--worker-id', id,
    '--driver', cluster.driver,
    '--state-dir', cluster.stateDir,
    '--supervisor-endpoint', cluster.supervisorEndpoint,
    // The supervisors of sandboxes it restarts verify the gateway like any other.
    ...(cluster.tls ? ['--tls-cert', cluster.tls.certFile, '--tls-ca', cluster.tls.caFile] : []),
  ];
  const proc = spawn(process.execPath, args, { env: { ...process.env, ...testRedisReplicaEnv(cluster.redisUrl), SANDGATE_LOG_LEVEL: 'info', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const logs: string[] = [];
  const collect = (chunk: Buffer) => {
    logs.push(chunk.toString());
    if (logs.length > 20000) logs.splice(0, 10000);
  };
  proc.stdout!.on('data', collect);
  proc.stderr!.on('data', collect);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    proc.once('exit', (code, signal) => resolve({ code, signal })),
  );
  await waitFor(`worker ${id} running`, () => {
    if (proc.exitCode !== null) throw new Error(`worker ${id} exited ${proc.exitCode}: ${logs.join('').slice(-2000)}`);
    return logs.join('').includes(`sandgate worker ${id} `);
  }, 20_000, 50);
  const banner = logs.join('').match(new RegExp(`sandgate worker ${id} [^\\n]*metrics=(\\S+)`));
  return {
    id,
    proc,
    logs,
    metricsAddress: banner?.[1] ?? null,
    signal: (sig) => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(sig);
      return exited;
    },
  };
}

/** Mount points at or below `dir` (this process's mount namespace), deepest first. */
function mountsUnder(dir: string): string[] {
  const out: string[] = [];
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const mountPoint = (line.split(' ')[4] ?? '').replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8)));
    if (mountPoint === dir || mountPoint.startsWith(`${dir}/`)) out.push(mountPoint);
  }
  return out.sort((a, b) => b.length - a.length);
}
