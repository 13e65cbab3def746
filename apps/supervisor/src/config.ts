// The supervisor's contract with the compute driver: everything it needs comes from its
// environment (SANDGATE_* variables) and its own argv (the main process after `--`). Every other
// environment variable is the sandbox's environment and is handed to the main process and execs.
import fs from 'node:fs';
import { parseDebugBreaks, type DebugBreak } from '@sandgate/core';
import { parseLogLevel, type LogLevel } from './log.ts';

export const ENV_PREFIX = 'SANDGATE_';
/** Tag carried by every process of an exec, so its tree can be found even after it left its group. */
export const EXEC_ID_ENV = 'SANDGATE_EXEC_ID';

export interface SupervisorConfig {
  endpoints: string[];
  sandboxId: string;
  credentialFile: string;
  /** The credential as read at startup; re-read on every dial (see readCredential). */
  credential: string;
  mainTty: boolean;
  logLevel: LogLevel;
  mainArgv: string[];
  /** The process environment minus every SANDGATE_* variable. */
  sandboxEnv: Record<string, string>;
  /** Debug faults (SANDGATE_DEBUG_BREAK + SANDGATE_DEBUG_UNSAFE=1): negative chaos runs only. */
  debugBreaks?: ReadonlySet<DebugBreak>;
}

export class ConfigError extends Error {}

/** Drops every SANDGATE_* variable: they are the supervisor's, never the sandbox's. */
export function stripSupervisorEnv(env: Record<string, string | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) {
    if (v === undefined || k.startsWith(ENV_PREFIX)) continue;
    out[k] = v;
  }
  return out;
}

/** The main process argv: everything after the first `--` in the supervisor's own arguments. */
export function mainArgvFrom(args: string[]): string[] {
  const i = args.indexOf('--');
  return i < 0 ? [] : args.slice(i + 1);
}

export function parseEndpoints(value: string | undefined): string[] {
  return (value ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

export function readCredential(file: string): string {
  // Trailing newlines are an artefact of how the file was written, never part of the secret.
  return fs.readFileSync(file, 'utf8').replace(/[\r\n]+$/, '');
}

function supervisorBreaksFrom(env: Record<string, string | undefined>): ReadonlySet<DebugBreak> {
  try {
    return parseDebugBreaks(env);
  } catch (err) {
    throw new ConfigError((err as Error).message);
  }
}

/** `args` is process.argv.slice(2). Throws ConfigError on anything the driver got wrong. */
export function loadConfig(env: Record<string, string | undefined>, args: string[]): SupervisorConfig {
  const endpoints = parseEndpoints(env.SANDGATE_GATEWAY);
  if (endpoints.length === 0) throw new ConfigError('SANDGATE_GATEWAY is empty');
  const sandboxId = (env.SANDGATE_SANDBOX_ID ?? '').trim();
  if (!sandboxId) throw new ConfigError('SANDGATE_SANDBOX_ID is empty');
  const credentialFile = env.SANDGATE_CREDENTIAL_FILE ?? '';
  if (!credentialFile) throw new ConfigError('SANDGATE_CREDENTIAL_FILE is empty');
  let credential: string;
  try {
    credential = readCredential(credentialFile);
  } catch (err) {
    throw new ConfigError(`cannot read SANDGATE_CREDENTIAL_FILE: ${(err as Error).message}`);
  }
  const mainArgv = mainArgvFrom(args);
  if (mainArgv.length === 0) throw new ConfigError('no main process: expected `-- <argv...>`');
  return {
    endpoints,
    sandboxId,
    credentialFile,
    credential,
    mainTty: env.SANDGATE_MAIN_TTY === '1',
    logLevel: parseLogLevel(env.SANDGATE_LOG_LEVEL),
    mainArgv,
    sandboxEnv: stripSupervisorEnv(env),
    // PLUMBING (chaos branch; the wire engineer owns the final form).
    debugBreaks: supervisorBreaksFrom(env),
  };
}
