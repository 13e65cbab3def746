// sandgate sandbox get NAME [-o json]
import { UsageError, parseCommand, parseOutput } from '../args.ts';
import type { CommandContext } from '../context.ts';
import { formatJson, formatSandboxDetail, sandboxJson, usageJson, type SandboxUsageView } from '../output.ts';
import { GATEWAY_OPTION, withClient, write } from './common.ts';

/** The flags it accepts (the usage test checks each is documented). */
export const OPTIONS = { ...GATEWAY_OPTION, workspace: { type: 'string' }, output: { type: 'string', short: 'o' } } as const;

export async function run(argv: string[], ctx: CommandContext): Promise<number> {
  const { values, positionals } = parseCommand(argv, OPTIONS, 'sandbox get');
  if (positionals.length !== 1) throw new UsageError(positionals.length === 0 ? 'a sandbox NAME is required' : `unexpected argument '${positionals[1]}'`, 'sandbox get');
  const json = parseOutput(values.output);
  return withClient(ctx, values, async (client) => {
    const sandbox = await client.getSandbox(positionals[0]!, values.workspace);
    // CPU and memory from sandgate.v1.Sandgate/GetSandboxUsage (the owner's last driver reading);
    // a gateway without the call (UNIMPLEMENTED) just shows none.
    const usage = await client.unary<SandboxUsageView>('GetSandboxUsage', { sandbox_id: sandbox.metadata?.id ?? '' }).catch(() => undefined);
    if (json) {
      const u = usageJson(usage);
      write(formatJson(u === undefined ? sandboxJson(sandbox) : { ...(sandboxJson(sandbox) as object), usage: u }));
      return 0;
    }
    // The policy in force may be a later revision than spec.policy (UpdateConfig); a gateway
    // without GetSandboxConfig just gets the create-time one described.
    const config = await client
      .unary<{ policy?: Buffer; version?: number }>('GetSandboxConfig', { sandbox_id: sandbox.metadata?.id ?? '' })
      .catch(() => undefined);
    write(formatSandboxDetail(sandbox, Date.now(), config ? { bytes: config.policy, revision: config.version ?? 0 } : undefined, usage));
    return 0;
  });
}
