// haproxy in front of the replicas, as a production load balancer would be: TCP mode (gRPC is
// HTTP/2 end to end), health checks on /healthz, sessions to a backend that goes down are shut
// so clients and supervisors reconnect to a live replica. Liveness, not /readyz: a Redis restart
// makes every replica not ready at once, and the balancer would cut every session on every one.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { forgetGateway, registerGateway, type GatewayCredentials } from './credentials.ts';
import { deleteAllSandboxes } from './sandbox.ts';
import { waitFor } from './wait.ts';

export interface HaproxyBackend {
  name: string;
  grpcPort: number;
  httpPort: number;
}

export interface ServerStat {
  backend: string;
  server: string;
  status: string;
  /** Connections to this server that failed. */
  econ: number;
  /** Connection attempts retried. */
  wretr: number;
  /** Connections redispatched to another server. */
  wredis: number;
}

export interface Haproxy {
  address: string;
  /** With `httpPort`: the URL of the frontend in front of the replicas' HTTP ports. */
  httpUrl?: string;
  /** Everything haproxy wrote to stderr, each line stamped with the wall-clock time it arrived. */
  log(): string;
  /** `show stat` per server: its state, connection errors, retries and redispatches so far. */
  serverStats(): Promise<ServerStat[]>;
  stop(): Promise<void>;
}

/**
 * `healthCa`: the replicas serve HTTPS; their /healthz is checked over TLS trusting this CA file.
 * `httpPort`: a second frontend, in front of the replicas' HTTP ports (the REST API). TCP mode as
 * well: SSE and WebSocket upgrades pass untouched, and a client that goes away closes the
 * replica's side too (what the REST exec's kill-on-disconnect relies on).
 */
export function haproxyConfig(port: number, backends: HaproxyBackend[], healthCa?: string, httpPort?: number, statsSocket?: string): string {
  const server = (b: HaproxyBackend, port: number) =>
    `  server ${b.name} 127.0.0.1:${port} check port ${b.httpPort}${healthCa ? ` check-ssl verify required ca-file ${healthCa} verifyhost localhost` : ''}`;
  const health = ['  option httpchk GET /healthz', '  http-check expect status 200', '  default-server inter 300 fall 2 rise 1 on-marked-down shutdown-sessions'];
  const httpSections =
    httpPort === undefined
      ? []
      : ['frontend http', `  bind 127.0.0.1:${httpPort}`, '  default_backend replicas_http', 'backend replicas_http', '  balance roundrobin', ...health, ...backends.map((b) => server(b, b.httpPort))];
  return [
    'global',
    '  maxconn 4000',
    ...(statsSocket ? [`  stats socket ${statsSocket} mode 600 level operator`] : []),
    'defaults',
    '  mode tcp',
    '  timeout connect 1s',
    '  timeout client 1h',
    '  timeout server 1h',
    '  timeout tunnel 1h',
    '  retries 3',
    '  option redispatch',
    'frontend grpc',
    `  bind 127.0.0.1:${port}`,
    '  default_backend replicas',
    'backend replicas',
    '  balance roundrobin',
    ...health,
    // TCP mode: a replica's TLS passes through untouched; only the health check speaks it.
    ...backends.map((b) => server(b, b.grpcPort)),
    ...httpSections,
    '',
  ].join('\n');
}

/** The shipped balancer configuration (what docker-compose.yml runs). */
export const DEPLOY_HAPROXY_CFG = fileURLToPath(new URL('../../deploy/haproxy.cfg', import.meta.url));

/**
 * deploy/haproxy.cfg as shipped, with its fixed addresses moved to a test's free ports: the
 * frontends' `:8080` (gRPC) and `:8081` (HTTP) to `port` and `httpPort`, its stats page to
 * `statsPort`, and the three replicas' gRPC and HTTP ports (18080/18081, 18090/18091,
 * 18100/18101) to `backends`'. A stats socket is added for the harness. Every other line is the
 * file's own, so a test of it tests what operators deploy.
 */
export function deployHaproxyConfig(port: number, httpPort: number, statsPort: number, backends: HaproxyBackend[], statsSocket: string): string {
  const text = readFileSync(DEPLOY_HAPROXY_CFG, 'utf8');
  if (backends.length !== 3) throw new Error(`deploy/haproxy.cfg names three replicas; got ${backends.length}`);
  const moved = new Map<number, number>([
    [8080, port],
    [8081, httpPort],
    [8404, statsPort],
  ]);
  backends.forEach((b, i) => {
    moved.set(18080 + 10 * i, b.grpcPort);
    moved.set(18081 + 10 * i, b.httpPort);
  });
  const unknown: number[] = [];
  const out = text.replace(/(127\.0\.0\.1:|\bport )(\d+)/g, (_all, before: string, n: string) => {
    const to = moved.get(Number(n));
    if (to === undefined) unknown.push(Number(n));
    return `${before}${to ?? n}`;
  });
  if (unknown.length > 0) throw new Error(`deploy/haproxy.cfg has addresses this harness does not map: ${unknown.join(', ')}`);
  return out.replace(/^global\n/m, `global\n    stats socket ${statsSocket} mode 600 level operator\n`);
}

/**
 * `opts.credentials`: what clients present through the balancer (normally the cluster's,
 * `cluster.credentials`); registered for its address, so openShellClient and runCli use them.
 * `opts.healthCa`: the replicas' CA, for health checks over TLS.
 * `opts.deploy`: run deploy/haproxy.cfg itself (deployHaproxyConfig) instead of the harness's
 * configuration; it needs `httpPort` and replicas without TLS, as the compose stack runs them.
 * `opts.onLog`: called with each line haproxy writes to stderr (with -db its warnings, among them
 * every server it marks DOWN or UP and why: "Layer7 timeout, check duration: 301ms"), so a run
 * can put the balancer's view of the replicas beside its own faults.
 */
export async function startHaproxy(
  port: number,
  backends: HaproxyBackend[],
  opts: { healthCa?: string; credentials?: GatewayCredentials; httpPort?: number; onLog?: (line: string) => void; deploy?: { statsPort: number } } = {},
): Promise<Haproxy> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sg-haproxy-'));
  const cfg = path.join(dir, 'haproxy.cfg');
  const statsSocket = path.join(dir, 'stats.sock');
  const serverStats = async () => serverStates(await statsCommand(statsSocket, 'show stat'));
  if (opts.deploy && (opts.httpPort === undefined || opts.healthCa)) throw new Error('startHaproxy: deploy/haproxy.cfg needs httpPort and checks plain HTTP (no healthCa)');
  writeFileSync(
    cfg,
    opts.deploy
      ? deployHaproxyConfig(port, opts.httpPort!, opts.deploy.statsPort, backends, statsSocket)
      : haproxyConfig(port, backends, opts.healthCa, opts.httpPort, statsSocket),
  );
  const proc: ChildProcess = spawn('haproxy', ['-f', cfg, '-db'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  const lines: string[] = [];
  let partial = '';
  proc.stderr!.on('data', (c: Buffer) => {
    err = (err + c.toString()).slice(-4000);
    const parts = (partial + c.toString()).split('\n');
    partial = parts.pop()!;
    for (const line of parts) {
      if (!line.trim()) continue;
      // Bounded: a run long enough to fill this has far more to say than its log's tail.
      if (lines.length < 20_000) lines.push(`${new Date().toISOString()} ${line}`);
      opts.onLog?.(line);
    }
  });
  await waitFor('haproxy listening', () => {
    if (proc.exitCode !== null) throw new Error(`haproxy exited ${proc.exitCode}: ${err}`);
    return new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.destroy();
        resolve(true);
      });
      s.on('error', () => resolve(false));
    });
  });
  // Listening is not serving: until its first health checks pass, a backend may be down and a
  // client let in meanwhile gets its connection closed ("Empty reply from server"). Every server
  // of every backend is up before the balancer is handed out (each replica was ready already).
  let states = '';
  await waitFor(
    'haproxy: every backend server UP',
    async () => {
      if (proc.exitCode !== null) throw new Error(`haproxy exited ${proc.exitCode}: ${err}`);
      const servers = await serverStats();
      states = servers.map((x) => `${x.backend}/${x.server}=${x.status}`).join(' ');
      return servers.length === backends.length * (opts.httpPort === undefined ? 1 : 2) && servers.every((x) => x.status === 'UP');
    },
    30_000,
    100,
  ).catch((e: unknown) => {
    proc.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`${String(e)}; servers: ${states}`);
  });
  if (opts.credentials) registerGateway(`127.0.0.1:${port}`, opts.credentials);
  return {
    address: `127.0.0.1:${port}`,
    ...(opts.httpPort !== undefined ? { httpUrl: `${opts.healthCa ? 'https' : 'http'}://127.0.0.1:${opts.httpPort}` } : {}),
    log: () => lines.join('\n') + (lines.length ? '\n' : ''),
    serverStats,
    async stop() {
      forgetGateway(`127.0.0.1:${port}`);
      if (proc.exitCode === null) {
        const exited = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGKILL');
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** One command on haproxy's stats socket; resolves with its whole answer ('' if it cannot connect yet). */
function statsCommand(socketPath: string, command: string): Promise<string> {
  return new Promise((resolve) => {
    let out = '';
    const s = net.connect(socketPath, () => s.end(`${command}\n`));
    s.on('data', (c: Buffer) => (out += c.toString()));
    s.on('close', () => resolve(out));
    s.on('error', () => resolve(''));
  });
}

/** The servers in `show stat`'s CSV (not the FRONTEND/BACKEND summary rows), with their status. */
function serverStates(csv: string): ServerStat[] {
  const [header, ...rows] = csv.trim().split('\n');
  const columns = (header ?? '').replace(/^# /, '').split(',');
  const at = (name: string) => columns.indexOf(name);
  return rows
    .map((row) => row.split(','))
    .filter((f) => f[at('svname')] !== 'FRONTEND' && f[at('svname')] !== 'BACKEND' && f.length > at('status'))
    .map((f) => ({
      backend: f[at('pxname')]!,
      server: f[at('svname')]!,
      status: f[at('status')]!,
      econ: Number(f[at('econ')] || 0),
      wretr: Number(f[at('wretr')] || 0),
      wredis: Number(f[at('wredis')] || 0),
    }));
}

/**
 * A test's teardown behind the balancer: its sandboxes deleted through it (a supervisor outlives
 * its replicas), then the balancer, the replicas, their state and Redis stopped; each part may be
 * missing (a set-up that failed halfway).
 */
export async function stopBehindBalancer(parts: { lb?: Haproxy; cluster?: { stop(): Promise<void>; cleanup(): void }; redis?: { stop(): Promise<void> } }): Promise<void> {
  const { lb, cluster, redis } = parts;
  if (cluster && lb) await deleteAllSandboxes(lb.address).catch(() => undefined);
  await lb?.stop();
  await cluster?.stop();
  cluster?.cleanup();
  await redis?.stop();
}

