// sandgate ssh-proxy: an OpenSSH ProxyCommand. Pipes stdin/stdout over ForwardTcp to the
// sandbox's SSH server, with back-pressure both ways, and exits when either side closes.
//   token mode: sandgate ssh-proxy --sandbox-id ID --token T
//   name mode:  sandgate ssh-proxy --name NAME   (mints a fresh session each time, revokes it after)
import type { ServiceError } from '@grpc/grpc-js';
import type { TcpForwardFrame } from '@sandgate/protocols';
import { UsageError, parseCommand } from '../args.ts';
import { isServiceError, statusName, type SandgateClient } from '../client.ts';
import type { CommandContext } from '../context.ts';
import { describeGrpcError } from '../errors.ts';
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
export function pipeForward(client: SandgateClient, init: { sandbox_id: string; authorization_token: string; service_id: string }, io: ForwardIo): Promise<number> {
  return new Promise((resolve) => {
    const call = client.forwardTcp();
    let settled = false;
    let inputOpen = true;
    const finish = (code: number) => {
      if (settled) return;
      settled = true;
      io.stdin.pause();
      resolve(code);
    };

    call.write({ init: { ...init, ssh: {} } });

    // Our stdin → the sandbox. A full call pauses stdin (and so the ssh client's writes).
    io.stdin.on('data', (chunk: Buffer | string) => {
      if (!inputOpen) return;
      const data = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      if (!call.write({ data })) {
        io.stdin.pause();
        call.once('drain', () => {
          if (!settled) io.stdin.resume();
        });
      }
    });
    // ssh closed our stdin: half-close; the server closes once the sandbox side is done.
    const endInput = () => {
      if (!inputOpen) return;
      inputOpen = false;
      call.end();
    };
    io.stdin.once('end', endInput);
    io.stdin.once('error', endInput);

    // The sandbox → our stdout. A full stdout pauses the call (HTTP/2 flow control does the rest).
    let paused = false;
    call.on('data', (frame: TcpForwardFrame) => {
      if (!frame.data || frame.data.length === 0) return;
      if (!io.stdout.write(frame.data) && !paused) {
        paused = true;
        call.pause();
        io.stdout.once('drain', () => {
          paused = false;
          call.resume();
        });
      }
    });
    call.on('error', (err: ServiceError) => {
      io.stderr.write(proxyErrorLine(err, client.endpoint));
      finish(1);
    });
    // The server ended the call with OK: flush what we have, then go.
    call.on('end', () => io.stdout.write('', () => finish(0)));
    io.stdin.resume();
  });
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
