// Workspace rules that need no I/O (openshell-v1-more.md §10.3, §10.8): name syntax with
// upstream's messages, and who may grant what.
import { invalid } from './status.ts';
import { MAX_NAME_LEN } from './limits.ts';

/** CreateWorkspace's name checks, in upstream's order and wording. */
export function validateWorkspaceName(name: string): void {
  if (name.length === 0) throw invalid('workspace name is required');
  const bytes = Buffer.byteLength(name);
  if (bytes > MAX_NAME_LEN) throw invalid(`workspace name exceeds maximum length (${bytes} > ${MAX_NAME_LEN})`);
  if (!/^[a-z0-9-]+$/.test(name)) throw invalid('workspace name must contain only lowercase alphanumeric characters or hyphens');
  if (name.startsWith('-') || name.endsWith('-')) throw invalid('workspace name must not start or end with a hyphen');
  if (name.includes('--')) throw invalid('workspace name must not contain consecutive hyphens');
}

/** Upstream's page rule for workspaces and members: 0 means 100, capped at 1000. */
export function workspacePageLimit(limit: number | undefined): number {
  if (!limit) return 100;
  return Math.min(limit, 1000);
}
