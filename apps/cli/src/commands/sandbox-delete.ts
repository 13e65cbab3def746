// sandgate sandbox delete NAME...
import { status as Status } from '@grpc/grpc-js';
import { UsageError, parseCommand } from '../args.ts';
import { isServiceError } from '../client.ts';
import type { CommandContext } from '../context.ts';
import { describeGrpcError } from '../errors.ts';
import { GATEWAY_OPTION, withClient, write } from './common.ts';

/** The flags it accepts (the usage test checks each is documented). */
export const OPTIONS = { ...GATEWAY_OPTION, workspace: { type: 'string' } } as const;

export async function run(argv: string[], ctx: CommandContext): Promise<number> {
  const { values, positionals } = parseCommand(argv, OPTIONS, 'sandbox delete');
  if (positionals.length === 0) throw new UsageError('at least one sandbox NAME is required', 'sandbox delete');
  return withClient(ctx, values, async (client) => {
    let failed = false;
    for (const name of positionals) {
      try {
        await client.deleteSandbox(name, values.workspace);
        write(`deleted ${name}\n`);
      } catch (err) {
        failed = true;
        const message = isServiceError(err) && err.code === Status.NOT_FOUND ? `sandbox ${name} not found` : describeGrpcError(err, client.endpoint);
        process.stderr.write(`error: ${message}\n`);
      }
    }
    return failed ? 1 : 0;
  });
}
