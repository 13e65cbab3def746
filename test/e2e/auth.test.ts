// The door, attacked over the wire: three real replicas on one real Redis, auth on (the default).
// Without a token every OpenShell method, implemented or not, unary or streaming, answers
// UNAUTHENTICATED; garbage, unknown and expired tokens are refused; a revoked token is refused by
// all three replicas within 1 s of `sandgate token revoke` (the bound); `token create`
// prints only the token, `token list` never one, and Redis holds no token in clear.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { Metadata, status as grpcStatus, type ServiceError } from '@grpc/grpc-js';
import { serviceDefinition } from '@sandgate/protocols';
import { keysFor, tokenDigest, type RedisClient } from '@sandgate/store';
import { Cluster, runCli } from '../harness/cluster.ts';
import { scanAllKeys, startRedis, type TestRedis } from '../harness/redis.ts';
import { openShellClient, unaryCall, type AnyClient } from '../harness/grpc-client.ts';
import { waitFor } from '../harness/wait.ts';
import { logLines } from '../harness/log-lines.ts';
import { freePorts } from '../harness/ports.ts';

let redis: TestRedis;
let r: RedisClient;
let cluster: Cluster;

beforeAll(async () => {
  redis = await startRedis();
  r = redis.client();
  cluster = await Cluster.start({ redisUrl: redis.url, replicas: 3 });
});

afterAll(async () => {
  await cluster?.stop();
  cluster?.cleanup();
  r?.disconnect();
  await redis?.stop();
});

const gw = (i: number) => cluster.replicas[i]!.grpcAddress;
const cli = (args: string[], i = 0) => runCli(args, { gateway: gw(i) });

/** Calls `method` of `client` with an empty request (any shape) and resolves with its error, or null if it succeeded. */
function attempt(client: AnyClient, method: string, requestStream: boolean, responseStream: boolean): Promise<ServiceError | null> {
  return new Promise((resolve) => {
    if (!responseStream) {
      const cb = (err: ServiceError | null) => resolve(err);
      if (requestStream) client[method](cb).end();
      else client[method]({}, cb);
      return;
    }
    const call = requestStream ? client[method]() : client[method]({});
    call.on('data', () => undefined);
    call.on('error', (err: ServiceError) => resolve(err));
    call.on('end', () => resolve(null));
    if (requestStream) call.end();
  });
}

async function whoami(token: string, i = 0, scheme = 'Bearer'): Promise<Record<string, unknown>> {
  const client = openShellClient(gw(i), {});
  const md = new Metadata();
  md.set('authorization', `${scheme} ${token}`);
  try {
    return await new Promise((resolve, reject) => client.GetCurrentUser({}, md, (err: ServiceError | null, res: Record<string, unknown>) => (err ? reject(err) : resolve(res))));
  } finally {
    client.close();
  }
}

async function refusal(p: Promise<unknown>): Promise<ServiceError> {
  const err = (await p.then(
    () => null,
    (e: unknown) => e,
  )) as ServiceError | null;
  expect(err, 'the call was accepted').not.toBeNull();
  expect(err!.code, err!.details).toBe(grpcStatus.UNAUTHENTICATED);
  return err!;
}

async function createToken(args: string[]): Promise<string> {
  const res = await cli(['token', 'create', '--redis', redis.url, ...args]);
  expect(res.code, res.stderr).toBe(0);
  return res.stdout.toString().trim();
}

describe('authentication', () => {
  it('refuses every OpenShell method without a token, implemented or not, at every replica', async () => {
    const def = serviceDefinition('openshell.v1.OpenShell');
    const methods = Object.keys(def);
    expect(methods).toEqual(expect.arrayContaining(['Health', 'CreateSandbox', 'ExecSandboxInteractive', 'ForwardTcp', 'WatchSandbox', 'GetCurrentUser', 'ExposeService']));
    for (let i = 0; i < 3; i++) {
      const anonymous = openShellClient(gw(i), {});
      try {
        for (const method of methods) {
          const err = await attempt(anonymous, method, def[method]!.requestStream, def[method]!.responseStream);
          expect(err?.code, `${method} at r${i}: ${err?.details ?? 'accepted'}`).toBe(grpcStatus.UNAUTHENTICATED);
          expect(err!.details).toMatch(/^missing authorization header: send `authorization: Bearer <token>`/);
        }
      } finally {
        anonymous.close();
      }
    }
  });

  it('refuses garbage, unknown and malformed tokens with "invalid token"', async () => {
    const unknown = `sgt_${randomBytes(32).toString('base64url')}`;
    for (const token of ['garbage', unknown, 'sgt_', 'eyJhbGciOiJSUzI1NiJ9.e30.c2ln']) {
      expect((await refusal(whoami(token))).details).toMatch(/^invalid token: /);
    }
    // Another scheme is not a bearer token.
    expect((await refusal(whoami(cluster.token, 0, 'Basic'))).details).toMatch(/^invalid token: /);
  });

  it('accepts a token whatever the case of the Bearer scheme, and says who it is', async () => {
    const token = await cluster.tokenFor('team-a', 'member', 'ci');
    for (const scheme of ['Bearer', 'bearer', 'BEARER']) {
      expect(await whoami(token, 1, scheme)).toMatchObject({ display_name: 'ci', roles: ['member'], scopes: [], identity_provider: 'api_token' });
    }
    const res = await runCli(['whoami', '-o', 'json'], { gateway: gw(2), env: { SANDGATE_TOKEN: cluster.token } });
    expect(res.code, res.stderr).toBe(0);
    expect(JSON.parse(res.stdout.toString())).toMatchObject({ roles: ['admin'], identity_provider: 'api_token', display_name: 'test harness' });
    // --token after the command is the token used (not ignored).
    const flagged = await runCli(['whoami', '--token', token, '-o', 'json'], { gateway: gw(2), env: { SANDGATE_TOKEN: '' } });
    expect(flagged.code, flagged.stderr).toBe(0);
    expect(JSON.parse(flagged.stdout.toString())).toMatchObject({ roles: ['member'], display_name: 'ci' });
    const anon = await runCli(['whoami'], { gateway: gw(2), env: { SANDGATE_TOKEN: '' } });
    expect(anon.code).toBe(1);
    expect(anon.stderr).toMatch(/whoami requires authentication: missing authorization header/);
  });

  it('token create prints only the token; an expired token is refused', async () => {
    const res = await cli(['token', 'create', '--redis', redis.url, '--workspace', 'default', '--ttl', '2s', '--name', 'short']);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout.toString()).toMatch(/^sgt_[A-Za-z0-9_-]{43}\n$/);
    const token = res.stdout.toString().trim();
    // Refused once its two seconds are over (waited for, not slept).
    const err = await waitFor('the short-lived token to expire', () => whoami(token, 2).then(() => false as const, (e: unknown) => e as ServiceError), 10_000, 100);
    expect(err.code).toBe(grpcStatus.UNAUTHENTICATED);
    expect(err.details).toMatch(/^invalid token: /);
  });

  it('refuses bad --ttl and --role values naming the flag', async () => {
    for (const [flag, value] of [['--ttl', 'soon'], ['--ttl', '0s'], ['--role', 'root']] as const) {
      const res = await cli(['token', 'create', '--redis', redis.url, '--workspace', 'default', flag, value]);
      expect(res.code).toBe(2);
      expect(res.stderr).toContain(`error: ${flag} must`);
      expect(res.stdout.length).toBe(0);
    }
    const noWs = await cli(['token', 'create', '--redis', redis.url]);
    expect(noWs.code).toBe(2);
    expect(noWs.stderr).toContain('--workspace is required');
    // A workspace that does not exist gets no token.
    const missing = await cli(['token', 'create', '--redis', redis.url, '--workspace', 'nowhere']);
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toContain("workspace 'nowhere' not found");
    expect(missing.stdout.length).toBe(0);
  });

  it('never prints the Redis password, even when Redis cannot be reached', async () => {
    expect(redis.password).not.toBe('');
    // The same URL (one server's, or a Sentinel group's host list) with every port one that nothing answers on.
    const hosts = redis.url.match(/127\.0\.0\.1:\d+/g) ?? [];
    expect(hosts.length).toBeGreaterThan(0);
    const dead = await freePorts(hosts.length);
    let i = 0;
    const unreachable = redis.url.replace(/127\.0\.0\.1:\d+/g, () => `127.0.0.1:${dead[i++]}`);
    const res = await cli(['token', 'list', '--redis', unreachable]);
    expect(res.code).not.toBe(0);
    expect(res.stderr).toContain('cannot reach Redis');
    expect(res.stderr).not.toContain(redis.password);
    expect(res.stderr).not.toContain(encodeURIComponent(redis.password));
    // A Sentinel group's URL carries the Sentinels' own password too.
    const sentinelPassword = new URLSearchParams(redis.url.split('?')[1] ?? '').get('sentinelPassword');
    if (sentinelPassword) expect(res.stderr).not.toContain(sentinelPassword);
  });

  it('token list never shows a token, and Redis holds none in clear', async () => {
    const token = await createToken(['--workspace', 'default', '--role', 'admin', '--name', 'listed']);
    const text = await cli(['token', 'list', '--redis', redis.url]);
    const json = await cli(['token', 'list', '--redis', redis.url, '-o', 'json']);
    expect(text.code, text.stderr).toBe(0);
    expect(json.code, json.stderr).toBe(0);
    for (const out of [text.stdout.toString(), json.stdout.toString()]) {
      expect(out).not.toContain('sgt_');
      expect(out).not.toContain(token.slice(4));
    }
    const listed = (JSON.parse(json.stdout.toString()) as { tokens: Array<Record<string, unknown>> }).tokens.find((t) => t.name === 'listed');
    expect(listed).toMatchObject({ workspace: 'default', role: 'admin', expires: null });
    expect(Object.keys(listed!).sort()).toEqual(['created', 'expires', 'id', 'name', 'role', 'workspace']);
    expect(text.stdout.toString()).toContain(String(listed!.id));

    // Every value of every key, whatever its type.
    const secret = token.slice(4);
    let scanned = 0;
    for await (const batch of scanAllKeys(r)) {
      for (const key of batch) {
        scanned++;
        expect(key).not.toContain(secret);
        const type = await r.type(key);
        const values: string[] =
          type === 'string' ? [(await r.get(key)) ?? '']
          : type === 'hash' ? Object.entries(await r.hgetall(key)).flat()
          : type === 'set' ? await r.smembers(key)
          : type === 'zset' ? await r.zrange(key, '0', '-1')
          : type === 'list' ? await r.lrange(key, 0, -1)
          : type === 'stream' ? (await r.xrange(key, '-', '+')).flatMap(([id, fields]) => [id, ...fields])
          : [];
        for (const v of values) expect(v, `key ${key}`).not.toContain(secret);
      }
    }
    expect(scanned).toBeGreaterThan(0);
  });

  it('a revoked token is refused by all three replicas within 1 s of `token revoke`', async () => {
    const token = await createToken(['--workspace', 'default', '--name', 'to-revoke']);
    const id = ((JSON.parse((await cli(['token', 'list', '--redis', redis.url, '-o', 'json'])).stdout.toString()) as { tokens: Array<{ id: string; name: string }> }).tokens.find((t) => t.name === 'to-revoke'))!.id;
    const clients = [0, 1, 2].map((i) => openShellClient(gw(i), { token }));
    for (const c of clients) expect(await unaryCall(c, 'GetCurrentUser', {})).toMatchObject({ identity_provider: 'api_token' });
    // Every replica keeps calling (so its cache is always warm) and notes when it first refuses.
    const refusedAt: Array<number | null> = [null, null, null];
    let polling = true;
    const pollers = clients.map(async (c, i) => {
      while (polling && refusedAt[i] === null) {
        const err = await unaryCall(c, 'GetCurrentUser', {}).then(() => null, (e: ServiceError) => e);
        if (err) {
          expect(err.code, err.details).toBe(grpcStatus.UNAUTHENTICATED);
          refusedAt[i] = Date.now();
        }
      }
    });
    // The moment of revocation: the token's record leaving Redis, watched every few ms.
    const record = keysFor(r).apiToken(tokenDigest(token));
    let revokedAt = 0;
    const watcher = (async () => {
      while (polling && (await r.exists(record)) === 1) await new Promise((res) => setTimeout(res, 2));
      revokedAt = Date.now();
    })();
    const revoke = await cli(['token', 'revoke', '--redis', redis.url, id]);
    const returnedAt = Date.now();
    expect(revoke.code, revoke.stderr).toBe(0);
    await waitFor('every replica to refuse the revoked token', () => refusedAt.every((t) => t !== null), 5_000, 20).finally(() => (polling = false));
    await Promise.all([...pollers, watcher]);
    expect(revokedAt).toBeGreaterThan(0);
    const lags = refusedAt.map((t) => t! - revokedAt);
    console.log(`revocation: refused at r0/r1/r2 ${lags.join('/')} ms after the token left Redis (\`token revoke\` returned ${returnedAt - revokedAt} ms after that)`);
    for (const lag of lags) expect(lag).toBeLessThanOrEqual(1000);
    // Also against the command itself: no replica still accepts it a second after `token revoke` returned.
    for (const t of refusedAt) expect(t! - returnedAt).toBeLessThanOrEqual(1000);
    for (const c of clients) c.close();
    // Revoking again: nothing to revoke.
    const again = await cli(['token', 'revoke', '--redis', redis.url, token]);
    expect(again.code).toBe(1);
  });

  it('--no-auth lets everyone in as the local-dev admin, and says so loudly at start', async () => {
    const i = await cluster.addReplica({ env: { SANDGATE_AUTH: '0' } });
    try {
      const off = logLines(cluster.replicas[i]!.logs.join('')).find((l) => l.msg.startsWith('authentication is OFF (--no-auth): every caller'));
      expect(off).toMatchObject({ level: 'warn' });
      const anonymous = openShellClient(gw(i), {});
      expect(await unaryCall(anonymous, 'GetCurrentUser', {})).toMatchObject({ subject: 'unauthenticated-local-dev', identity_provider: 'local_dev' });
      anonymous.close();
    } finally {
      await cluster.signal(i, 'SIGTERM');
    }
  });
});
