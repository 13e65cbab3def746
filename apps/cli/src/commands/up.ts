// sandgate up: the embedded default. One replica with its workers and, unless a Redis URL is
// given, a private redis-server; everything stops on SIGINT/SIGTERM.
import { execFileSync } from 'node:child_process';
import { redactRedisAddress } from '@sandgate/core';
import type { RunningReplica } from '@sandgate/gateway';
import { DEFAULT_GATEWAY } from '../args.ts';
import type { CommandContext } from '../context.ts';
import { cliLogger, type Logger } from '../diagnostics.ts';
import { ExitError } from '../errors.ts';
import { aptInstall, aptRunner, installNotice, planPrerequisites, thisHost } from '../prerequisites.ts';
import { startPrivateRedis, type PrivateRedis } from '../redis-server.ts';
import { resolveUpConfig } from '../replica-config.ts';
import { waitForShutdownSignal } from '../signals.ts';
import { startProcessTracing } from '../tracing.ts';
import { ensureAdminToken, ensureUpTls, upCertificateNames, writeClientConfig, type ClientConfigOutcome } from '../up-credentials.ts';
import os from 'node:os';

/** A Redis URL fit for printing: any password replaced by `***`. */
export function redactRedisUrl(url: string): string {
  if (url.startsWith('redis+sentinel://')) return redactRedisAddress(url);
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString().replace(/\/$/, '');
  } catch {
    return url.replace(/\/\/[^@/]*@/, '//***@');
  }
}

/**
 * The lines `up` prints once everything listens. `client`: the client config file `up` wrote (the
 * CLI then needs no flag), or the one it left alone and the copy of its own to point
 * SANDGATE_CONFIG at; absent: plaintext without a config file (the gateway address is the hint).
 */
export function upBanner(replica: Pick<RunningReplica, 'grpcAddress' | 'httpUrl'>, redis: string, client?: ClientConfigOutcome & { url: string; token?: boolean }): string {
  let prefix = replica.grpcAddress === DEFAULT_GATEWAY ? '' : `export SANDGATE_GATEWAY=${replica.grpcAddress}; `;
  let config = '';
  if (client?.written) {
    prefix = '';
    config = `client config: ${client.path} (gateway ${client.url}, its CA${client.token === false ? ', no token: --no-auth' : ' and an admin token'})\n`;
  } else if (client) {
    prefix = `export SANDGATE_CONFIG=${client.ownPath}; `;
    config = `client config: left ${client.path} alone (${client.reason}); this gateway's is ${client.ownPath}\n`;
  }
  const grpc = client ? client.url : replica.grpcAddress;
  return (
    `sandgate is up: gRPC ${grpc}, HTTP ${replica.httpUrl} (redis: ${redis})\n` +
    config +
    // The HTTP API takes the same bearer tokens (`sandgate token create` mints one for curl).
    `HTTP API: ${replica.httpUrl}/v1 (OpenAPI ${replica.httpUrl}/openapi.json, docs ${replica.httpUrl}/docs)\n` +
    `try:  ${prefix}sandgate sandbox create --name demo --detach -- sleep infinity && sandgate sandbox exec demo -- echo hi\n`
  );
}

function fail(message: string, log?: Logger, err?: unknown): never {
  // The whole error (cause, stack) for SANDGATE_LOG_LEVEL=debug; the line below is what a person reads.
  if (err !== undefined) log?.debug(message, { err });
  process.stderr.write(`error: ${message}\n`);
  throw new ExitError(1);
}

function dockerAnswers(): boolean {
  try {
    execFileSync('docker', ['info'], { stdio: 'ignore', timeout: 5000 });
    return true;
  } catch {
    return false;
  }
}

export async function run(argv: string[], ctx: CommandContext): Promise<number> {
  const { config, privateRedis, pickDriver } = resolveUpConfig(argv, ctx.env);
  const host = thisHost(dockerAnswers, ctx.env.PATH);
  const plan = planPrerequisites({ privateRedis, driver: pickDriver ? 'auto' : config.driver }, host);
  if (plan.action === 'refuse') {
    process.stderr.write(`error: ${plan.message}`);
    throw new ExitError(1);
  }
  if (plan.action === 'install') {
    process.stderr.write(installNotice(plan.missing));
    try {
      aptInstall(plan.missing.map((m) => m.package), (line) => process.stderr.write(line), aptRunner(ctx.env));
    } catch (err) {
      fail((err as Error).message);
    }
    const still = plan.missing.filter((m) => !host.has(m.bin));
    if (still.length) fail(`installed ${still.map((m) => m.package).join(' and ')}, but ${still.map((m) => m.bin).join(' and ')} is still not on PATH`);
  }
  config.driver = plan.driver as typeof config.driver;
  const shutdown = waitForShutdownSignal();
  const log = await cliLogger(ctx.env, 'up', config.logLevel);

  // TLS always: a CA and a server certificate of our own under <stateDir>/tls, made once and reused.
  let tls;
  try {
    const names = upCertificateNames(os.hostname(), config.host);
    tls = await ensureUpTls(config.stateDir, names.dnsNames, names.ips);
  } catch (err) {
    fail(`cannot prepare TLS under ${config.stateDir}/tls: ${(err as Error).message}`, log, err);
  }
  if (tls.made.ca) process.stderr.write(`made a CA for this gateway: ${tls.caFile}\n`);
  config.tlsCert = tls.certFile;
  config.tlsKey = tls.keyFile;
  config.tlsCa = tls.caFile;

  let redis: PrivateRedis | undefined;
  if (privateRedis) {
    try {
      redis = await startPrivateRedis(config.stateDir, ctx.env);
    } catch (err) {
      fail((err as Error).message, log, err);
    }
    config.redisUrl = redis.url;
  }

  // Auth on (unless --no-auth): an admin token of `default`, kept in the state dir while it verifies.
  let token: string | undefined;
  if (config.auth) {
    try {
      token = (await ensureAdminToken(config.redisUrl, config.stateDir, config.redisCa)).token;
    } catch (err) {
      await redis?.stop();
      fail(`cannot create the admin token in Redis: ${(err as Error).message}`, log, err);
    }
  }

  let replica: RunningReplica;
  try {
    // Traces when OTEL_* asks for them (ioredis is already loaded here: no Redis command spans).
    await startProcessTracing('sandgate-gateway', config.replicaId, ctx.env);
    const { startReplica } = await import('@sandgate/gateway');
    replica = await startReplica(config);
  } catch (err) {
    await redis?.stop();
    fail(err instanceof Error ? err.message : String(err), log, err);
  }

  // The CLI finds this gateway, its CA and the token here; never printed.
  const url = `https://${replica.grpcAddress.startsWith('0.0.0.0:') ? replica.grpcAddress.replace('0.0.0.0', '127.0.0.1') : replica.grpcAddress}`;
  let client: (ClientConfigOutcome & { url: string; token: boolean }) | undefined;
  try {
    client = { ...writeClientConfig(ctx.env, config.stateDir, { gateway: url, ca: tls.caFile, tlsServerName: 'localhost', ...(token ? { token } : {}) }), url, token: token !== undefined };
  } catch (err) {
    process.stderr.write(`warning: cannot write the client config file: ${(err as Error).message}\n`);
  }
  process.stdout.write(upBanner(replica, redis ? `private, 127.0.0.1:${redis.port}` : redactRedisUrl(config.redisUrl), client));

  // A private Redis dying under us is fatal: stop the replica and report it.
  const redisDied = redis ? redis.exited.then((why) => why) : new Promise<never>(() => undefined);
  const outcome = await Promise.race([shutdown.then((signal) => ({ signal })), redisDied]);
  if (typeof outcome === 'object') log.info('signal received: stopping', { signal: outcome.signal });
  else log.error('the private redis-server exited unexpectedly: stopping', { exit: outcome });
  await replica.close();
  if (typeof outcome !== 'object') fail(`the private redis-server exited unexpectedly (${outcome})`);
  await redis?.stop();
  return 0;
}
