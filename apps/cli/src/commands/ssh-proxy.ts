// sandgate ssh-proxy: an OpenSSH ProxyCommand. Pipes stdin/stdout over ForwardTcp to the
// sandbox's SSH server, with back-pressure both ways, and exits when either side closes.
//   token mode: sandgate ssh-proxy --sandbox-id ID --token T
//   name mode:  sandgate ssh-proxy --name NAME   (mints a fresh session each time, revokes it after)
import { UsageError, parseCommand } from '../args.ts';
import { isServiceError, statusName, type SandgateClient } from '../client.ts';
import type { CommandContext } from '../context.ts';
import { describeGrpcError } from '../errors.ts';
import { pipeOverForward } from '../forward-stream.ts';
import { connectionFlags, GATEWAY_OPTION, withClient } from './common.ts';

/** The flags it accepts (the usage test checks each is documented). */
export const OPTIONS = {
  ...GATEWAY_OPTION,
  'sandbox-id': { type: 'string' },
  token: { type: 'string' },
  name: { type: 'string' },
  workspace: { type: 'string' },
} as const;

/**
 * What ssh shows when the proxy fails: the gRPC status name first, so people and scripts can
 * tell "retry" (UNAVAILABLE) from "fix something" (NOT_FOUND, UNAUTHENTICATED, …).
 */
export function proxyErrorLine(err: unknown, endpoint: string): string {
  const prefix = isServiceError(err) ? `${statusName(err.code)}: ` : '';
  return `sandgate ssh-proxy: ${prefix}${describeGrpcError(err, endpoint)}\n`;
}

export interface ForwardIo {
  stdin: NodeJS.ReadableStream & { pause(): unknown; resume(): unknown };
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
}

/**
 * Relays `io` over one ForwardTcp call to the sandbox's SSH server. Resolves with 0 when the
 * server closed the connection, 1 (after printing why) when the call failed.
 */
export async function pipeForward(client: SandgateClient, init: { sandbox_id: string; authorization_token: string; service_id: string }, io: ForwardIo): Promise<number> {
  const err = await pipeOverForward(client.forwardTcp(), { ...init, ssh: {} }, { input: io.stdin, output: io.stdout, endOutput: false });
  if (!err) return 0;
  io.stderr.write(proxyErrorLine(err, client.endpoint));
  return 1;
}

export async function run(argv: string[], ctx: CommandContext): Promise<number> {
  const { values, positionals } = parseCommand(argv, OPTIONS, 'ssh-proxy');
  if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`, 'ssh-proxy');
  const byName = values.name !== undefined;
  if (byName && (values['sandbox-id'] !== undefined || values.token !== undefined)) {
    throw new UsageError('give either --name, or --sandbox-id with --token', 'ssh-proxy');
  }
  if (!byName && values.workspace !== undefined) throw new UsageError('--workspace goes with --name', 'ssh-proxy');
  if (!byName && (!values['sandbox-id'] || !values.token)) {
    throw new UsageError('--sandbox-id and --token are required (or --name to mint a session)', 'ssh-proxy');
  }
  // Its --token is the SSH session token; the bearer comes from before the command, SANDGATE_TOKEN or the config file.
  return withClient(ctx, { ...connectionFlags(values), token: undefined }, async (client) => {
    let sandboxId = values['sandbox-id'] ?? '';
    let token = values.token ?? '';
    if (byName) {
      try {
        const sandbox = await client.getSandbox(values.name!, values.workspace);
        sandboxId = sandbox.metadata?.id ?? '';
        token = (await client.createSshSession(sandboxId)).token;
      } catch (err) {
        process.stderr.write(proxyErrorLine(err, client.endpoint));
        return 1;
      }
    }
    const io = { stdin: process.stdin, stdout: process.stdout, stderr: process.stderr };
    const code = await pipeForward(client, { sandbox_id: sandboxId, authorization_token: token, service_id: `ssh-proxy:${sandboxId}` }, io);
    // A session minted for this one connection is of no further use: void it (best effort).
    if (byName) await client.revokeSshSession(token, { deadline: Date.now() + 1000 }).catch(() => undefined);
    return code;
  });
}
