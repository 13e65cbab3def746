// sandgate sandbox stop NAME / sandgate sandbox start NAME: stop keeps the sandbox's files; start
// runs it again (a new supervisor run: access granted for the previous run ends) and waits for it.
import { UsageError, parseCommand } from '../args.ts';
import { SandboxPhase, type Sandbox } from '@sandgate/protocols';
import { SandboxNotReadyError, type SandgateClient } from '../client.ts';
import type { CommandContext } from '../context.ts';
import type { ConnectionFlags } from '../client-config.ts';
import { formatJson, sandboxJson } from '../output.ts';
import { phaseName } from '@sandgate/core';
import { connectionFlags, GATEWAY_OPTION, withClient, write } from './common.ts';
import { provisionTimeoutMs } from '../client-config.ts';

/** The flags it accepts (the usage test checks each is documented). */
export const OPTIONS = { ...GATEWAY_OPTION, workspace: { type: 'string' }, output: { type: 'string', short: 'o' } } as const;

function parse(argv: string[], command: string): { name: string; json: boolean; gateway: string | undefined; workspace: string | undefined; connection: ConnectionFlags } {
  const { values, positionals } = parseCommand(argv, OPTIONS, command);
  if (positionals.length !== 1) throw new UsageError('give exactly one sandbox NAME', command);
  if (values.output !== undefined && values.output !== 'json' && values.output !== 'text') {
    throw new UsageError(`-o must be json or text, got '${values.output}'`, command);
  }
  return { name: positionals[0]!, json: values.output === 'json', gateway: values.gateway, workspace: values.workspace, connection: connectionFlags(values) };
}

function show(sandbox: Sandbox, json: boolean, verb: string): void {
  if (json) write(formatJson(sandboxJson(sandbox)));
  else write(`sandbox ${sandbox.metadata?.name} ${verb} (phase ${phaseName(sandbox.status?.phase)})\n`);
}

export async function runStop(argv: string[], ctx: CommandContext): Promise<number> {
  const args = parse(argv, 'sandbox stop');
  return withClient(ctx, args.connection, async (client) => {
    const res = await client.unary<{ sandbox?: Sandbox }>('StopSandbox', { name: args.name, workspace: args.workspace });
    show(res.sandbox!, args.json, 'stopped');
    return 0;
  });
}

export async function runStart(argv: string[], ctx: CommandContext): Promise<number> {
  const args = parse(argv, 'sandbox start');
  return withClient(ctx, args.connection, async (client) => {
    await client.unary<{ sandbox?: Sandbox }>('StartSandbox', { name: args.name, workspace: args.workspace });
    const timeoutMs = provisionTimeoutMs(ctx.env);
    // waitForReady looks the name up in the caller's own workspace; another one is polled here.
    const sandbox = args.workspace === undefined ? await client.waitForReady(args.name, { timeoutMs, intervalMs: 200 }) : await readyIn(client, args.name, args.workspace, timeoutMs);
    show(sandbox, args.json, 'started');
    return 0;
  });
}

/** Polls GetSandbox in `workspace` until the sandbox is Ready (or ended), as waitForReady does. */
async function readyIn(client: SandgateClient, name: string, workspace: string, timeoutMs: number): Promise<Sandbox> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const sandbox = await client.getSandbox(name, workspace);
    const phase = sandbox.status?.phase;
    if (phase === SandboxPhase.READY || phase === SandboxPhase.COMPLETED || phase === SandboxPhase.STOPPED) return sandbox;
    if (phase === SandboxPhase.ERROR || phase === SandboxPhase.DELETING) throw new SandboxNotReadyError(`sandbox ${name} did not start: phase ${phaseName(phase)}`, sandbox);
    if (Date.now() > deadline) throw new SandboxNotReadyError(`sandbox ${name} was not ready after ${Math.round(timeoutMs / 1000)}s`, sandbox);
    await new Promise((r) => setTimeout(r, 200));
  }
}
