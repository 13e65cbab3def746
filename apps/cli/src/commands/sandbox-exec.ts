// sandgate sandbox exec NAME [--workspace W] [--timeout SECS] [--tty] [--workdir D] [--env K=V]... -- CMD...
import { status as Status } from '@grpc/grpc-js';
import type { ExecSandboxRequest } from '@sandgate/protocols';
import { UsageError, parseCommand, parseInteger, parseKeyValues } from '../args.ts';
import { isServiceError } from '../client.ts';
import type { CommandContext } from '../context.ts';
import type { ConnectionFlags } from '../client-config.ts';
import { pumpExec, terminalSize } from '../exec-stream.ts';
import { connectionFlags, GATEWAY_OPTION, withClient } from './common.ts';

/** The flags it accepts (the usage test checks each is documented). */
export const OPTIONS = {
  ...GATEWAY_OPTION,
  workspace: { type: 'string' },
  timeout: { type: 'string' },
  tty: { type: 'boolean' },
  workdir: { type: 'string' },
  env: { type: 'string', multiple: true },
} as const;

export interface ExecArgs {
  name: string;
  /** The workspace NAME is looked up in; undefined: the caller's own. */
  workspace: string | undefined;
  command: string[];
  tty: boolean;
  workdir: string | undefined;
  environment: Record<string, string>;
  timeoutSeconds: number | undefined;
  gateway: string | undefined;
  /** --gateway and the TLS/token flags given to the command. */
  connection: ConnectionFlags;
}

/** Parses exec's flags (pure). The command goes after `--`, or directly after NAME. */
export function parseExecArgs(argv: string[]): ExecArgs {
  const { values, positionals, rest, terminated } = parseCommand(argv, OPTIONS, 'sandbox exec');
  const name = positionals[0];
  if (name === undefined) throw new UsageError('a sandbox NAME is required', 'sandbox exec');
  if (terminated && positionals.length > 1) {
    throw new UsageError(`unexpected argument '${positionals[1]}' before '--': give the whole command after '--'`, 'sandbox exec');
  }
  const command = terminated ? rest : positionals.slice(1);
  if (command.length === 0) throw new UsageError("a command is required: sandgate sandbox exec NAME -- CMD...", 'sandbox exec');
  return {
    name,
    workspace: values.workspace,
    command,
    tty: Boolean(values.tty),
    workdir: values.workdir,
    environment: parseKeyValues(values.env, '--env'),
    timeoutSeconds: values.timeout === undefined ? undefined : parseInteger(values.timeout, '--timeout', 0, 0xffffffff),
    gateway: values.gateway,
    connection: connectionFlags(values),
  };
}

export async function run(argv: string[], ctx: CommandContext): Promise<number> {
  const args = parseExecArgs(argv);
  return withClient(ctx, args.connection, async (client) => {
    // Exec RPCs take the sandbox id. No phase check here: the gateway decides who may exec.
    let id: string | undefined;
    try {
      id = (await client.getSandbox(args.name, args.workspace)).metadata?.id;
    } catch (err) {
      if (isServiceError(err) && err.code === Status.NOT_FOUND) {
        process.stderr.write(`error: sandbox ${args.name} not found\n`);
        return 1;
      }
      throw err;
    }
    if (!id) throw new Error(`sandbox ${args.name} has no id`);
    const start: ExecSandboxRequest = {
      sandbox_id: id,
      command: args.command,
      workdir: args.workdir,
      environment: args.environment,
      timeout_seconds: args.timeoutSeconds,
      tty: args.tty,
      ...(args.tty ? terminalSize(process.stdout) : {}),
    };
    return pumpExec(client.execInteractive(), start, { stdin: process.stdin, stdout: process.stdout, stderr: process.stderr });
  });
}
