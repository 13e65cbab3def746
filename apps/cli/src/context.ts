// What every command receives from main.
import type { Env } from './args.ts';

export interface CommandContext {
  env: Env;
  /** `--gateway` given before the command (`sandgate --gateway X sandbox list`). */
  gateway: string | undefined;
}

/** A command: parses its own argv (the words after the command name) and returns an exit status. */
export type CommandRun = (argv: string[], ctx: CommandContext) => Promise<number>;
