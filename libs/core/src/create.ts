// CreateSandbox: validation and the defaults the gateway fills in (spec §2.2).
import { GatewayError, Code, invalid } from './status.ts';
import * as L from './limits.ts';
import {
  normaliseWorkspace,
  validateAnnotations,
  validateLabels,
  validateMainCommand,
  validateSandboxName,
  validateSpecEnvironment,
} from './validation.ts';
import { checkPolicy, type SandboxPolicy } from './policy.ts';
import { parseResources, type ParsedLimits } from './resources.ts';

export const DEFAULT_MAIN_COMMAND = ['/bin/bash', '-l'];
export const RESTART_POLICY_NEVER = 1;
const MAX_RESTART_POLICY = 3;

/** The parts of a CreateSandboxRequest validation looks at (structurally typed: no protocol import). */
export interface CreateInput {
  spec?: {
    log_level?: string;
    environment: Record<string, string>;
    template?: {
      image?: string;
      runtime_class_name?: string;
      agent_socket?: string;
      labels: Record<string, string>;
      annotations: Record<string, string>;
      environment: Record<string, string>;
      resources?: Uint8Array;
      driver_config?: Uint8Array;
    };
    policy?: Uint8Array;
    providers: string[];
    command: string[];
    tty?: boolean;
    restart_policy?: number;
  };
  name?: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  workspace?: string;
}

export interface NormalisedCreate<T extends CreateInput> {
  request: T & { spec: NonNullable<T['spec']> };
  workspace: string;
  /** spec.policy decoded (absent when the request has none); spec.policy holds the bytes to store. */
  policy?: SandboxPolicy;
  /** What template.resources asks the driver to enforce. */
  limits: ParsedLimits;
}

export function validateCreate<T extends CreateInput>(req: T): NormalisedCreate<T> {
  const spec = req.spec;
  if (!spec) throw invalid('spec is required');
  if (req.name) validateSandboxName(req.name);
  validateLabels(req.labels);
  validateAnnotations(req.annotations);
  if ((spec.log_level ?? '').length > L.MAX_LOG_LEVEL_LEN) {
    throw invalid(`spec.log_level exceeds maximum length (${spec.log_level!.length} > ${L.MAX_LOG_LEVEL_LEN})`);
  }
  validateSpecEnvironment(spec.environment);
  if (spec.command.length === 0) {
    spec.command = [...DEFAULT_MAIN_COMMAND];
    spec.tty = true;
  }
  validateMainCommand(spec.command);
  const policy = spec.restart_policy ?? 0;
  if (policy < 0 || policy > MAX_RESTART_POLICY) {
    throw invalid(`spec.restart_policy ${policy} is unknown: use NEVER (1), ON_FAILURE (2) or ALWAYS (3)`);
  }
  if (policy === 0) spec.restart_policy = RESTART_POLICY_NEVER;
  if (spec.policy && spec.policy.byteLength > L.MAX_POLICY_BYTES) {
    throw invalid(`spec.policy is too large (${spec.policy.byteLength} > ${L.MAX_POLICY_BYTES} bytes)`);
  }
  if (spec.providers.length > L.MAX_PROVIDERS) {
    throw invalid(`spec.providers has too many entries (${spec.providers.length} > ${L.MAX_PROVIDERS})`);
  }
  // Decoded, checked for safety and for fields sandgate cannot enforce (each refused by name).
  let decodedPolicy: SandboxPolicy | undefined;
  if (spec.policy) {
    const checked = checkPolicy(spec.policy, 'spec.policy');
    decodedPolicy = checked.policy;
    spec.policy = checked.bytes;
  }
  // sandgate has no provider records, so any named provider cannot exist.
  if (spec.providers.length > 0) {
    throw new GatewayError(Code.FAILED_PRECONDITION, `provider '${spec.providers[0]}' not found`);
  }
  const t = spec.template;
  if (t) {
    for (const field of ['image', 'runtime_class_name', 'agent_socket'] as const) {
      const v = t[field] ?? '';
      if (v.length > L.MAX_TEMPLATE_STRING_LEN) {
        throw invalid(`spec.template.${field} exceeds maximum length (${v.length} > ${L.MAX_TEMPLATE_STRING_LEN})`);
      }
    }
    validateLabels(t.labels);
    validateAnnotations(t.annotations);
    validateSpecEnvironment(t.environment, 'spec.template.environment');
    for (const field of ['resources', 'driver_config'] as const) {
      const v = t[field];
      if (v && v.byteLength > L.MAX_STRUCT_BYTES) {
        throw invalid(`spec.template.${field} is too large (${v.byteLength} > ${L.MAX_STRUCT_BYTES} bytes)`);
      }
    }
  }
  const limits = parseResources(t?.resources);
  return { request: req as NormalisedCreate<T>['request'], workspace: normaliseWorkspace(req.workspace), policy: decodedPolicy, limits };
}
