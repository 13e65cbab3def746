import { describe, expect, it } from 'vitest';
import { encodeStruct } from '@sandgate/protocols';
import { Code, GatewayError, formatCpu, formatMemory, parseCpuMillis, parseMemoryBytes, parseResources, validateCreate } from '@sandgate/core';

function refusal(fn: () => unknown): GatewayError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(GatewayError);
    expect((err as GatewayError).code).toBe(Code.INVALID_ARGUMENT);
    return err as GatewayError;
  }
  throw new Error('expected a GatewayError');
}

describe('Kubernetes quantities', () => {
  it('cpu: cores and millicores, rounded up to whole millicores', () => {
    expect(parseCpuMillis('500m')).toBe(500);
    expect(parseCpuMillis('0.5')).toBe(500);
    expect(parseCpuMillis('2')).toBe(2000);
    expect(parseCpuMillis(0.25)).toBe(250);
    expect(parseCpuMillis('1.0005')).toBe(1001);
    expect(parseCpuMillis('1e-1')).toBe(100);
  });
  it('memory: binary and decimal suffixes, exponents, plain bytes', () => {
    expect(parseMemoryBytes('256Mi')).toBe(256 * 2 ** 20);
    expect(parseMemoryBytes('1Gi')).toBe(2 ** 30);
    expect(parseMemoryBytes('512M')).toBe(512e6);
    expect(parseMemoryBytes('1e9')).toBe(1e9);
    expect(parseMemoryBytes('1.5Gi')).toBe(1.5 * 2 ** 30);
    expect(parseMemoryBytes('67108864')).toBe(64 * 2 ** 20);
    expect(parseMemoryBytes(134217728)).toBe(128 * 2 ** 20);
  });
  it('bad quantities and minimums are refused naming the field', () => {
    expect(refusal(() => parseMemoryBytes('12Q')).message).toBe(
      "spec.template.resources.limits.memory '12Q' is not a valid memory quantity: use bytes or a quantity such as 256Mi, 1Gi or 512M",
    );
    expect(refusal(() => parseMemoryBytes('-1Gi')).message).toContain('is not a valid memory quantity');
    expect(refusal(() => parseMemoryBytes('1Mi')).message).toBe("spec.template.resources.limits.memory '1Mi' is below the minimum 16Mi");
    expect(refusal(() => parseCpuMillis('5m')).message).toBe("spec.template.resources.limits.cpu '5m' is below the minimum 10m");
    expect(refusal(() => parseCpuMillis('one')).message).toBe(
      "spec.template.resources.limits.cpu 'one' is not a valid CPU quantity: use cores or millicores, for example 2, 0.5 or 500m",
    );
    expect(refusal(() => parseCpuMillis(true)).message).toBe('spec.template.resources.limits.cpu must be a quantity string or number, got true');
  });
  it('display forms', () => {
    expect(formatCpu(500)).toBe('500m');
    expect(formatCpu(2000)).toBe('2');
    expect(formatMemory(256 * 2 ** 20)).toBe('256Mi');
    expect(formatMemory(1000)).toBe('1000');
  });
});

describe('template.resources', () => {
  it('as upstream CLI sends it: {limits: {cpu, memory}} with string values', () => {
    expect(parseResources(encodeStruct({ limits: { cpu: '0.5', memory: '256Mi' } }))).toEqual({ cpuMillis: 500, memoryBytes: 256 * 2 ** 20 });
    expect(parseResources(encodeStruct({ limits: { pids: 64 } }))).toEqual({ pids: 64 });
    expect(parseResources(undefined)).toEqual({});
    expect(parseResources(Buffer.alloc(0))).toEqual({});
  });
  it('unknown keys, requests and bad shapes are refused naming them', () => {
    expect(refusal(() => parseResources(encodeStruct({ limits: { 'nvidia.com/gpu': '1' } }))).message).toBe(
      'spec.template.resources.limits.nvidia.com/gpu is not supported by sandgate (only limits.cpu, limits.memory and limits.pids are enforced)',
    );
    expect(refusal(() => parseResources(encodeStruct({ requests: { cpu: '1' } }))).message).toMatch(/^spec\.template\.resources\.requests is not supported by sandgate/);
    expect(refusal(() => parseResources(encodeStruct({ cpu: '1' }))).message).toMatch(/^spec\.template\.resources\.cpu is not supported by sandgate/);
    expect(refusal(() => parseResources(encodeStruct({ limits: '1' }))).message).toMatch(/^spec\.template\.resources\.limits must be an object/);
    expect(refusal(() => parseResources(encodeStruct({ limits: { pids: 3 } }))).message).toBe('spec.template.resources.limits.pids 3 is out of range [16, 4194304]');
    expect(refusal(() => parseResources(Buffer.from([0x0a, 0x09, 0x01]))).message).toMatch(/^spec\.template\.resources is not a valid google\.protobuf\.Struct/);
  });
  it('CreateSandbox validation returns the limits', () => {
    const out = validateCreate({
      spec: { environment: {}, providers: [], command: [], template: { labels: {}, annotations: {}, environment: {}, resources: encodeStruct({ limits: { memory: '64Mi' } }) } },
      labels: {},
      annotations: {},
    });
    expect(out.limits).toEqual({ memoryBytes: 64 * 2 ** 20 });
  });
});
