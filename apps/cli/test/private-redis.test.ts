// `sandgate up`'s private Redis, for real (redis-server from PATH): locked to one ACL user with a
// generated password kept 0600 in the state directory and reused across starts; `redis-cli`
// without the password (or with a wrong one) gets nothing. A replica started on it derives its
// peer secret from that password, deletes the clear-text one an older version left, and stores
// no secret in Redis.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { parseReplicaConfig, startReplica } from '@sandgate/gateway';
import { derivePeerSecret, NO_PEER_SECRET, TokenStore } from '@sandgate/store';
import { startPrivateRedis, type PrivateRedis } from '../src/redis-server.ts';

const run = promisify(execFile);
let stateDir: string;
let redis: PrivateRedis | undefined;

beforeAll(() => {
  stateDir = mkdtempSync(path.join(os.tmpdir(), 'sg-private-redis-'));
});
afterAll(async () => {
  await redis?.stop();
  rmSync(stateDir, { recursive: true, force: true });
});

/** redis-cli's answer (stdout and stderr) to `args`. */
async function redisCli(...args: string[]): Promise<string> {
  const { stdout, stderr } = await run('redis-cli', ['--no-auth-warning', ...args], { timeout: 10_000 }).catch((err: { stdout: string; stderr: string }) => err);
  return `${stdout}${stderr}`.trim();
}

describe('sandgate up: private Redis', () => {
  it('refuses redis-cli without the password or with a wrong one; the ACL user gets in', async () => {
    redis = await startPrivateRedis(stateDir, process.env);
    const url = new URL(redis.url);
    expect(url.username).toBe('sandgate');
    const password = decodeURIComponent(url.password);
    expect(password.length).toBeGreaterThanOrEqual(32);
    const port = String(redis.port);
    for (const attempt of [
      ['-p', port, 'ping'],
      ['-p', port, 'keys', '*'],
      ['-p', port, '--user', 'sandgate', '--pass', 'wrong', 'ping'],
      ['-p', port, '--user', 'default', '--pass', '', 'ping'],
      ['-p', port, '-a', password, 'ping'], // the password, but as the default user (whose password no one has)
    ]) {
      expect(await redisCli(...attempt), attempt.join(' ')).toMatch(/NOAUTH|WRONGPASS|invalid username-password|AUTH failed/);
    }
    expect(await redisCli('-p', port, '--user', 'sandgate', '--pass', password, 'ping')).toBe('PONG');
    expect(statSync(path.join(stateDir, 'redis-password')).mode & 0o777).toBe(0o600);
    expect(statSync(path.join(stateDir, 'redis', 'users.acl')).mode & 0o777).toBe(0o600);
  });

  it('keeps the same password, and everything multi-key scripts wrote, across starts', async () => {
    const before = redis!.url;
    // A token is written by a two-key Lua script, logged as MULTI/EXEC in the append-only file:
    // Redis 7.0 drops those on replay when the `default` user is off (it replays as `default`).
    const writer = new Redis(before);
    const { token } = await new TokenStore(writer).create({ workspace: 'default', role: 'admin' });
    writer.disconnect();
    await redis!.stop();
    redis = await startPrivateRedis(stateDir, process.env);
    expect(new URL(redis.url).password).toBe(new URL(before).password);
    const reader = new Redis(redis.url);
    try {
      expect(await new TokenStore(reader).verify(token)).not.toBeNull();
    } finally {
      reader.disconnect();
    }
  });

  it('a replica on it derives the peer secret from the password, deletes a leftover sg:peer-secret and stores no secret', async () => {
    const client = new Redis(redis!.url);
    try {
      await client.set('sg:peer-secret', 'left-in-clear-by-an-older-version');
      const replica = await startReplica({
        ...parseReplicaConfig({}, {}, { hostname: 'test', pid: process.pid, homedir: stateDir, randomHex: () => '0000' }),
        grpcPort: 0,
        httpPort: 0,
        peerPort: 0,
        redisUrl: redis!.url,
        replicaId: 'private-redis-r1',
        driver: 'local',
        stateDir,
        supervisorEndpoint: '',
        advertiseHost: '127.0.0.1',
        workers: false,
      });
      try {
        expect(await client.exists('sg:peer-secret')).toBe(0);
        const secret = derivePeerSecret(decodeURIComponent(new URL(redis!.url).password));
        const password = decodeURIComponent(new URL(redis!.url).password);
        for (const key of await client.keys('*')) {
          const type = await client.type(key);
          const value = type === 'string' ? await client.get(key) : type === 'hash' ? JSON.stringify(await client.hgetall(key)) : '';
          expect(value, key).not.toContain(secret);
          expect(value, key).not.toContain(password);
        }
      } finally {
        await replica.close();
      }
    } finally {
      client.disconnect();
    }
  });

  it('a replica given neither SANDGATE_PEER_SECRET nor a Redis password refuses to start, saying which to set', async () => {
    const url = new URL(redis!.url);
    url.username = '';
    url.password = '';
    const start = startReplica({
      ...parseReplicaConfig({}, {}, { hostname: 'test', pid: process.pid, homedir: stateDir, randomHex: () => '0000' }),
      grpcPort: 0,
      httpPort: 0,
      peerPort: 0,
      redisUrl: url.toString(),
      replicaId: 'private-redis-r2',
      driver: 'local',
      stateDir,
      workers: false,
    });
    await expect(start).rejects.toThrow(NO_PEER_SECRET);
  });
});
