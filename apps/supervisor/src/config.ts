// The supervisor's contract with the compute driver: everything it needs comes from its
// environment (SANDGATE_* variables) and its own argv (the main process after `--`). Every other
// environment variable is the sandbox's environment and is handed to the main process and execs.
import fs from 'node:fs';
import { DebugBreakError, parseDebugBreaks, type DebugBreak } from '@sandgate/core/debug-breaks';
import { parseSandboxEnvironment, parseSupervisorEnvironment, SupervisorEnv, withoutSupervisorEnv, type WorkloadIsolation } from '@sandgate/protocols/contract';
import { parseLogLevel, type LogLevel } from '@sandgate/telemetry/line-log';

export const ENV_PREFIX = SupervisorEnv.prefix;
/** Tag carried by every process of an exec, so its tree can be found even after it left its group. */
export const EXEC_ID_ENV = SupervisorEnv.execId;
export { parseEndpoints } from '@sandgate/protocols/contract';

export interface SupervisorConfig {
  endpoints: string[];
  sandboxId: string;
  credentialFile: string;
  /** The credential as read at startup; re-read on every dial (see readCredential). */
  credential: string;
  mainTty: boolean;
  logLevel: LogLevel;
  mainArgv: string[];
  /**
   * A warm-pool member (SANDGATE_DEFER_MAIN=1): the main process starts only on the gateway's
   * start_main, with the claim's command and environment; `mainArgv` is what an empty one runs.
   */
  deferMain: boolean;
  /**
   * What workload processes start with: the process environment minus every SANDGATE_* variable
   * (PATH and HOME from the driver, an image's ENV), with the sandbox's own variables (the
   * driver's environment file) laid over it. Never the supervisor's own environment.
   */
  sandboxEnv: Record<string, string>;
  /** Debug faults switched on for this run (SANDGATE_DEBUG_BREAK with SANDGATE_DEBUG_UNSAFE=1); normally empty. */
  debugBreaks: ReadonlySet<DebugBreak>;
  /**
   * How workload processes are confined (uid, network namespace, cgroups); absent when the
   * driver named no workload identity (the supervisor's own tests): started as the supervisor.
   */
  workload?: WorkloadIsolation;
  /** The sandbox's SandboxPolicy bytes at start (empty: none, so no egress). */
  policy: Buffer;
  /** The gateway serves TLS: its CA (read at start) and the name its certificate is verified for. Absent: plaintext. */
  gatewayTls?: GatewayTlsConfig;
  /**
   * The compile cache main.ts loaded the supervisor through (read-only); the netns agent, a Node
   * process of its own, starts through it too. Absent: none.
   */
  compileCacheDir?: string;
}

export interface GatewayTlsConfig {
  ca: Buffer;
  serverName: string;
}

/** A configuration the supervisor cannot run with; carries what it could read, to log the refusal. */
export class ConfigError extends Error {
  readonly logLevel: LogLevel;
  readonly sandboxId: string;
  constructor(message: string, env: Record<string, string | undefined> = {}) {
    super(message);
    // Not parseSupervisorEnvironment(): what made the configuration invalid may make it throw.
    this.logLevel = parseLogLevel((env[SupervisorEnv.logLevel] ?? '').trim());
    this.sandboxId = (env[SupervisorEnv.sandboxId] ?? '').trim();
  }
}

/** Drops every SANDGATE_* variable: they are the supervisor's, never the sandbox's. */
export const stripSupervisorEnv = withoutSupervisorEnv;

/** The main process argv: everything after the first `--` in the supervisor's own arguments. */
export function mainArgvFrom(args: string[]): string[] {
  const i = args.indexOf('--');
  return i < 0 ? [] : args.slice(i + 1);
}

export function readCredential(file: string): string {
  // Trailing newlines are an artefact of how the file was written, never part of the secret.
  return fs.readFileSync(file, 'utf8').replace(/[\r\n]+$/, '');
}

/**
 * The supervisor's configuration, parsed once from the environment the compute driver built
 * (supervisorEnvironment() in @sandgate/protocols) and from `args` (process.argv.slice(2)).
 * Throws ConfigError on anything the driver got wrong.
 */
export function loadConfig(env: Record<string, string | undefined>, args: string[]): SupervisorConfig {
  const fail = (message: string) => new ConfigError(message, env);
  let parsed: ReturnType<typeof parseSupervisorEnvironment>;
  try {
    parsed = parseSupervisorEnvironment(env);
  } catch (err) {
    throw fail((err as Error).message);
  }
  if (parsed.endpoints.length === 0) throw fail(`${SupervisorEnv.gateway} is empty`);
  if (!parsed.sandboxId) throw fail(`${SupervisorEnv.sandboxId} is empty`);
  if (!parsed.credentialFile) throw fail(`${SupervisorEnv.credentialFile} is empty`);
  let credential: string;
  try {
    credential = readCredential(parsed.credentialFile);
  } catch (err) {
    throw fail(`cannot read ${SupervisorEnv.credentialFile}: ${(err as Error).message}`);
  }
  let sandboxEnv = parsed.sandboxEnv;
  if (parsed.environmentFile) {
    try {
      sandboxEnv = { ...sandboxEnv, ...parseSandboxEnvironment(fs.readFileSync(parsed.environmentFile, 'utf8')) };
    } catch (err) {
      throw fail(`cannot read ${SupervisorEnv.environmentFile} (${parsed.environmentFile}): ${(err as Error).message}`);
    }
  }
  let debugBreaks: ReadonlySet<DebugBreak>;
  try {
    debugBreaks = parseDebugBreaks(env);
  } catch (err) {
    if (err instanceof DebugBreakError) throw fail(err.message);
    throw err;
  }
  let gatewayTls: GatewayTlsConfig | undefined;
  if (parsed.gatewayTls) {
    if (!parsed.gatewayTls.serverName) throw fail(`${SupervisorEnv.gatewayTlsName} is empty but ${SupervisorEnv.gatewayCaFile} is set`);
    let ca: Buffer;
    try {
      ca = fs.readFileSync(parsed.gatewayTls.caFile);
    } catch (err) {
      throw fail(`cannot read ${SupervisorEnv.gatewayCaFile}: ${(err as Error).message}`);
    }
    if (!ca.includes('-----BEGIN CERTIFICATE-----')) throw fail(`${SupervisorEnv.gatewayCaFile} (${parsed.gatewayTls.caFile}) holds no PEM certificate`);
    gatewayTls = { ca, serverName: parsed.gatewayTls.serverName };
  }
  const mainArgv = mainArgvFrom(args);
  if (mainArgv.length === 0) throw fail('no main process: expected `-- <argv...>`');
  return {
    endpoints: parsed.endpoints,
    sandboxId: parsed.sandboxId,
    credentialFile: parsed.credentialFile,
    credential,
    mainTty: parsed.mainTty,
    logLevel: parseLogLevel(parsed.logLevel),
    mainArgv,
    deferMain: parsed.deferMain,
    sandboxEnv,
    debugBreaks,
    workload: parsed.workload,
    policy: parsed.policy,
    gatewayTls,
    compileCacheDir: parsed.compileCacheDir,
  };
}

/** The running supervisor's configuration: its environment and arguments, read here and only here. */
export function loadProcessConfig(): SupervisorConfig {
  return loadConfig(process.env, process.argv.slice(2));
}
