// A locked Redis, as replicas reach it: credentials in the URL (a connection without them gets
// nothing), and `rediss://` with a CA of our own (a real redis-server with --tls-port, a server
// certificate from @sandgate/pki), used by createRedisConnection for a TokenStore round trip.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { once } from 'node:events';
import { connect } from 'node:net';
import { Redis } from 'ioredis';
import { createCertificateAuthority } from '@sandgate/pki';
import { startRedis, type TestRedis } from '@sandgate/test-harness/redis';
import { createRedisConnection, TokenStore, type RedisClient } from '@sandgate/store';

let ca: string;
let tlsRedis: TestRedis;
let plainRedis: TestRedis;
const opened: RedisClient[] = [];

function track<R extends RedisClient>(r: R): R {
  r.on('error', () => undefined);
  opened.push(r);
  return r;
}

beforeAll(async () => {
  const authority = await createCertificateAuthority('redis test CA');
  ca = authority.cert;
  const server = await authority.issue({ commonName: 'redis', ipAddresses: ['127.0.0.1'], dnsNames: ['localhost'], usage: 'server' });
  [tlsRedis, plainRedis] = await Promise.all([startRedis({ tls: { ...server, ca } }), startRedis()]);
});

afterAll(async () => {
  for (const r of opened) r.disconnect();
  await Promise.all([tlsRedis?.stop(), plainRedis?.stop()]);
});

/** The URL without its credentials. */
const anonymous = (url: string) => url.replace(/\/\/[^@]*@/, '//');

describe('locked Redis', () => {
  it('refuses a connection without the password, or with a wrong one', async () => {
    expect(plainRedis.url).toMatch(/^redis:\/\/sandgate:[^@]+@127\.0\.0\.1:\d+$/);
    // Raw RESP, as anyone on the network would speak it: not even PING without the password.
    const raw = connect(plainRedis.port, '127.0.0.1', () => raw.write('PING\r\nGET sg:peer-secret\r\nKEYS *\r\n'));
    let answer = '';
    raw.on('data', (b: Buffer) => {
      answer += b.toString();
      if (answer.split('\r\n').length > 3) raw.end();
    });
    await once(raw, 'close');
    expect(answer.trim().split('\r\n')).toEqual(Array(3).fill('-NOAUTH Authentication required.'));
    expect(anonymous(plainRedis.url)).not.toContain(plainRedis.password);
    const wrong = track(new Redis(plainRedis.url.replace(`:${plainRedis.password}@`, ':wrong@'), { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null }));
    const wrongErrors: string[] = [];
    wrong.on('error', (err: Error) => wrongErrors.push(err.message));
    await expect(wrong.connect()).rejects.toThrow();
    expect(wrongErrors.join(' ')).toMatch(/WRONGPASS|invalid username-password/);
    const right = track(createRedisConnection(plainRedis.url, 'commands'));
    expect(await right.ping()).toBe('PONG');
  });

  it('a restart keeps what multi-key scripts wrote (the harness locks Redis the way up does)', async () => {
    // Regression: with the `default` user `off`, Redis 7.0 replayed every MULTI/EXEC of its
    // append-only file as a NOPERM error on restart, and lost every token and sandbox record.
    const durable = await startRedis({ persistent: true });
    try {
      const writer = createRedisConnection(durable.url, 'commands');
      const { token } = await new TokenStore(writer).create({ workspace: 'default', role: 'admin' });
      writer.disconnect();
      await durable.restart();
      const reader = createRedisConnection(durable.url, 'commands');
      expect(await new TokenStore(reader).verify(token)).not.toBeNull();
      reader.disconnect();
    } finally {
      await durable.stop();
    }
  });

  it('rediss:// with --redis-ca: a TokenStore round trip over TLS, with the credentials', async () => {
    expect(tlsRedis.url).toMatch(/^rediss:\/\/sandgate:/);
    const redis = track(createRedisConnection(tlsRedis.url, 'commands', { tlsCa: ca }));
    const tokens = new TokenStore(redis);
    const { token, record } = await tokens.create({ workspace: 'default', role: 'member', name: 'tls' });
    expect((await tokens.verify(token))?.id).toBe(record.id);
    expect(await redis.exists(`sg:tok:${token}`)).toBe(0);
  });

  it('rediss:// without our CA does not trust the server; a CA with redis:// is refused, not ignored', async () => {
    const untrusted = track(createRedisConnection(tlsRedis.url, 'commands', { lazyConnect: true }));
    const errors: string[] = [];
    untrusted.on('error', (err: Error) => errors.push(err.message));
    await expect(untrusted.connect()).rejects.toThrow();
    expect(errors.join(' ')).toMatch(/certificate|self.signed|issuer/i);
    expect(() => createRedisConnection(plainRedis.url, 'commands', { tlsCa: ca })).toThrow(/rediss:\/\//);
  });
});
