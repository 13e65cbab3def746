// The worked encodings from shared/spec/openshell-v1-wire.md §2, byte for byte.
import { describe, expect, it } from 'vitest';
import { codec, toProto3Json } from '@sandgate/protocols';

const hex = (s: string) => Buffer.from(s.replace(/\s+/g, ''), 'hex');

describe('OpenShell wire compatibility', () => {
  it('encodes HealthResponse', () => {
    expect(codec('openshell.v1.HealthResponse').encode({ status: 1, version: '0.1.0' })).toEqual(hex('08 01 12 05 30 2e 31 2e 30'));
  });
  it('decodes GetSandboxRequest', () => {
    expect(codec<{ name?: string }>('openshell.v1.GetSandboxRequest').decode(hex('0a 04 64 65 6d 6f')).name).toBe('demo');
  });
  it('round-trips an SDK CreateSandboxRequest with opaque resource_requirements', () => {
    const bytes = hex('0a 10 32 0a 0a 08 61 6c 70 69 6e 65 3a 33 4a 02 0a 00');
    const c = codec<object>('openshell.v1.CreateSandboxRequest');
    expect(c.encode(c.decode(bytes))).toEqual(bytes);
  });
  it('encodes SandboxResponse, with explicit exit_code 0 present', () => {
    const c = codec('openshell.v1.SandboxResponse');
    expect(c.encode({ sandbox: { metadata: { id: 'abc', name: 'demo' }, status: { phase: 2 } } })).toEqual(
      hex('0a 11 0a 0b 0a 03 61 62 63 12 04 64 65 6d 6f 1a 02 30 02'),
    );
    expect(c.encode({ sandbox: { metadata: { id: 'abc', name: 'demo' }, status: { phase: 3, exit_code: 0 } } })).toEqual(
      hex('0a 13 0a 0b 0a 03 61 62 63 12 04 64 65 6d 6f 1a 04 30 03 48 00'),
    );
  });
  it('encodes exec messages', () => {
    expect(codec('openshell.v1.ExecSandboxRequest').encode({ sandbox_id: 'abc', command: ['echo', 'hi'] })).toEqual(
      hex('0a 03 61 62 63 12 04 65 63 68 6f 12 02 68 69'),
    );
    const ev = codec('openshell.v1.ExecSandboxEvent');
    expect(ev.encode({ stdout: { data: Buffer.from('hi\n') } })).toEqual(hex('0a 05 0a 03 68 69 0a'));
    expect(ev.encode({ exit: { exit_code: 0 } })).toEqual(hex('1a 00'));
    const input = codec('openshell.v1.ExecSandboxInput');
    expect(input.encode({ start: { sandbox_id: 'abc', command: ['sh'], tty: true } })).toEqual(hex('0a 0b 0a 03 61 62 63 12 02 73 68 38 01'));
    expect(input.encode({ resize: { cols: 120, rows: 40 } })).toEqual(hex('1a 04 08 78 10 28'));
  });
  it('encodes TcpForwardFrame', () => {
    const c = codec('openshell.v1.TcpForwardFrame');
    expect(
      c.encode({ init: { sandbox_id: 'abc', service_id: 's', tcp: { host: '127.0.0.1', port: 8000 }, authorization_token: 't' } }),
    ).toEqual(hex('0a 1b 0a 03 61 62 63 22 01 73 32 0e 0a 09 31 32 37 2e 30 2e 30 2e 31 10 c0 3e 3a 01 74'));
    expect(c.encode({ data: Buffer.from([1, 2]) })).toEqual(hex('12 02 01 02'));
  });
  it('keeps an empty-but-present policy (optional bytes)', () => {
    const c = codec<object>('openshell.v1.SandboxSpec');
    const bytes = hex('3a 00');
    expect(c.encode(c.decode(bytes))).toEqual(bytes);
  });
  it('prints canonical proto3 JSON', () => {
    const json = toProto3Json('openshell.v1.Sandbox', {
      metadata: { id: 'a', name: 'n', created_at_ms: 5, labels: { snake_key: 'v' } },
      status: { phase: 9, exit_code: 0 },
    });
    expect(json).toEqual({
      metadata: { id: 'a', name: 'n', createdAtMs: '5', labels: { snake_key: 'v' } },
      status: { phase: 'SANDBOX_PHASE_COMPLETED', exitCode: 0 },
    });
  });
});
