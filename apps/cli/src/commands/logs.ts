// sandgate logs NAME [--follow] [-n LINES] [--source gateway|sandbox]: the sandbox's log tail
// (GetSandboxLogs), or a live follow (WatchSandbox with follow_logs) that ends with the sandbox.
import { status as Status } from '@grpc/grpc-js';
import type { SandboxLogLine } from '@sandgate/protocols';
import { UsageError, parseCommand, parseInteger } from '../args.ts';
import { isServiceError } from '../client.ts';
import type { CommandContext } from '../context.ts';
import { GATEWAY_OPTION, withClient, write } from './common.ts';

/** The flags it accepts (the usage test checks each is documented). */
export const OPTIONS = {
  ...GATEWAY_OPTION,
  workspace: { type: 'string' },
  follow: { type: 'boolean', short: 'f' },
  lines: { type: 'string', short: 'n' },
  source: { type: 'string', multiple: true },
} as const;

export function formatLogLine(l: SandboxLogLine): string {
  const ts = new Date(l.timestamp_ms ?? 0).toISOString();
  return `${ts} ${(l.level ?? 'INFO').padEnd(5)} [${l.source || 'gateway'}] ${l.message ?? ''}\n`;
}

export async function run(argv: string[], ctx: CommandContext): Promise<number> {
  const { values, positionals } = parseCommand(argv, OPTIONS, 'logs');
  if (positionals.length !== 1) throw new UsageError('give exactly one sandbox NAME', 'logs');
  const name = positionals[0]!;
  const lines = values.lines === undefined ? 200 : parseInteger(values.lines, '--lines', 1, 2000);
  const sources = values.source ?? [];
  return withClient(ctx, values, async (client) => {
    let id: string;
    try {
      id = (await client.getSandbox(name, values.workspace)).metadata!.id!;
    } catch (err) {
      if (isServiceError(err) && err.code === Status.NOT_FOUND) {
        process.stderr.write(`error: sandbox ${name} not found\n`);
        return 1;
      }
      throw err;
    }
    if (!values.follow) {
      const res = await client.unary<{ logs: SandboxLogLine[] }>('GetSandboxLogs', { sandbox_id: id, lines, sources });
      for (const l of res.logs) write(formatLogLine(l));
      return 0;
    }
    const call = client.watch({ id, follow_logs: true, log_tail_lines: lines, log_sources: sources });
    return new Promise<number>((resolve) => {
      call.on('data', (ev: { log?: SandboxLogLine }) => {
        if (ev.log) write(formatLogLine(ev.log));
      });
      call.on('end', () => resolve(0));
      call.on('error', (err: { code?: number; details?: string }) => {
        if (err.code === Status.CANCELLED) return resolve(130);
        process.stderr.write(`error: ${err.details ?? String(err)}\n`);
        resolve(1);
      });
      process.once('SIGINT', () => call.cancel());
    });
  });
}
