import { describe, expect, it } from 'vitest';
import {
  normaliseServiceDomain,
  parseServiceHost,
  serviceEndpointKey,
  servicePageLimit,
  serviceUrl,
  validateServiceRoutingName,
  validateTargetPort,
} from '@sandgate/core';

const message = (fn: () => void) => {
  try {
    fn();
  } catch (err) {
    return (err as Error).message;
  }
  return 'ok';
};

describe('service routing names (openshell-v1-more.md §7.2)', () => {
  it('checks in upstream order with its messages', () => {
    expect(message(() => validateServiceRoutingName('sandbox', '', true))).toBe('sandbox is required');
    expect(message(() => validateServiceRoutingName('service', '', false))).toBe('ok');
    expect(message(() => validateServiceRoutingName('service', 'a'.repeat(20), false))).toBe('service must be at most 19 characters for sandbox service routing');
    // Length before `--`, `--` before the label rule.
    expect(message(() => validateServiceRoutingName('sandbox', 'A--b', true))).toBe("sandbox must not contain '--'");
    expect(message(() => validateServiceRoutingName('sandbox', 'Web', true))).toBe('sandbox must be a lowercase DNS label');
    expect(message(() => validateServiceRoutingName('service', '-web', false))).toBe('service must be a lowercase DNS label');
    expect(message(() => validateServiceRoutingName('service', 'web.x', false))).toBe('service must be a lowercase DNS label');
    expect(message(() => validateServiceRoutingName('service', 'a'.repeat(19), false))).toBe('ok');
  });

  it('ports 1..65535', () => {
    for (const p of [0, 65536, 1.5, undefined]) expect(message(() => validateTargetPort(p))).toBe('target_port must be in 1..=65535');
    expect(validateTargetPort(65535)).toBe(65535);
  });

  it('keys and URLs', () => {
    expect(serviceEndpointKey('demo', '')).toBe('demo');
    expect(serviceEndpointKey('demo', 'web')).toBe('demo--web');
    const base = { domain: 'openshell.localhost', scheme: 'http' as const, port: 17670 };
    expect(serviceUrl(base, { workspace: 'default', sandbox: 'demo', service: 'web' })).toBe('http://default--demo--web.openshell.localhost:17670/');
    expect(serviceUrl({ ...base, scheme: 'https', port: 443 }, { workspace: 'w', sandbox: 'demo', service: '' })).toBe('https://w--demo.openshell.localhost/');
    expect(serviceUrl({ ...base, port: 80 }, { workspace: 'w', sandbox: 'demo', service: '' })).toBe('http://w--demo.openshell.localhost/');
  });
});

describe('parseServiceHost', () => {
  const d = 'openshell.localhost';
  it('parses workspace, sandbox and service, with or without port', () => {
    expect(parseServiceHost('default--demo--web.openshell.localhost:8081', d)).toEqual({ workspace: 'default', sandbox: 'demo', service: 'web' });
    expect(parseServiceHost('Default--Demo.OpenShell.Localhost.', d)).toEqual({ workspace: 'default', sandbox: 'demo', service: '' });
  });
  it('refuses anything else', () => {
    for (const h of [
      'openshell.localhost',
      'demo.openshell.localhost',
      'a--b--c--d.openshell.localhost',
      '--b.openshell.localhost',
      'a----c.openshell.localhost',
      'x.a--b.openshell.localhost',
      'a--b.openshell.localhost.evil.com',
      'a--b.evilopenshell.localhost',
      '127.0.0.1:8081',
      '[::1]:80',
      undefined,
    ]) {
      expect(parseServiceHost(h, d), String(h)).toBeNull();
    }
  });
});

describe('service domain and page size', () => {
  it('normalises the configured domain', () => {
    expect(normaliseServiceDomain('.Apps.Example.COM.')).toBe('apps.example.com');
    expect(normaliseServiceDomain('localhost')).toBeNull();
    expect(normaliseServiceDomain('bad_label.example.com')).toBeNull();
    expect(normaliseServiceDomain('')).toBeNull();
  });
  it('0 means 100, capped at 1000', () => {
    expect(servicePageLimit(0)).toBe(100);
    expect(servicePageLimit(5000)).toBe(1000);
    expect(servicePageLimit(7)).toBe(7);
  });
});
