// Plumbing shared by the client commands.
import { CONNECTION_OPTIONS, resolveConnection, type Connection, type ConnectionFlags } from '../client-config.ts';
import { createClient, type SandgateClient } from '../client.ts';
import type { CommandContext } from '../context.ts';
import { reportError } from '../errors.ts';

/**
 * `--gateway`, `--token`, `--ca`, `--client-cert`, `--client-key` and `--tls-server-name` on
 * every client command (they may also come before the command).
 */
export const GATEWAY_OPTION = CONNECTION_OPTIONS;

/** The connection flags among a command's parsed values. */
export function connectionFlags(values: ConnectionFlags): ConnectionFlags {
  const out: ConnectionFlags = {};
  for (const k of Object.keys(CONNECTION_OPTIONS) as (keyof ConnectionFlags)[]) if (values[k] !== undefined) out[k] = values[k];
  return out;
}

/** The connection for a command: its own flags over those given before the command. */
export function connectionFor(ctx: CommandContext, flags: ConnectionFlags = {}): Connection {
  const merged: ConnectionFlags = { ...ctx.connection };
  for (const [k, v] of Object.entries(flags) as [keyof ConnectionFlags, string | undefined][]) if (v !== undefined) merged[k] = v;
  if (merged.gateway === undefined && ctx.gateway !== undefined) merged.gateway = ctx.gateway;
  return resolveConnection(merged, ctx.env);
}

/**
 * Runs `fn` with a client for the resolved connection (flags, variables and the client config
 * file, read once); gRPC failures are reported as `error: <details>` (exit 1) with the endpoint
 * named when it is unreachable. `flags`: the command's parsed values (or just its --gateway).
 */
export async function withClient(
  ctx: CommandContext,
  flags: ConnectionFlags | string | undefined,
  fn: (client: SandgateClient, connection: Connection) => Promise<number>,
): Promise<number> {
  const connection = connectionFor(ctx, typeof flags === 'string' ? { gateway: flags } : (flags ?? {}));
  const client = createClient(connection.endpoint, { token: connection.token, tls: connection.tls });
  ctx.log?.debug('connection', {
    endpoint: connection.endpoint,
    tls: connection.tls !== null,
    ca_file: connection.tls?.caFile,
    client_cert_file: connection.tls?.certFile,
    tls_server_name: connection.tls?.servername,
    // Whether a token is sent, never the token.
    token: connection.token !== undefined,
  });
  try {
    return await fn(client, connection);
  } catch (err) {
    // The whole error (gRPC status, details, cause, stack) behind the one-line `error:` below.
    ctx.log?.debug('command failed', { err });
    return reportError(err, connection.endpoint);
  } finally {
    client.close();
  }
}

export function write(text: string): void {
  process.stdout.write(text);
}
