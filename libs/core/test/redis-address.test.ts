import { describe, expect, it } from 'vitest';
import { parseRedisAddress, redactRedisAddress } from '../src/redis-address.ts';

describe('parseRedisAddress', () => {
  it('takes one server as a URL, with its password', () => {
    expect(parseRedisAddress('redis://u:p%40ss@h:6379/2')).toEqual({ mode: 'single', url: 'redis://u:p%40ss@h:6379/2', password: 'p@ss' });
    expect(parseRedisAddress('rediss://h:6380')).toEqual({ mode: 'single', url: 'rediss://h:6380', password: '' });
  });

  it('takes Sentinels, the master name, the data nodes\' credentials, a database and the Sentinels\' own credentials', () => {
    expect(parseRedisAddress('redis+sentinel://sandgate:s3cr%2Ft@h1:26379,h2:26380,[::1]:26381,h4/mymaster/3?sentinelUsername=sen&sentinelPassword=x%26y')).toEqual({
      mode: 'sentinel',
      sentinels: [
        { host: 'h1', port: 26379 },
        { host: 'h2', port: 26380 },
        { host: '::1', port: 26381 },
        { host: 'h4', port: 26379 },
      ],
      masterName: 'mymaster',
      username: 'sandgate',
      password: 's3cr/t',
      db: 3,
      sentinelUsername: 'sen',
      sentinelPassword: 'x&y',
    });
    expect(parseRedisAddress('redis+sentinel://h1:1/m')).toMatchObject({ mode: 'sentinel', username: '', password: '', db: 0, sentinelPassword: '' });
  });

  it.each([
    ['redis+sentinel://h1:26379', /names no master/],
    ['redis+sentinel://h1:26379/', /names no master/],
    ['redis+sentinel:///mymaster', /Sentinel '' is not host/],
    ['redis+sentinel://h1:99999/m', /port out of range/],
    ['redis+sentinel://h1:1,,h2:2/m', /Sentinel '' is not host/],
    ['redis+sentinel://h1:1/m/x', /database 'x' must be a number/],
    ['redis+sentinel://h1:1/m/0/extra', /too many parts/],
    ['redis+sentinel://h1:1/m?password=x', /does not know the parameter 'password'/],
    ['redis+cluster://', /names no node/],
    ['redis+cluster://h1:1,,h2:2', /node '' is not host/],
    ['redis+cluster://h1:0', /port out of range/],
    ['redis+cluster://h1:1/2', /takes no path/],
    ['redis+cluster://h1:1?tls=1', /does not know the parameter 'tls'/],
    ['http://h:6379', /unknown scheme/],
    ['h:6379', /unknown scheme/],
  ])('refuses %s, saying what to fix', (raw, message) => {
    expect(() => parseRedisAddress(raw)).toThrow(message);
  });

  it('parses a cluster address: seed nodes (default port 6379) and the nodes\' credentials', () => {
    expect(parseRedisAddress('redis+cluster://sandgate:s3cr%2Ft@h1:7000,[::1]:7001,h3')).toEqual({
      mode: 'cluster',
      nodes: [
        { host: 'h1', port: 7000 },
        { host: '::1', port: 7001 },
        { host: 'h3', port: 6379 },
      ],
      username: 'sandgate',
      password: 's3cr/t',
    });
    expect(parseRedisAddress('redis+cluster://h1:7000/')).toMatchObject({ mode: 'cluster', username: '', password: '' });
  });

  it('never repeats a password in its errors', () => {
    expect(() => parseRedisAddress('http://u:hunter2@h')).toThrow(/^(?!.*hunter2)/);
  });
});

describe('redactRedisAddress', () => {
  it('hides the data nodes\' and the Sentinels\' passwords', () => {
    expect(redactRedisAddress('redis+sentinel://u:pw@h1:1,h2:2/m?sentinelPassword=spw&sentinelUsername=s')).toBe('redis+sentinel://u:***@h1:1,h2:2/m?sentinelPassword=***&sentinelUsername=s');
    expect(redactRedisAddress('redis://u:pw@h:1')).toBe('redis://u:***@h:1');
    expect(redactRedisAddress('redis://h:1')).toBe('redis://h:1');
  });
});
