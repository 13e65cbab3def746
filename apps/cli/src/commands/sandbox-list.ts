// sandgate sandbox list [-o json] [--selector k=v,...] [--limit N] [--workspace W | --all-workspaces]
import { UsageError, parseCommand, parseInteger, parseOutput } from '../args.ts';
import type { CommandContext } from '../context.ts';
import { formatJson, formatSandboxList, sandboxJson } from '../output.ts';
import { GATEWAY_OPTION, withClient, write } from './common.ts';

/** The flags it accepts (the usage test checks each is documented). */
export const OPTIONS = {
  ...GATEWAY_OPTION,
  output: { type: 'string', short: 'o' },
  selector: { type: 'string' },
  limit: { type: 'string' },
  workspace: { type: 'string' },
  'all-workspaces': { type: 'boolean' },
} as const;

export async function run(argv: string[], ctx: CommandContext): Promise<number> {
  const { values, positionals } = parseCommand(argv, OPTIONS, 'sandbox list');
  if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`, 'sandbox list');
  const json = parseOutput(values.output);
  const limit = values.limit === undefined ? undefined : parseInteger(values.limit, '--limit', 0, 0xffffffff);
  const allWorkspaces = values['all-workspaces'] === true;
  if (allWorkspaces && values.workspace !== undefined) throw new UsageError('--workspace and --all-workspaces are mutually exclusive', 'sandbox list');
  return withClient(ctx, values, async (client) => {
    const sandboxes = await client.listSandboxes({ label_selector: values.selector, limit, workspace: values.workspace, all_workspaces: allWorkspaces });
    write(json ? formatJson({ sandboxes: sandboxes.map(sandboxJson) }) : formatSandboxList(sandboxes, Date.now()));
    return 0;
  });
}
