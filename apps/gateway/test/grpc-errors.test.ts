// What clients see when something below the gateway fails.
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { Code, GatewayError } from '@sandgate/core';
import { toStatus } from '../src/grpc-errors.ts';
import { freePort } from '../../../test/harness/ports.ts';

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

  it('anything unexpected is INTERNAL with the message', () => {
    expect(toStatus(new Error('boom'))).toEqual({ code: Code.INTERNAL, details: 'internal error: boom' });
  });
});
