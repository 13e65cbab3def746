// sandgate sandbox policy NAME [--policy FILE] [-o json]
// Without --policy: the policy in force (GetSandboxConfig: revision, hash, the policy). With it:
// replaces the live sandbox's policy (UpdateConfig), which returns once the sandbox's supervisor
// applies it: new connections follow it from then on.
import { toProto3Json } from '@sandgate/protocols';
import { decodePolicy } from '@sandgate/core';
import { UsageError, parseCommand, parseOutput } from '../args.ts';
import type { CommandContext } from '../context.ts';
import { formatJson } from '../output.ts';
import { readPolicyFile } from '../policy-file.ts';
import { GATEWAY_OPTION, withClient, write } from './common.ts';

/** The flags it accepts (the usage test checks each is documented). */
export const OPTIONS = { ...GATEWAY_OPTION, workspace: { type: 'string' }, policy: { type: 'string' }, output: { type: 'string', short: 'o' } } as const;

interface ConfigView {
  policy?: Buffer;
  version?: number;
  policy_hash?: string;
}

export async function run(argv: string[], ctx: CommandContext): Promise<number> {
  const { values, positionals } = parseCommand(argv, OPTIONS, 'sandbox policy');
  if (positionals.length !== 1) throw new UsageError(positionals.length === 0 ? 'a sandbox NAME is required' : `unexpected argument '${positionals[1]}'`, 'sandbox policy');
  const name = positionals[0]!;
  const json = parseOutput(values.output);
  const replacement = values.policy !== undefined ? readPolicyFile(values.policy, undefined, 'sandbox policy') : undefined;
  return withClient(ctx, values, async (client) => {
    if (replacement) {
      const res = await client.unary<{ version?: number; policy_hash?: string }>('UpdateConfig', { name, policy: replacement, workspace: values.workspace });
      if (json) write(formatJson({ version: res.version ?? 0, policyHash: res.policy_hash ?? '' }));
      else write(`policy revision ${res.version ?? 0} in force (hash ${(res.policy_hash ?? '').slice(0, 12)})\n`);
      return 0;
    }
    const sandbox = await client.getSandbox(name, values.workspace);
    const config = await client.unary<ConfigView>('GetSandboxConfig', { sandbox_id: sandbox.metadata?.id ?? '' });
    const policy = config.policy ? toProto3Json('openshell.sandbox.v1.SandboxPolicy', decodePolicy(config.policy)) : null;
    if (json) {
      write(formatJson({ version: config.version ?? 0, policyHash: config.policy_hash ?? '', policy }));
    } else if (!policy) {
      write('no policy: the sandbox has no egress\n');
    } else {
      write(`revision ${config.version ?? 0} (hash ${(config.policy_hash ?? '').slice(0, 12)})\n${JSON.stringify(policy, null, 2)}\n`);
    }
    return 0;
  });
}
