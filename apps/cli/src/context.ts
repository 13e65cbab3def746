// What every command receives from main.
import type { Env } from './args.ts';
import type { ConnectionFlags } from './client-config.ts';
import type { Logger } from './diagnostics.ts';

export interface CommandContext {
  env: Env;
  /** `--gateway` given before the command (`sandgate --gateway X sandbox list`). */
  gateway: string | undefined;
  /** `--token`, `--ca`, `--client-cert`, `--client-key`, `--tls-server-name` given before the command. */
  connection?: ConnectionFlags;
  /** Diagnostics (diagnostics.ts): silent unless SANDGATE_LOG_LEVEL=debug; absent in unit tests. */
  log?: Logger;
}

/** A command: parses its own argv (the words after the command name) and returns an exit status. */
export type CommandRun = (argv: string[], ctx: CommandContext) => Promise<number>;
