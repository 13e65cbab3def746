// sandgate sandbox connect NAME: attach to the sandbox's main process. Its recent output is
// replayed, live output follows, and the CLI exits with the main process's exit code once it
// ends. Detaching (Ctrl-C) leaves the main process running.
import { status as Status } from '@grpc/grpc-js';
import { UsageError, parseCommand } from '../args.ts';
import { isServiceError, type SandgateClient } from '../client.ts';
import type { CommandContext } from '../context.ts';
import { pumpExec, terminalSize } from '../exec-stream.ts';
import { GATEWAY_OPTION, withClient } from './common.ts';

/** The argv the gateway treats as "attach to the main process" (upstream's subsystem name). */
export const MAIN_ATTACH_COMMAND = 'openshell-main';

/** The flags it accepts (the usage test checks each is documented). */
export const OPTIONS = { ...GATEWAY_OPTION, workspace: { type: 'string' } } as const;

export function attachToMain(client: SandgateClient, sandboxId: string, tty: boolean): Promise<number> {
  const interactive = tty && Boolean(process.stdin.isTTY);
  return pumpExec(
    client.execInteractive(),
    {
      sandbox_id: sandboxId,
      command: [MAIN_ATTACH_COMMAND],
      environment: {},
      tty: interactive,
      ...(interactive ? terminalSize(process.stdout) : {}),
    },
    { stdin: process.stdin, stdout: process.stdout, stderr: process.stderr },
  );
}

export async function run(argv: string[], ctx: CommandContext): Promise<number> {
  const { values, positionals } = parseCommand(argv, OPTIONS, 'sandbox connect');
  const name = positionals[0];
  if (name === undefined || positionals.length > 1) throw new UsageError('give exactly one sandbox NAME', 'sandbox connect');
  return withClient(ctx, values, async (client) => {
    try {
      const sandbox = await client.getSandbox(name, values.workspace);
      return attachToMain(client, sandbox.metadata!.id!, Boolean(sandbox.spec?.tty));
    } catch (err) {
      if (isServiceError(err) && err.code === Status.NOT_FOUND) {
        process.stderr.write(`error: sandbox ${name} not found\n`);
        return 1;
      }
      throw err;
    }
  });
}
