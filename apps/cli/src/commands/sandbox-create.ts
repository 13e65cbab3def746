// sandgate sandbox create [--name N] [--workspace W] [--detach] [--no-keep] [--restart-policy P] [--env K=V]... [--label k=v]... [--image I] [--tty] [--policy FILE] [--cpu C] [--memory M] [--disk D] [--pool NAME] [-o json] [-- CMD...]
import { UsageError, parseCommand, parseInteger, parseKeyValues, parseOutput, type Env } from '../args.ts';
import { SandboxPhase, encodeStruct, type Sandbox } from '@sandgate/protocols';
import { GatewayError, MIN_DISK_BYTES, parseCpuMillis, parseMemoryBytes } from '@sandgate/core';
import { readPolicyFile } from '../policy-file.ts';
import { status as Status } from '@grpc/grpc-js';
import { isServiceError, SandboxNotReadyError } from '../client.ts';
import type { CreateSandboxInput } from '../client.ts';
import type { CommandContext } from '../context.ts';
import type { ConnectionFlags } from '../client-config.ts';
import { formatJson, sandboxJson } from '../output.ts';
import { provisionTimeoutMs } from '../client-config.ts';
import { connectionFlags, GATEWAY_OPTION, withClient, write } from './common.ts';
import { attachToMain } from './sandbox-connect.ts';

/** The flags it accepts (the usage test checks each is documented). */
export const OPTIONS = {
  ...GATEWAY_OPTION,
  name: { type: 'string' },
  workspace: { type: 'string' },
  detach: { type: 'boolean' },
  env: { type: 'string', multiple: true },
  label: { type: 'string', multiple: true },
  image: { type: 'string' },
  tty: { type: 'boolean' },
  'no-keep': { type: 'boolean' },
  'restart-policy': { type: 'string' },
  policy: { type: 'string' },
  cpu: { type: 'string' },
  memory: { type: 'string' },
  disk: { type: 'string' },
  pool: { type: 'string' },
  output: { type: 'string', short: 'o' },
} as const;

/** The annotation that asks the gateway to delete the sandbox once its main process finished. */
export const RETENTION_ANNOTATION = 'openshell.nvidia.com/retention';
/**
 * The annotation that claims a started member of the named warm pool (`--pool NAME`). The gateway
 * reads the same key (POOL_ANNOTATION in libs/core's pools.ts), so any OpenShell client can send it.
 */
export const POOL_ANNOTATION = 'sandgate.dev/pool';
const RESTART_POLICIES: Record<string, number> = { never: 1, 'on-failure': 2, always: 3 };

export interface CreateArgs {
  request: CreateSandboxInput;
  detach: boolean;
  /** Attached --no-keep: the CLI deletes the sandbox itself once it has the exit. */
  deleteAfterAttach: boolean;
  json: boolean;
  gateway: string | undefined;
  /** --gateway and the TLS/token flags given to the command. */
  connection: ConnectionFlags;
}

/**
 * `--cpu`/`--memory` → template.resources as upstream's CLI sends them: a Struct
 * `{limits: {cpu, memory}}` with the quantities as written (`--disk` adds `ephemeral-storage`). Checked here first so a typo is a
 * usage error; the gateway checks them again (the same rules). `command` names the command in
 * that error (`pool set` builds a pool's resources with it too).
 */
export function resourcesStruct(cpu: string | undefined, memory: string | undefined, disk: string | undefined, command = 'sandbox create'): Buffer | undefined {
  const limits: Record<string, string> = {};
  try {
    if (cpu !== undefined) {
      parseCpuMillis(cpu, '--cpu');
      limits.cpu = cpu.trim();
    }
    if (memory !== undefined) {
      parseMemoryBytes(memory, '--memory');
      limits.memory = memory.trim();
    }
    if (disk !== undefined) {
      // Kubernetes' name for a container's writable-disk limit.
      parseMemoryBytes(disk, '--disk', MIN_DISK_BYTES);
      limits['ephemeral-storage'] = disk.trim();
    }
  } catch (err) {
    if (err instanceof GatewayError) throw new UsageError(err.message, command);
    throw err;
  }
  return Object.keys(limits).length > 0 ? encodeStruct({ limits }) : undefined;
}

/** Parses the flags into a CreateSandbox request (pure but for reading --policy FILE). */
export function parseCreateArgs(argv: string[]): CreateArgs {
  const { values, positionals, rest } = parseCommand(argv, OPTIONS, 'sandbox create');
  if (positionals.length > 0) {
    throw new UsageError(`unexpected argument '${positionals[0]}': give the command after '--' (sandbox create -- CMD...)`, 'sandbox create');
  }
  const json = parseOutput(values.output);
  const detach = Boolean(values.detach) || json;
  const policyName = values['restart-policy'];
  if (policyName !== undefined && RESTART_POLICIES[policyName] === undefined) {
    throw new UsageError(`--restart-policy must be one of never, on-failure, always; got '${policyName}'`, 'sandbox create');
  }
  // Detached ephemeral sandboxes are the gateway's to delete; an attached one is deleted by us
  // after we have shown its output and exit, so the gateway must not race us to it.
  const noKeep = Boolean(values['no-keep']);
  const resources = resourcesStruct(values.cpu, values.memory, values.disk);
  if (values.pool !== undefined && values.pool.trim() === '') throw new UsageError('--pool needs the name of a pool (sandgate pool list)', 'sandbox create');
  const annotations: Record<string, string> = {
    ...(noKeep && detach ? { [RETENTION_ANNOTATION]: 'ephemeral' } : {}),
    ...(values.pool !== undefined ? { [POOL_ANNOTATION]: values.pool.trim() } : {}),
  };
  const template =
    values.image !== undefined || resources
      ? { template: { ...(values.image !== undefined ? { image: values.image } : {}), ...(resources ? { resources } : {}), labels: {}, annotations: {}, environment: {} } }
      : {};
  const request: CreateSandboxInput = {
    name: values.name,
    ...(values.workspace !== undefined ? { workspace: values.workspace } : {}),
    labels: parseKeyValues(values.label, '--label'),
    ...(Object.keys(annotations).length > 0 ? { annotations } : {}),
    spec: {
      command: rest,
      environment: parseKeyValues(values.env, '--env'),
      ...template,
      ...(values.policy !== undefined ? { policy: readPolicyFile(values.policy) } : {}),
      ...(values.tty ? { tty: true } : {}),
      ...(policyName !== undefined ? { restart_policy: RESTART_POLICIES[policyName] } : {}),
    },
  };
  return { request, detach, deleteAfterAttach: noKeep && !detach, json, gateway: values.gateway, connection: connectionFlags(values) };
}

export async function run(argv: string[], ctx: CommandContext): Promise<number> {
  const args = parseCreateArgs(argv);
  const timeoutMs = provisionTimeoutMs(ctx.env);
  return withClient(ctx, args.connection, async (client) => {
    const created = await client.createSandbox(args.request);
    const name = created.metadata?.name ?? args.request.name ?? '';
    // Both modes wait for Ready, so `create --detach ... && sandbox exec` works right away.
    // TODO(attach): without --detach, attach to the main process (stream its output, forward
    // stdin and the terminal) once the gateway exposes that; until then the two modes only
    // differ in intent.
    const ephemeral = args.request.annotations?.[RETENTION_ANNOTATION] === 'ephemeral';
    let sandbox: Sandbox;
    try {
      sandbox = await client.waitForReady(name, { timeoutMs, intervalMs: 200, workspace: args.request.workspace });
    } catch (err) {
      // A detached ephemeral sandbox may finish and be cleaned up before we look: that is success.
      const gone = (isServiceError(err) && err.code === Status.NOT_FOUND) || (err instanceof SandboxNotReadyError && err.sandbox?.status?.phase === SandboxPhase.DELETING);
      if (!ephemeral || !gone) throw err;
      if (args.json) write(formatJson(sandboxJson(created)));
      else write(`sandbox ${name} (${created.metadata?.id ?? '?'}) finished and was removed (ephemeral)\n`);
      return 0;
    }
    const id = sandbox.metadata?.id ?? created.metadata?.id ?? '?';
    if (!args.detach) {
      // Attached: the main process's output (replayed from its start), then its exit code.
      const code = await attachToMain(client, id, Boolean(sandbox.spec?.tty));
      if (args.deleteAfterAttach) await client.deleteSandbox(name, args.request.workspace).catch(() => undefined);
      return code;
    }
    if (args.json) write(formatJson(sandboxJson(sandbox)));
    else if (sandbox.status?.phase === SandboxPhase.COMPLETED) {
      write(`sandbox ${name} (${id}) has already completed (exit code ${sandbox.status.exit_code ?? 0})\n`);
    } else if (sandbox.status?.phase === SandboxPhase.STOPPED) write(`sandbox ${name} (${id}) is stopped\n`);
    else if (sandbox.status?.phase === SandboxPhase.ERROR) {
      write(`sandbox ${name} (${id}): main process already exited with code ${sandbox.status.exit_code ?? '?'}\n`);
    }
    else write(`sandbox ${name} (${id}) is ready\n`);
    return 0;
  });
}
