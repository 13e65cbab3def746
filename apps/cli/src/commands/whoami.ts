// sandgate whoami [-o json]: who the gateway takes this caller for (GetCurrentUser), as upstream's
// `openshell whoami` prints it.
import { status as Status } from '@grpc/grpc-js';
import { UsageError, parseCommand, parseOutput } from '../args.ts';
import { isServiceError } from '../client.ts';
import type { CommandContext } from '../context.ts';
import { formatJson } from '../output.ts';
import { GATEWAY_OPTION, withClient, write } from './common.ts';

export const OPTIONS = { ...GATEWAY_OPTION, output: { type: 'string', short: 'o' } } as const;

interface CurrentUser {
  subject?: string;
  display_name?: string;
  roles?: string[];
  scopes?: string[];
  identity_provider?: string;
}

export async function run(argv: string[], ctx: CommandContext): Promise<number> {
  const { values, positionals } = parseCommand(argv, OPTIONS, 'whoami');
  if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`, 'whoami');
  const json = parseOutput(values.output);
  return withClient(ctx, values, async (client) => {
    let user: CurrentUser;
    try {
      user = await client.unary<CurrentUser>('GetCurrentUser', {});
    } catch (err) {
      if (isServiceError(err) && err.code === Status.UNIMPLEMENTED) throw new Error('whoami is not supported by this gateway version');
      if (isServiceError(err) && err.code === Status.UNAUTHENTICATED) throw new Error(`whoami requires authentication: ${err.details} (give --token or SANDGATE_TOKEN)`);
      throw err;
    }
    const roles = user.roles ?? [];
    const scopes = user.scopes ?? [];
    if (json) {
      write(formatJson({ subject: user.subject ?? '', display_name: user.display_name || null, identity_provider: user.identity_provider ?? '', roles, scopes }));
      return 0;
    }
    const lines = [`Subject:  ${user.subject ?? ''}`];
    if (user.display_name) lines.push(`Name:     ${user.display_name}`);
    lines.push(`Provider: ${user.identity_provider ?? ''}`, `Roles:    ${roles.join(', ')}`, `Scopes:   ${scopes.join(', ')}`);
    write(`${lines.join('\n')}\n`);
    return 0;
  });
}
