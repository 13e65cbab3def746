// What clients see when something below the gateway fails.
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { Code, GatewayError } from '@sandgate/core';
import { relayFailure, toClientError, toStatus } from '../src/api/grpc-errors.ts';
import { freePort } from '@sandgate/test-harness/ports';

describe('toStatus', () => {
  it('passes our own errors through', () => {
    expect(toStatus(new GatewayError(Code.NOT_FOUND, 'sandbox not found'))).toEqual({ code: Code.NOT_FOUND, details: 'sandbox not found' });
  });

  it('turns "Redis is unreachable" into a retriable UNAVAILABLE, not INTERNAL', async () => {
    // A real client against a port nobody listens on, configured as the replica's is.
    const redis = new Redis(`redis://127.0.0.1:${await freePort()}`, { maxRetriesPerRequest: 1, retryStrategy: () => 10, lazyConnect: true });
    redis.on('error', () => undefined);
    const err = await redis.get('x').then(
      () => null,
      (e: unknown) => e,
    );
    redis.disconnect();
    expect(err).toBeInstanceOf(Error);
    expect(toStatus(err)).toEqual({ code: Code.UNAVAILABLE, details: 'the gateway cannot reach its Redis right now; retry' });
  });

  it('a Redis Cluster failing over (a slot moving, the cluster down for it) is UNAVAILABLE too', () => {
    for (const message of ['MOVED 3968 127.0.0.1:16986', 'ASK 3968 127.0.0.1:16986', 'CLUSTERDOWN The cluster is down', 'TRYAGAIN Multiple keys request during rehashing of slot', 'READONLY You can\'t write against a read only replica.']) {
      expect(toStatus(Object.assign(new Error(message), { name: 'ReplyError' }))).toEqual({ code: Code.UNAVAILABLE, details: 'the gateway cannot reach its Redis right now; retry' });
    }
    expect(toStatus(Object.assign(new Error('Failed to refresh slots cache.'), { name: 'ClusterAllFailedError' })).code).toBe(Code.UNAVAILABLE);
    expect(toStatus(new Error('Too many Cluster redirections. Last error: ReplyError: MOVED 474 127.0.0.1:27456')).code).toBe(Code.UNAVAILABLE);
    // Not every reply error: a script's own error is a bug, and says so.
    expect(toStatus(Object.assign(new Error('ERR Error running script'), { name: 'ReplyError' })).code).toBe(Code.INTERNAL);
  });

  it('anything unexpected is INTERNAL with the message', () => {
    expect(toStatus(new Error('boom'))).toEqual({ code: Code.INTERNAL, details: 'internal error: boom' });
  });

});

describe('relayFailure', () => {
  it('a hop that vanished is a retriable UNAVAILABLE; a deliberate status passes through', () => {
    for (const code of [undefined, Code.CANCELLED, Code.UNKNOWN, Code.INTERNAL]) {
      expect(relayFailure({ code, details: 'RST_STREAM' }, 'exec relay failed')).toMatchObject({ code: Code.UNAVAILABLE, message: 'exec relay failed: RST_STREAM' });
    }
    expect(relayFailure(undefined, 'relay channel dropped')).toMatchObject({ code: Code.UNAVAILABLE, message: 'relay channel dropped' });
    expect(relayFailure({ code: Code.RESOURCE_EXHAUSTED, details: 'sandbox has 64 execs running' }, 'x')).toMatchObject({
      code: Code.RESOURCE_EXHAUSTED,
      message: 'sandbox has 64 execs running',
    });
  });
});

describe('toClientError', () => {
  it('keeps UNAVAILABLE retriable; only the retriable-errors debug fault turns it into INTERNAL', () => {
    const broken = relayFailure(undefined, 'relay channel dropped');
    expect(toClientError(broken, undefined, false)).toMatchObject({ code: Code.UNAVAILABLE, details: 'relay channel dropped' });
    expect(toClientError(broken, undefined, true)).toMatchObject({ code: Code.INTERNAL, details: 'relay channel dropped' });
    const notFound = new GatewayError(Code.NOT_FOUND, 'sandbox not found');
    expect(toClientError(notFound, undefined, true)).toMatchObject({ code: Code.NOT_FOUND });
  });
});
