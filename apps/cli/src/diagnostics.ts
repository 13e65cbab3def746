// CLI diagnostics: what the CLI says about itself for someone chasing a problem (which gateway and
// credentials a command resolved, the whole error behind an `error:` line, a long-running
// command's signals) goes through the one logger every sandgate process uses, as JSON lines on
// stderr at SANDGATE_LOG_LEVEL. A command's own output (human text, `-o json`, `error: …` lines)
// is not diagnostics and stays as it is.
//
// Client commands write only debug lines, so nothing changes unless SANDGATE_LOG_LEVEL=debug; the
// logger (pino and the OTel API, ~100 ms to load) is loaded only then, because the CLI starts once
// per SSH connection (ssh-proxy) and must stay quick. The long-running commands (gateway, up,
// worker) load it always: their replica or worker logs through it anyway.
import type { Logger, LogLevel } from '@sandgate/telemetry/log';
import type { Env } from './args.ts';

export type { Logger };

const SILENT: Logger = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: () => {},
  child: () => SILENT,
};

/**
 * The logger for `command`'s diagnostics. `level`: the long-running commands' resolved log level
 * (flag or SANDGATE_LOG_LEVEL, as their replica uses it). Without it (client commands), a silent
 * logger unless SANDGATE_LOG_LEVEL=debug.
 */
export async function cliLogger(env: Env, command: string, level?: LogLevel): Promise<Logger> {
  const wanted = level ?? (env.SANDGATE_LOG_LEVEL ?? '').trim().toLowerCase();
  if (level === undefined && wanted !== 'debug') return SILENT;
  const { createLogger, parseLogLevel } = await import('@sandgate/telemetry/log');
  return createLogger({ component: 'cli', command }, parseLogLevel(wanted));
}
