// sandgate service expose|list|get|delete (upstream's `openshell service`, openshell-v1-more.md
// §7.7) and `service url` (a signed public link, sandgate.v1.Sandgate/CreateServiceLink).
// Output: upstream's lines and table, or `-o json` (the responses' proto field names).
//
// Unlike upstream's CLI, URLs are printed as the gateway computed them: sandgate serves services
// on its HTTP port (or a load balancer's, --service-public-port), not on the gRPC port the CLI
// dialled, so rewriting the port would point at the wrong listener.
import { UsageError, parseCommand, parseInteger, parseOutput } from '../args.ts';
import { isServiceError } from '../client.ts';
import type { CommandContext } from '../context.ts';
import { ExitError } from '../errors.ts';
import { formatJson, formatTable } from '../output.ts';
import { GATEWAY_OPTION, withClient, write } from './common.ts';
import { status as Status } from '@grpc/grpc-js';

interface WireEndpoint {
  metadata?: { id?: string; name?: string; workspace?: string; created_at_ms?: number; resource_version?: number };
  sandbox_id?: string;
  sandbox_name?: string;
  service_name?: string;
  target_port?: number;
  domain?: boolean;
}
interface WireEndpointResponse {
  endpoint?: WireEndpoint;
  url?: string;
}

const COMMON = { ...GATEWAY_OPTION, workspace: { type: 'string' }, output: { type: 'string', short: 'o' } } as const;
export const EXPOSE_OPTIONS = COMMON;
export const GET_OPTIONS = COMMON;
export const DELETE_OPTIONS = COMMON;
export const LIST_OPTIONS = { ...COMMON, limit: { type: 'string' }, offset: { type: 'string' }, 'all-workspaces': { type: 'boolean' } } as const;
export const URL_OPTIONS = { ...COMMON, expires: { type: 'string' } } as const;

/**
 * Upstream's error wording for the four commands: "<action> failed: …", the two NOT_FOUND texts
 * kept exactly; anything else as the gateway said it.
 */
async function mapped<T>(action: string, scope: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (!isServiceError(err)) throw err;
    const details = err.details ?? '';
    if (err.code === Status.PERMISSION_DENIED) throw new Error(`${action} failed: permission denied (requires ${scope}): ${details}`);
    if (err.code === Status.UNAUTHENTICATED) throw new Error(`${action} failed: authentication required: ${details}`);
    if (err.code === Status.NOT_FOUND && (details === 'sandbox not found' || details === 'service endpoint not found')) throw new Error(`${action} failed: ${details}`);
    if (err.code === Status.INVALID_ARGUMENT) throw new Error(`${action} failed: invalid request: ${details}`);
    throw err;
  }
}

function endpointJson(r: WireEndpointResponse): unknown {
  const e = r.endpoint ?? {};
  return {
    workspace: e.metadata?.workspace ?? '',
    sandbox: e.sandbox_name ?? '',
    service: e.service_name ?? '',
    target_port: e.target_port ?? 0,
    url: r.url ?? '',
    id: e.metadata?.id ?? '',
    sandbox_id: e.sandbox_id ?? '',
    resource_version: Number(e.metadata?.resource_version ?? 0),
    created_at: e.metadata?.created_at_ms ? new Date(Number(e.metadata.created_at_ms)).toISOString() : '',
  };
}

function table(list: WireEndpointResponse[], withWorkspace: boolean): string {
  const header = [...(withWorkspace ? ['WORKSPACE'] : []), 'SANDBOX', 'SERVICE', 'TARGET', 'URL'];
  const rows = list.map((r) => {
    const e = r.endpoint ?? {};
    return [
      ...(withWorkspace ? [e.metadata?.workspace ?? ''] : []),
      e.sandbox_name ?? '',
      e.service_name || '-',
      `127.0.0.1:${e.target_port ?? 0}`,
      r.url ?? '',
    ];
  });
  return formatTable(header, rows);
}

/** SANDBOX [SERVICE] positionals (plus `extra` required ones in between). */
function sandboxAndService(positionals: string[], command: string, usage: string): { sandbox: string; service: string } {
  if (positionals.length < 1 || positionals.length > 2) throw new UsageError(`give ${usage}`, command);
  return { sandbox: positionals[0]!, service: positionals[1] ?? '' };
}

export async function runExpose(argv: string[], ctx: CommandContext): Promise<number> {
  const command = 'service expose';
  const { values, positionals } = parseCommand(argv, EXPOSE_OPTIONS, command);
  if (positionals.length < 2 || positionals.length > 3) throw new UsageError('give SANDBOX TARGET-PORT [SERVICE]', command);
  const [sandbox, rawPort, service = ''] = positionals as [string, string, string?];
  // As upstream: any u16 reaches the gateway (0 included), which judges the range.
  const targetPort = parseInteger(rawPort, 'TARGET-PORT', 0, 65535);
  const json = parseOutput(values.output);
  return withClient(ctx, values, async (client) => {
    const res = await mapped('expose service', 'sandbox:write', () =>
      client.unary<WireEndpointResponse>('ExposeService', { sandbox, service, target_port: targetPort, domain: true, workspace: values.workspace }),
    );
    if (json) return write(formatJson(endpointJson(res))), 0;
    write(service ? `Exposed service ${service} on sandbox ${sandbox} -> 127.0.0.1:${targetPort}\n` : `Exposed sandbox ${sandbox} -> 127.0.0.1:${targetPort}\n`);
    if (res.url) write(`URL: ${res.url}\n`);
    return 0;
  });
}

export async function runList(argv: string[], ctx: CommandContext): Promise<number> {
  const command = 'service list';
  const { values, positionals } = parseCommand(argv, LIST_OPTIONS, command);
  if (positionals.length > 1) throw new UsageError(`unexpected argument '${positionals[1]}'`, command);
  const all = values['all-workspaces'] === true;
  if (all && values.workspace !== undefined) throw new UsageError('--workspace and --all-workspaces are mutually exclusive', command);
  const sandbox = positionals[0] ?? '';
  const json = parseOutput(values.output);
  const limit = values.limit === undefined ? 100 : parseInteger(values.limit, '--limit', 0, 0xffffffff);
  const offset = values.offset === undefined ? 0 : parseInteger(values.offset, '--offset', 0, 0xffffffff);
  return withClient(ctx, values, async (client) => {
    const res = await mapped('list services', 'sandbox:read', () =>
      client.unary<{ services?: WireEndpointResponse[] }>('ListServices', { sandbox, limit, offset, workspace: all ? '' : values.workspace, all_workspaces: all }),
    );
    const list = res.services ?? [];
    if (json) write(formatJson({ services: list.map(endpointJson) }));
    else if (list.length === 0) write(sandbox ? `No services exposed for sandbox ${sandbox}.\n` : 'No services exposed.\n');
    else write(table(list, all));
    return 0;
  });
}

export async function runGet(argv: string[], ctx: CommandContext): Promise<number> {
  const command = 'service get';
  const { values, positionals } = parseCommand(argv, GET_OPTIONS, command);
  const { sandbox, service } = sandboxAndService(positionals, command, 'SANDBOX [SERVICE]');
  const json = parseOutput(values.output);
  return withClient(ctx, values, async (client) => {
    const res = await mapped('get service', 'sandbox:read', () => client.unary<WireEndpointResponse>('GetService', { sandbox, service, workspace: values.workspace }));
    write(json ? formatJson(endpointJson(res)) : table([res], false));
    return 0;
  });
}

export async function runDelete(argv: string[], ctx: CommandContext): Promise<number> {
  const command = 'service delete';
  const { values, positionals } = parseCommand(argv, DELETE_OPTIONS, command);
  const { sandbox, service } = sandboxAndService(positionals, command, 'SANDBOX [SERVICE]');
  const json = parseOutput(values.output);
  return withClient(ctx, values, async (client) => {
    const res = await mapped('delete service', 'sandbox:write', () => client.unary<{ deleted?: boolean }>('DeleteService', { sandbox, service, workspace: values.workspace }));
    // As upstream: nothing deleted is an error exit.
    if (!res.deleted) {
      if (json) write(formatJson({ deleted: false }));
      process.stderr.write('error: delete service failed: service endpoint not found\n');
      throw new ExitError(1);
    }
    write(json ? formatJson({ deleted: true }) : service ? `Deleted service ${service} on sandbox ${sandbox}\n` : `Deleted service endpoint of sandbox ${sandbox}\n`);
    return 0;
  });
}

/** `--expires`: seconds, or a number with s, m, h or d. */
export function parseExpires(raw: string | undefined, command: string): number {
  if (raw === undefined) return 0;
  const m = /^(\d+)([smhd]?)$/.exec(raw.trim());
  if (!m) throw new UsageError(`--expires must be a duration like 30m, 1h or 7d, got '${raw}'`, command);
  const seconds = Number(m[1]) * { '': 1, s: 1, m: 60, h: 3600, d: 86400 }[m[2] as '' | 's' | 'm' | 'h' | 'd'];
  if (seconds < 1 || seconds > 7 * 86400) throw new UsageError(`--expires must be between 1s and 7d, got '${raw}'`, command);
  return seconds;
}

export async function runUrl(argv: string[], ctx: CommandContext): Promise<number> {
  const command = 'service url';
  const { values, positionals } = parseCommand(argv, URL_OPTIONS, command);
  const { sandbox, service } = sandboxAndService(positionals, command, 'SANDBOX [SERVICE]');
  const expires = parseExpires(values.expires, command);
  const json = parseOutput(values.output);
  return withClient(ctx, values, async (client) => {
    const res = await mapped('service url', 'sandbox:read', () =>
      client.unary<{ url?: string; expires_at_ms?: number }>('CreateServiceLink', { sandbox, service, workspace: values.workspace, expires_in_seconds: expires }),
    );
    if (json) write(formatJson({ url: res.url ?? '', expires_at: new Date(Number(res.expires_at_ms ?? 0)).toISOString() }));
    else write(`${res.url ?? ''}\n`);
    return 0;
  });
}
