// sandgate workspace create|get|list|delete and sandgate workspace member add|remove|list: the
// seven workspace RPCs (openshell-v1-more.md §10.12), the way upstream's `openshell workspace`
// sends them. Output: a line or a table, or `-o json` (proto3 JSON field names).
import { UsageError, parseCommand, parseInteger, parseOutput } from '../args.ts';
import type { CommandContext } from '../context.ts';
import { formatAge, formatJson, formatLabels, formatTable } from '../output.ts';
import { GATEWAY_OPTION, withClient, write } from './common.ts';

interface WireMeta {
  id?: string;
  name?: string;
  created_at_ms?: number | string;
  labels?: Record<string, string>;
  resource_version?: number | string;
  workspace?: string;
}
interface WireWorkspace {
  metadata?: WireMeta;
  status?: { phase?: number };
}
interface WireMember {
  metadata?: WireMeta;
  principal_subject?: string;
  role?: number;
}

const phaseName = (p: number | undefined) => (p === 2 ? 'Terminating' : 'Active');
const roleName = (r: number | undefined) => (r === 1 ? 'user' : r === 2 ? 'admin' : 'unknown');

function workspaceJson(w: WireWorkspace): unknown {
  const m = w.metadata ?? {};
  return {
    name: m.name ?? '',
    id: m.id ?? '',
    resource_version: Number(m.resource_version ?? 0),
    created_at: m.created_at_ms ? new Date(Number(m.created_at_ms)).toISOString() : '',
    labels: m.labels ?? {},
    status: phaseName(w.status?.phase),
  };
}

function memberJson(m: WireMember): unknown {
  return { subject: m.principal_subject ?? '', role: roleName(m.role), workspace: m.metadata?.workspace ?? '' };
}

/** `--label k=v` (repeatable): split at the first '='; a label without '=' is refused, not dropped. */
function parseLabels(raw: string[] | undefined, command: string): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const item of raw ?? []) {
    const eq = item.indexOf('=');
    if (eq <= 0) throw new UsageError(`--label must be KEY=VALUE, got '${item}'`, command);
    labels[item.slice(0, eq)] = item.slice(eq + 1);
  }
  return labels;
}

function pageArgs(values: { limit?: string; offset?: string }): { limit?: number; offset?: number } {
  return {
    limit: values.limit === undefined ? undefined : parseInteger(values.limit, '--limit', 0, 0xffffffff),
    offset: values.offset === undefined ? undefined : parseInteger(values.offset, '--offset', 0, 0xffffffff),
  };
}

// ---- workspace create|get|list|delete ----------------------------------------------------------

export const CREATE_OPTIONS = { ...GATEWAY_OPTION, name: { type: 'string' }, label: { type: 'string', multiple: true }, output: { type: 'string', short: 'o' } } as const;

export async function runCreate(argv: string[], ctx: CommandContext): Promise<number> {
  const command = 'workspace create';
  const { values, positionals } = parseCommand(argv, CREATE_OPTIONS, command);
  if (positionals.length > 1 || (positionals.length === 1 && values.name !== undefined)) throw new UsageError('give one workspace NAME (or --name NAME)', command);
  const name = values.name ?? positionals[0];
  if (!name) throw new UsageError('a workspace NAME is required', command);
  const json = parseOutput(values.output);
  const labels = parseLabels(values.label, command);
  return withClient(ctx, values, async (client) => {
    const res = await client.unary<{ workspace?: WireWorkspace }>('CreateWorkspace', { name, labels });
    write(json ? formatJson(workspaceJson(res.workspace ?? {})) : `Created workspace ${name}\n`);
    return 0;
  });
}

export const GET_OPTIONS = { ...GATEWAY_OPTION, output: { type: 'string', short: 'o' } } as const;

export async function runGet(argv: string[], ctx: CommandContext): Promise<number> {
  const command = 'workspace get';
  const { values, positionals } = parseCommand(argv, GET_OPTIONS, command);
  if (positionals.length !== 1) throw new UsageError('give exactly one workspace NAME', command);
  const json = parseOutput(values.output);
  return withClient(ctx, values, async (client) => {
    const res = await client.unary<{ workspace?: WireWorkspace }>('GetWorkspace', { name: positionals[0] });
    const w = res.workspace ?? {};
    if (json) write(formatJson(workspaceJson(w)));
    else {
      const m = w.metadata ?? {};
      write(
        [
          `Name:              ${m.name ?? ''}`,
          `Id:                ${m.id ?? ''}`,
          `Status:            ${phaseName(w.status?.phase)}`,
          `Resource version:  ${Number(m.resource_version ?? 0)}`,
          ...(m.created_at_ms ? [`Created:           ${new Date(Number(m.created_at_ms)).toISOString()}`] : []),
          `Labels:            ${formatLabels(m.labels)}`,
        ].join('\n') + '\n',
      );
    }
    return 0;
  });
}

export const LIST_OPTIONS = {
  ...GATEWAY_OPTION,
  limit: { type: 'string' },
  offset: { type: 'string' },
  'label-selector': { type: 'string' },
  output: { type: 'string', short: 'o' },
} as const;

export async function runList(argv: string[], ctx: CommandContext): Promise<number> {
  const command = 'workspace list';
  const { values, positionals } = parseCommand(argv, LIST_OPTIONS, command);
  if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`, command);
  const json = parseOutput(values.output);
  return withClient(ctx, values, async (client) => {
    const res = await client.unary<{ workspaces?: WireWorkspace[] }>('ListWorkspaces', { ...pageArgs(values), label_selector: values['label-selector'] });
    const list = res.workspaces ?? [];
    if (json) write(formatJson({ workspaces: list.map(workspaceJson) }));
    else if (list.length === 0) write('No workspaces found.\n');
    else {
      const now = Date.now();
      write(
        formatTable(
          ['NAME', 'STATUS', 'CREATED', 'LABELS'],
          list.map((w) => [w.metadata?.name ?? '', phaseName(w.status?.phase), formatAge(Number(w.metadata?.created_at_ms ?? 0), now), formatLabels(w.metadata?.labels)]),
        ),
      );
    }
    return 0;
  });
}

export const DELETE_OPTIONS = GATEWAY_OPTION;

export async function runDelete(argv: string[], ctx: CommandContext): Promise<number> {
  const command = 'workspace delete';
  const { values, positionals } = parseCommand(argv, DELETE_OPTIONS, command);
  if (positionals.length === 0) throw new UsageError('at least one workspace NAME is required', command);
  return withClient(ctx, values, async (client) => {
    // As upstream: one call per name, in order; the first error stops the loop.
    for (const name of positionals) {
      const res = await client.unary<{ deleted?: boolean }>('DeleteWorkspace', { name });
      write(res.deleted ? `Deleted workspace ${name}\n` : `Workspace ${name} not found\n`);
    }
    return 0;
  });
}

// ---- workspace member add|remove|list --------------------------------------------------------

export const MEMBER_OPTIONS = {
  ...GATEWAY_OPTION,
  workspace: { type: 'string' },
  subject: { type: 'string' },
  role: { type: 'string' },
  limit: { type: 'string' },
  offset: { type: 'string' },
  output: { type: 'string', short: 'o' },
} as const;

export async function runMember(argv: string[], ctx: CommandContext): Promise<number> {
  const command = 'workspace member';
  const { values, positionals } = parseCommand(argv, MEMBER_OPTIONS, command);
  const action = positionals[0];
  if (positionals.length !== 1 || !['add', 'remove', 'list'].includes(action!)) throw new UsageError('give one of add, remove or list', command);
  const workspace = values.workspace;
  if (!workspace) throw new UsageError('--workspace is required', command);
  const json = parseOutput(values.output);
  const needSubject = () => {
    if (!values.subject) throw new UsageError('--subject is required', command);
    return values.subject;
  };
  const refuse = (flag: string) => {
    throw new UsageError(`--${flag} applies to 'member list' only`, command);
  };
  if (action !== 'list') {
    if (values.limit !== undefined) refuse('limit');
    if (values.offset !== undefined) refuse('offset');
  }
  if (action !== 'add' && values.role !== undefined) throw new UsageError("--role applies to 'member add' only", command);
  if (action === 'list' && values.subject !== undefined) throw new UsageError("--subject applies to 'member add' and 'member remove' only", command);

  if (action === 'add') {
    const subject = needSubject();
    const raw = (values.role ?? '').toLowerCase();
    if (raw !== 'user' && raw !== 'admin') throw new UsageError(`invalid role '${values.role ?? ''}': must be 'user' or 'admin'`, command);
    return withClient(ctx, values, async (client) => {
      const res = await client.unary<{ member?: WireMember }>('AddWorkspaceMember', { workspace, principal_subject: subject, role: raw === 'admin' ? 2 : 1 });
      write(json ? formatJson(memberJson(res.member ?? {})) : `Added ${subject} to workspace ${workspace} as ${raw}\n`);
      return 0;
    });
  }
  if (action === 'remove') {
    const subject = needSubject();
    return withClient(ctx, values, async (client) => {
      const res = await client.unary<{ removed?: boolean }>('RemoveWorkspaceMember', { workspace, principal_subject: subject });
      if (json) write(formatJson({ removed: Boolean(res.removed) }));
      else write(res.removed ? `Removed ${subject} from workspace ${workspace}\n` : `Member ${subject} not found in workspace ${workspace}\n`);
      return 0;
    });
  }
  return withClient(ctx, values, async (client) => {
    const res = await client.unary<{ members?: WireMember[] }>('ListWorkspaceMembers', { workspace, ...pageArgs(values) });
    const members = res.members ?? [];
    if (json) write(formatJson({ members: members.map(memberJson) }));
    else if (members.length === 0) write(`No members found in workspace ${workspace}.\n`);
    else write(formatTable(['SUBJECT', 'ROLE'], members.map((m) => [m.principal_subject ?? '', roleName(m.role)])));
    return 0;
  });
}
