// The REST API's JSON for a sandbox and for a create request: the proto messages' structure and
// snake_case names (metadata / spec / status), with what is opaque on the wire made readable:
// the phase by name, template.resources (a Struct) as an object, the policy as proto3 JSON.
// Declared once in TypeBox: the routes validate and serialise with it and /openapi.json shows it.
import { Type, type Static } from '@sinclair/typebox';
import type { CreateSandboxRequest, Sandbox } from '@sandgate/protocols';
import { SandboxPhase, decodeStruct, encodeStruct, toProto3Json } from '@sandgate/protocols';
import { POOL_ANNOTATION, RETENTION_ANNOTATION, RETENTION_EPHEMERAL, decodePolicy, isEphemeral } from '@sandgate/core';
import { WorkspaceField } from './common.ts';

const StringMap = (description: string) => Type.Record(Type.String(), Type.String(), { description });

const PHASE_NAMES = Object.keys(SandboxPhase) as (keyof typeof SandboxPhase)[];
const PHASE_BY_NUMBER = new Map<number, string>(Object.entries(SandboxPhase).map(([k, v]) => [v, k]));

/** restart_policy by name (the CLI's --restart-policy words) ↔ the wire's numbers. */
export const RESTART_POLICY = { never: 1, 'on-failure': 2, always: 3 } as const;
const RESTART_POLICY_BY_NUMBER = new Map<number, string>(Object.entries(RESTART_POLICY).map(([k, v]) => [v, k]));

export const SandboxJson = Type.Object(
  {
    metadata: Type.Object({
      id: Type.String(),
      name: Type.String(),
      workspace: Type.String(),
      created_at_ms: Type.Integer(),
      resource_version: Type.Integer({ description: 'Grows with every change of the record' }),
      labels: StringMap('Labels (selectable with label_selector)'),
      annotations: StringMap('Annotations'),
      deletion_timestamp_ms: Type.Optional(Type.Integer()),
      ephemeral: Type.Boolean({ description: 'Deleted by the gateway once its main process has finished' }),
    }),
    spec: Type.Object({
      image: Type.String(),
      command: Type.Array(Type.String(), { description: 'The main process' }),
      environment: StringMap("The main process's environment"),
      tty: Type.Boolean(),
      restart_policy: Type.Union(Object.keys(RESTART_POLICY).map((k) => Type.Literal(k))),
      resources: Type.Optional(Type.Record(Type.String(), Type.Unknown(), { description: 'template.resources as an object, e.g. {"limits":{"cpu":"500m","memory":"256Mi"}}' })),
      policy: Type.Optional(Type.Unknown({ description: 'The creation policy (openshell.sandbox.v1.SandboxPolicy) as proto3 JSON' })),
      log_level: Type.Optional(Type.String()),
    }),
    status: Type.Object({
      phase: Type.Union(PHASE_NAMES.map((k) => Type.Literal(k))),
      conditions: Type.Array(
        Type.Object({ type: Type.String(), status: Type.String(), reason: Type.String(), message: Type.String(), last_transition_time: Type.String() }),
      ),
      exit_code: Type.Optional(Type.Integer({ description: "The main process's exit code, once it has exited" })),
      restart_count: Type.Integer(),
      main_process_started_at_ms: Type.Optional(Type.Integer()),
      next_restart_at_ms: Type.Optional(Type.Integer()),
      current_policy_version: Type.Optional(Type.Integer()),
    }),
  },
  { title: 'Sandbox' },
);
export type SandboxJson = Static<typeof SandboxJson>;

export const CreateSandboxBody = Type.Object(
  {
    name: Type.Optional(Type.String({ description: 'Unique in the workspace; generated when absent' })),
    workspace: Type.Optional(WorkspaceField),
    image: Type.Optional(Type.String({ description: "The image (default: the gateway's --default-image)" })),
    command: Type.Optional(Type.Array(Type.String(), { description: 'The main process (default: a login shell with a tty)' })),
    environment: Type.Optional(StringMap("The main process's environment")),
    tty: Type.Optional(Type.Boolean()),
    restart_policy: Type.Optional(Type.Union(Object.keys(RESTART_POLICY).map((k) => Type.Literal(k)), { description: 'default never' })),
    resources: Type.Optional(
      Type.Object(
        {
          cpu: Type.Optional(Type.String({ description: 'e.g. 500m or 2' })),
          memory: Type.Optional(Type.String({ description: 'e.g. 256Mi' })),
          disk: Type.Optional(Type.String({ description: 'e.g. 1Gi (drivers that can cap disk only)' })),
        },
        { additionalProperties: false },
      ),
    ),
    labels: Type.Optional(StringMap('Labels')),
    annotations: Type.Optional(StringMap('Annotations')),
    ephemeral: Type.Optional(Type.Boolean({ description: 'Delete the sandbox once its main process has finished' })),
    pool: Type.Optional(Type.String({ description: "Claim a started sandbox of this warm pool (the annotation sandgate.dev/pool); answers Ready. With none ready, one of the pool's template starts cold" })),
    log_level: Type.Optional(Type.String()),
  },
  { additionalProperties: false, title: 'CreateSandbox' },
);
export type CreateSandboxBody = Static<typeof CreateSandboxBody>;

/** The CreateSandboxRequest the gRPC API would receive for this body (validated by the service). */
export function createRequestOf(body: CreateSandboxBody): CreateSandboxRequest {
  const limits: Record<string, string> = {};
  if (body.resources?.cpu !== undefined) limits.cpu = body.resources.cpu;
  if (body.resources?.memory !== undefined) limits.memory = body.resources.memory;
  // Kubernetes' name for a container's writable-disk limit, as the CLI's --disk sends it.
  if (body.resources?.disk !== undefined) limits['ephemeral-storage'] = body.resources.disk;
  const hasTemplate = body.image !== undefined || Object.keys(limits).length > 0;
  const annotations = { ...(body.annotations ?? {}) };
  if (body.ephemeral) annotations[RETENTION_ANNOTATION] = RETENTION_EPHEMERAL;
  if (body.pool !== undefined) annotations[POOL_ANNOTATION] = body.pool;
  return {
    name: body.name,
    workspace: body.workspace,
    labels: body.labels ?? {},
    annotations,
    spec: {
      ...(body.log_level !== undefined ? { log_level: body.log_level } : {}),
      environment: body.environment ?? {},
      providers: [],
      command: body.command ?? [],
      ...(body.tty !== undefined ? { tty: body.tty } : {}),
      ...(body.restart_policy !== undefined ? { restart_policy: RESTART_POLICY[body.restart_policy as keyof typeof RESTART_POLICY] } : {}),
      ...(hasTemplate
        ? {
            template: {
              ...(body.image !== undefined ? { image: body.image } : {}),
              ...(Object.keys(limits).length > 0 ? { resources: encodeStruct({ limits }) } : {}),
              labels: {},
              annotations: {},
              environment: {},
            },
          }
        : {}),
    },
  };
}

function decoded<T>(decode: () => T): T | undefined {
  try {
    return decode();
  } catch {
    return undefined; // written by something else: left out rather than failing the read
  }
}

/** The JSON of a sandbox record. */
export function sandboxJson(sb: Sandbox): SandboxJson {
  const m = sb.metadata;
  const spec = sb.spec;
  const st = sb.status;
  const resources = spec?.template?.resources?.byteLength ? decoded(() => decodeStruct(spec.template!.resources!)) : undefined;
  const policy = spec?.policy?.byteLength ? decoded(() => toProto3Json('openshell.sandbox.v1.SandboxPolicy', decodePolicy(spec.policy!))) : undefined;
  return {
    metadata: {
      id: m?.id ?? '',
      name: m?.name ?? '',
      workspace: m?.workspace ?? '',
      created_at_ms: Number(m?.created_at_ms ?? 0),
      resource_version: Number(m?.resource_version ?? 0),
      labels: m?.labels ?? {},
      annotations: m?.annotations ?? {},
      ...(m?.deletion_timestamp_ms ? { deletion_timestamp_ms: Number(m.deletion_timestamp_ms) } : {}),
      ephemeral: isEphemeral(m?.annotations),
    },
    spec: {
      image: spec?.template?.image ?? '',
      command: spec?.command ?? [],
      environment: spec?.environment ?? {},
      tty: spec?.tty ?? false,
      restart_policy: (RESTART_POLICY_BY_NUMBER.get(spec?.restart_policy ?? 1) ?? 'never') as SandboxJson['spec']['restart_policy'],
      ...(resources ? { resources } : {}),
      ...(policy !== undefined ? { policy } : {}),
      ...(spec?.log_level ? { log_level: spec.log_level } : {}),
    },
    status: {
      phase: (PHASE_BY_NUMBER.get(st?.phase ?? 0) ?? 'UNKNOWN') as SandboxJson['status']['phase'],
      conditions: (st?.conditions ?? []).map((c) => ({
        type: c.type ?? '',
        status: c.status ?? '',
        reason: c.reason ?? '',
        message: c.message ?? '',
        last_transition_time: c.last_transition_time ?? '',
      })),
      ...(st?.exit_code !== undefined && st.exit_code !== null ? { exit_code: st.exit_code } : {}),
      restart_count: st?.restart_count ?? 0,
      ...(st?.main_process_started_at_ms ? { main_process_started_at_ms: Number(st.main_process_started_at_ms) } : {}),
      ...(st?.next_restart_at_ms ? { next_restart_at_ms: Number(st.next_restart_at_ms) } : {}),
      ...(st?.current_policy_version ? { current_policy_version: st.current_policy_version } : {}),
    },
  };
}
