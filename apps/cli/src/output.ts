// Text and JSON rendering for client commands. Pure string builders; callers write them out.
import { decodePolicy, formatCpu, formatMemory, parseResources, phaseName } from '@sandgate/core';
import { decodeStruct, toProto3Json, type Sandbox } from '@sandgate/protocols';
import { readyConditionMessage } from './client.ts';

/**
 * A Sandbox as canonical proto3 JSON (an object, ready for JSON.stringify). spec.policy and
 * template.resources travel as opaque bytes (openshell.proto); they are shown as what they are,
 * a SandboxPolicy and a Struct, exactly as upstream's full schema renders them.
 */
export function sandboxJson(sandbox: Sandbox): unknown {
  const json = toProto3Json('openshell.v1.Sandbox', sandbox) as { spec?: { policy?: unknown; template?: { resources?: unknown } } };
  const spec = sandbox.spec;
  if (json.spec && spec?.policy) {
    try {
      json.spec.policy = toProto3Json('openshell.sandbox.v1.SandboxPolicy', decodePolicy(spec.policy));
    } catch {
      // Not decodable (written by something else): left as base64, still proto3 JSON of bytes.
    }
  }
  if (json.spec?.template && spec?.template?.resources) {
    try {
      json.spec.template.resources = decodeStruct(spec.template.resources);
    } catch {
      // as above
    }
  }
  return json;
}

export function formatJson(value: unknown): string {
  return JSON.stringify(value, null, 2) + '\n';
}

/** Left-aligned columns separated by three spaces; the last column is not padded. */
export function formatTable(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('   ')
      .trimEnd();
  return [header, ...rows].map(line).join('\n') + '\n';
}

/** kubectl-style age: 45s, 12m, 3h, 5d. */
export function formatAge(createdAtMs: number | undefined, nowMs: number): string {
  if (!createdAtMs) return '<unknown>';
  const s = Math.max(0, Math.floor((nowMs - createdAtMs) / 1000));
  if (s < 120) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 120) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h`;
  return `${Math.floor(h / 24)}d`;
}

export function formatLabels(labels: Record<string, string> | undefined): string {
  const entries = Object.entries(labels ?? {}).sort(([a], [b]) => a.localeCompare(b));
  return entries.length === 0 ? '<none>' : entries.map(([k, v]) => `${k}=${v}`).join(',');
}

export function formatSandboxList(sandboxes: Sandbox[], nowMs: number): string {
  return formatTable(
    ['NAME', 'ID', 'PHASE', 'AGE'],
    sandboxes.map((s) => [s.metadata?.name ?? '', s.metadata?.id ?? '', phaseName(s.status?.phase), formatAge(s.metadata?.created_at_ms, nowMs)]),
  );
}

/** `cpu 500m, memory 256Mi` from template.resources, or '' when it sets none. */
function limitsText(sandbox: Sandbox): string {
  const bytes = sandbox.spec?.template?.resources;
  if (!bytes) return '';
  try {
    const l = parseResources(bytes);
    return [
      l.cpuMillis !== undefined ? `cpu ${formatCpu(l.cpuMillis)}` : '',
      l.memoryBytes !== undefined ? `memory ${formatMemory(l.memoryBytes)}` : '',
      l.pids !== undefined ? `pids ${l.pids}` : '',
      l.diskBytes !== undefined ? `disk ${formatMemory(l.diskBytes)}` : '',
    ].filter(Boolean).join(', ');
  } catch {
    return '<unreadable>';
  }
}

/** The policy's endpoints (`api.github.com:443, *.example.com:80,443`), or `none`. */
function egressText(bytes: Uint8Array | undefined): string {
  if (!bytes) return 'none (no policy)';
  try {
    const endpoints = Object.values(decodePolicy(bytes).network_policies).flatMap((rule) =>
      rule.endpoints.map((e) => `${e.host ?? ''}:${(e.ports.length > 0 ? e.ports : [e.port ?? 0]).join(',')}`),
    );
    return endpoints.length > 0 ? endpoints.join(', ') : 'none (the policy allows no endpoint)';
  } catch {
    return '<unreadable policy>';
  }
}

/**
 * `policy`: the policy in force and its revision (GetSandboxConfig), when the caller fetched it;
 * otherwise the create-time spec.policy is described.
 */
/** A sandbox's usage as GetSandboxUsage answers it (sandgate.v1.Sandgate). */
export interface SandboxUsageView {
  available?: boolean;
  cpu_seconds?: number;
  memory_bytes?: number;
  sampled_at_ms?: number;
  replica_id?: string;
}

/** `-o json`'s `usage` object (proto3 JSON names, like the rest), or undefined when there is none. */
export function usageJson(usage: SandboxUsageView | undefined): unknown {
  if (!usage?.available) return undefined;
  return { cpuSeconds: usage.cpu_seconds ?? 0, memoryBytes: usage.memory_bytes ?? 0, sampledAtMs: usage.sampled_at_ms ?? 0, replicaId: usage.replica_id ?? '' };
}

/** 1536 → "1.5 KiB". */
export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

export function formatSandboxDetail(
  sandbox: Sandbox,
  nowMs: number,
  policy?: { bytes?: Uint8Array; revision: number },
  usage?: SandboxUsageView,
): string {
  const meta = sandbox.metadata;
  const created = meta?.created_at_ms ? `${new Date(meta.created_at_ms).toISOString()} (${formatAge(meta.created_at_ms, nowMs)} ago)` : '<unknown>';
  const rows: [string, string][] = [
    ['Name', meta?.name ?? ''],
    ['Id', meta?.id ?? ''],
    ['Phase', phaseName(sandbox.status?.phase)],
    ['Created', created],
    ['Labels', formatLabels(meta?.labels)],
  ];
  const command = sandbox.spec?.command ?? [];
  if (command.length > 0) rows.push(['Command', command.join(' ')]);
  const message = readyConditionMessage(sandbox);
  if (message) rows.push(['Message', message]);
  if (sandbox.status?.exit_code !== undefined) rows.push(['Exit code', String(sandbox.status.exit_code)]);
  const limits = limitsText(sandbox);
  if (limits) rows.push(['Limits', limits]);
  const egress = egressText(policy ? policy.bytes : sandbox.spec?.policy);
  rows.push(['Egress', policy && policy.revision > 0 ? `${egress} (policy revision ${policy.revision})` : egress]);
  if (usage?.available) {
    const age = usage.sampled_at_ms ? ` (read ${formatAge(usage.sampled_at_ms, nowMs)} ago)` : '';
    rows.push(['Usage', `CPU ${(usage.cpu_seconds ?? 0).toFixed(2)} s, memory ${formatBytes(usage.memory_bytes ?? 0)}${age}`]);
  }
  const width = Math.max(...rows.map(([k]) => k.length)) + 1;
  return rows.map(([k, v]) => `${`${k}:`.padEnd(width)}  ${v}`).join('\n') + '\n';
}
