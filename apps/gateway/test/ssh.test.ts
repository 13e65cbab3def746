// Pure parts of SSH sessions and ForwardTcp at the gateway.
import { describe, expect, it } from 'vitest';
import { isIP } from 'node:net';
import { Code, GatewayError } from '@sandgate/core';
import { loopbackHost } from '@sandgate/protocols';
import { tcpOpenFor, validateForwardInit } from '../src/ssh/tcp-target.ts';
import { gatewayHostForResponse } from '../src/ssh/ssh-service.ts';

function rejects(fn: () => unknown): [number, string] {
  try {
    fn();
  } catch (err) {
    if (err instanceof GatewayError) return [err.code, err.message];
    throw err;
  }
  throw new Error('did not throw');
}

describe('ForwardTcp init validation', () => {
  it('accepts loopback only, normalising localhost', () => {
    expect(loopbackHost('localhost')).toBe('127.0.0.1');
    expect(loopbackHost('LOCALHOST')).toBe('127.0.0.1');
    expect(loopbackHost('127.0.0.1')).toBe('127.0.0.1');
    expect(loopbackHost('127.8.9.10')).toBe('127.8.9.10');
    expect(loopbackHost('::1')).toBe('::1');
    expect(loopbackHost('[::1]')).toBe('::1');
    expect(loopbackHost('::ffff:127.0.0.1')).toBe('127.0.0.1');
    for (const bad of ['', '10.0.0.1', '0.0.0.0', '::', 'example.com', '128.0.0.1', '::ffff:10.0.0.1', 'localhost.evil']) {
      expect(loopbackHost(bad), bad).toBeNull();
    }
  });

  it('names what is wrong', () => {
    expect(rejects(() => validateForwardInit({ ssh: {} }))).toEqual([Code.INVALID_ARGUMENT, 'sandbox_id is required']);
    expect(rejects(() => validateForwardInit({ sandbox_id: 's' }))).toEqual([Code.INVALID_ARGUMENT, 'tcp forward target is required']);
    expect(rejects(() => validateForwardInit({ sandbox_id: 's', tcp: { host: 'localhost', port: 0 } }))).toEqual([
      Code.INVALID_ARGUMENT,
      'tcp target port must be between 1 and 65535',
    ]);
    expect(rejects(() => validateForwardInit({ sandbox_id: 's', tcp: { host: '10.1.1.1', port: 80 } }))).toEqual([
      Code.INVALID_ARGUMENT,
      'tcp target host must be loopback',
    ]);
    expect(validateForwardInit({ sandbox_id: 's', ssh: {} })).toEqual({ sandboxId: 's', target: { kind: 'ssh' } });
    expect(validateForwardInit({ sandbox_id: 's', tcp: { host: 'localhost', port: 8000 } })).toEqual({
      sandboxId: 's',
      target: { kind: 'tcp', host: '127.0.0.1', port: 8000 },
    });
  });

  it('builds the supervisor open_tcp', () => {
    expect(tcpOpenFor('c', 's', { kind: 'ssh' }, 'svc')).toEqual({ channel_id: 'c', sandbox_id: 's', service_id: 'svc', ssh: {} });
    expect(tcpOpenFor('c', 's', { kind: 'tcp', host: '127.0.0.1', port: 9 }, '')).toEqual({
      channel_id: 'c',
      sandbox_id: 's',
      service_id: '',
      tcp: { host: '127.0.0.1', port: 9 },
    });
  });
});

describe('CreateSshSession response fields', () => {
  // The client-side rule of wire §8.2 for gateway_host.
  const validHost = (h: string) =>
    h.length >= 1 &&
    h.length <= 253 &&
    (isIP(h) === 4 || (h.startsWith('[') && h.endsWith(']') && isIP(h.slice(1, -1)) === 6) ||
      h.replace(/\.$/, '').split('.').every((l) => /^[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?$/.test(l) && l.length <= 63));

  it('gateway_host is never empty and IPv6 is bracketed', () => {
    for (const [bind, want] of [
      ['127.0.0.1', '127.0.0.1'],
      ['0.0.0.0', '0.0.0.0'],
      ['', '127.0.0.1'],
      ['::', '[::]'],
      ['::1', '[::1]'],
      ['gw.example.com', 'gw.example.com'],
    ]) {
      expect(gatewayHostForResponse(bind!)).toBe(want);
      expect(validHost(gatewayHostForResponse(bind!)), bind).toBe(true);
    }
  });
});
