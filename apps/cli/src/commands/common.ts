// Plumbing shared by the client commands.
import { resolveEndpoint } from '../client-config.ts';
import { createClient, type SandgateClient } from '../client.ts';
import type { CommandContext } from '../context.ts';
import { reportError } from '../errors.ts';

/** `--gateway` on every client command (it may also come before the command). */
export const GATEWAY_OPTION = { gateway: { type: 'string' } } as const;

/**
 * Runs `fn` with a client for the resolved endpoint; gRPC failures are reported as
 * `error: <details>` (exit 1) with the endpoint named when it is unreachable.
 */
export async function withClient(ctx: CommandContext, flag: string | undefined, fn: (client: SandgateClient) => Promise<number>): Promise<number> {
  const endpoint = resolveEndpoint(flag ?? ctx.gateway, ctx.env);
  const client = createClient(endpoint, { token: ctx.env.SANDGATE_TOKEN || undefined });
  try {
    return await fn(client);
  } catch (err) {
    return reportError(err, endpoint);
  } finally {
    client.close();
  }
}

export function write(text: string): void {
  process.stdout.write(text);
}
