import { describe, expect, it } from 'vitest';
import { SandboxPhase, type Sandbox } from '@sandgate/protocols';
import { formatAge, formatBytes, formatLabels, formatSandboxDetail, formatSandboxList, formatTable, sandboxJson, usageJson } from '../src/output.ts';

const NOW = Date.UTC(2025, 0, 1, 12, 0, 0);

const sandbox: Sandbox = {
  metadata: { id: 'id-1', name: 'demo', created_at_ms: NOW - 90_000, labels: { team: 'ml', a: 'b' }, annotations: {}, resource_version: 3 },
  spec: { environment: {}, providers: [], command: ['sleep', 'infinity'] },
  status: {
    conditions: [{ type: 'Ready', status: 'True', reason: 'Ready', message: 'connected' }],
    phase: SandboxPhase.READY,
  },
};

describe('output', () => {
  it('formats ages like kubectl', () => {
    expect(formatAge(NOW - 5_000, NOW)).toBe('5s');
    expect(formatAge(NOW - 600_000, NOW)).toBe('10m');
    expect(formatAge(NOW - 3 * 3600_000, NOW)).toBe('3h');
    expect(formatAge(NOW - 5 * 86400_000, NOW)).toBe('5d');
    expect(formatAge(undefined, NOW)).toBe('<unknown>');
  });

  it('aligns table columns', () => {
    expect(formatTable(['A', 'BB'], [['xyz', '1'], ['q', '22']])).toBe('A     BB\nxyz   1\nq     22\n');
  });

  it('lists sandboxes as NAME / ID / PHASE / AGE', () => {
    expect(formatSandboxList([sandbox], NOW)).toBe('NAME   ID     PHASE   AGE\ndemo   id-1   Ready   90s\n');
  });

  it('describes one sandbox', () => {
    const text = formatSandboxDetail(sandbox, NOW);
    expect(text).toContain('Name:     demo');
    expect(text).toContain('Id:       id-1');
    expect(text).toContain('Phase:    Ready');
    expect(text).toContain(`Created:  ${new Date(NOW - 90_000).toISOString()} (90s ago)`);
    expect(text).toContain('Labels:   a=b,team=ml');
    expect(formatLabels({})).toBe('<none>');
  });

  it('renders canonical proto3 JSON', () => {
    const json = sandboxJson(sandbox) as Record<string, Record<string, unknown>>;
    expect(json.metadata).toMatchObject({ id: 'id-1', createdAtMs: String(NOW - 90_000), resourceVersion: '3', labels: { team: 'ml' } });
    expect(json.status).toMatchObject({ phase: 'SANDBOX_PHASE_READY' });
  });

  it('shows the usage GetSandboxUsage reports, and nothing when there is none', () => {
    const usage = { available: true, cpu_seconds: 1.234, memory_bytes: 50 * 1024 * 1024 + 512 * 1024, sampled_at_ms: NOW - 5_000, replica_id: 'r1' };
    expect(formatSandboxDetail(sandbox, NOW, undefined, usage)).toContain('Usage:    CPU 1.23 s, memory 50.5 MiB (read 5s ago)\n');
    expect(formatSandboxDetail(sandbox, NOW, undefined, { available: false })).not.toContain('Usage');
    expect(usageJson(usage)).toEqual({ cpuSeconds: 1.234, memoryBytes: 52953088, sampledAtMs: NOW - 5_000, replicaId: 'r1' });
    expect(usageJson({ available: false })).toBeUndefined();
    expect(usageJson(undefined)).toBeUndefined();
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(1536)).toBe('1.5 KiB');
  });
});
