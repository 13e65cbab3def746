// Text and JSON rendering for client commands. Pure string builders; callers write them out.
import { phaseName } from '@sandgate/core';
import { toProto3Json, type Sandbox } from '@sandgate/protocols';
import { readyConditionMessage } from './client.ts';

/** A Sandbox as canonical proto3 JSON (an object, ready for JSON.stringify). */
export function sandboxJson(sandbox: Sandbox): unknown {
  return toProto3Json('openshell.v1.Sandbox', sandbox);
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

export function formatSandboxDetail(sandbox: Sandbox, nowMs: number): string {
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
  const width = Math.max(...rows.map(([k]) => k.length)) + 1;
  return rows.map(([k, v]) => `${`${k}:`.padEnd(width)}  ${v}`).join('\n') + '\n';
}
