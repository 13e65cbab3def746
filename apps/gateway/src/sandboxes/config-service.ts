// GetSandboxConfig and UpdateConfig (shared/spec/openshell-v1-more.md §5, §11): a sandbox's policy
// in force, its revision and hash; replacing it on a live sandbox. A new policy is stored with a
// new revision (record fields pol/polrev; spec.policy stays the create-time baseline), then pushed
// to the sandbox's supervisor wherever its session is, and UpdateConfig returns once the
// supervisor confirmed it: new connections follow the new rules from then on.
import { createHash } from 'node:crypto';
import type { sendUnaryData, ServerUnaryCall } from '@grpc/grpc-js';
import {
  Code,
  GatewayError,
  applyMergeOperations,
  checkPolicy,
  decodePolicy,
  encodePolicy,
  type MergeOperation,
  invalid,
  notFound,
  requestedWorkspace,
  type Principal,
  policyHash,
  validateLabelKey,
} from '@sandgate/core';
import { policyInForce, type SandboxStore } from '@sandgate/store';
import type { Logger } from '@sandgate/telemetry';
import { toServiceError } from '../api/grpc-errors.ts';
import { presentedPeerSecret, secretsEqual } from '../api/secrets.ts';
import type { WorkspaceAccess } from '../api/access.ts';

/** The four registered setting keys upstream always returns (§5.2); sandgate sets none of them. */
export const SETTING_KEYS = ['providers_v2_enabled', 'ocsf_json_enabled', 'agent_policy_proposals_enabled', 'proposal_approval_mode'] as const;
const POLICY_SOURCE_SANDBOX = 1;
const FAILURE_MODE = 'fail_closed';

export interface GetSandboxConfigRequest {
  sandbox_id?: string;
}

export interface GetSandboxConfigResponse {
  policy?: Buffer;
  version: number;
  policy_hash: string;
  settings: Record<string, { value?: object; scope?: number }>;
  config_revision: string;
  policy_source: number;
  global_policy_version: number;
  provider_env_revision: string;
  supervisor_middleware_services: never[];
  workspace: string;
  policy_validation_failure_mode: string;
  extension_authentication_enabled: boolean;
}

export interface UpdateConfigRequest {
  name?: string;
  policy?: Buffer;
  setting_key?: string;
  setting_value?: object;
  delete_setting?: boolean;
  global?: boolean;
  merge_operations: MergeOperation[];
  expected_resource_version?: number;
  annotations: Record<string, string>;
  workspace?: string;
}

export interface UpdateConfigResponse {
  version: number;
  policy_hash: string;
  annotations: Record<string, string>;
}

export interface ConfigServiceDeps {
  store: SandboxStore;
  /** Makes the supervisor apply the policy in force (≥ revision) wherever its session is; false when none is connected. */
  pushPolicy(sandboxId: string, revision: number): Promise<boolean>;
  /** The owner side of a push relayed by another replica (this replica's sessions only). */
  pushPolicyLocal(sandboxId: string, revision: number): Promise<boolean>;
  peerSecret: string;
  /** Workspace scoping of both calls (access.ts). */
  workspaces: WorkspaceAccess;
  log: Logger;
}

/** The first 8 bytes of a SHA-256 over `parts`, little-endian, as a decimal uint64. */
function fingerprint(...parts: string[]): string {
  const h = createHash('sha256');
  for (const part of parts) h.update(`${Buffer.byteLength(part)}:${part}`);
  return h.digest().readBigUInt64LE(0).toString();
}

const ANNOTATION_LIMITS = { entries: 128, key: 256, value: 8192 };

export class ConfigService {
  private readonly deps: ConfigServiceDeps;

  constructor(deps: ConfigServiceDeps) {
    this.deps = deps;
  }

  async getSandboxConfig(req: GetSandboxConfigRequest, caller: Principal): Promise<GetSandboxConfigResponse> {
    const rec = await this.deps.workspaces.visible(caller, req.sandbox_id ? await this.deps.store.get(req.sandbox_id) : null);
    const { bytes, revision } = policyInForce(rec);
    let hash = '';
    try {
      if (bytes) hash = policyHash(decodePolicy(bytes, 'policy'));
    } catch (err) {
      // Stored before create-time validation existed, or written by something else.
      throw new GatewayError(Code.INTERNAL, `decode policy failed: ${err instanceof Error ? err.message : String(err)}`);
    }
    const settings = Object.fromEntries(SETTING_KEYS.map((key) => [key, {}]));
    return {
      ...(bytes ? { policy: bytes } : {}),
      version: revision,
      policy_hash: hash,
      settings,
      // Everything the supervisor acts on: source, failure mode, extension auth, policy, settings (all unset).
      config_revision: fingerprint('sandbox', FAILURE_MODE, 'false', hash, ...SETTING_KEYS.map((k) => `${k}=`)),
      policy_source: POLICY_SOURCE_SANDBOX,
      global_policy_version: 0,
      // sandgate has no providers: a fixed value, as upstream's is for a sandbox without any.
      provider_env_revision: fingerprint('providers'),
      supervisor_middleware_services: [],
      workspace: rec.sandbox.metadata?.workspace ?? 'default',
      policy_validation_failure_mode: FAILURE_MODE,
      extension_authentication_enabled: false,
    };
  }

  async updateConfig(req: UpdateConfigRequest, caller: Principal): Promise<UpdateConfigResponse> {
    validateUpdateAnnotations(req.annotations);
    if (req.global) {
      throw new GatewayError(Code.UNIMPLEMENTED, 'UpdateConfig global=true is not supported by sandgate: there is no gateway-wide policy or setting');
    }
    const settingKey = (req.setting_key ?? '').trim();
    const shapes = [req.policy !== undefined, settingKey !== '', req.merge_operations.length > 0].filter(Boolean).length;
    if (shapes > 1) throw invalid('policy, setting_key, and merge_operations are mutually exclusive');
    if (shapes === 0) throw invalid('one of policy, setting_key, or merge_operations must be provided');
    if (settingKey !== '') {
      throw new GatewayError(Code.UNIMPLEMENTED, `UpdateConfig setting_key '${settingKey}': runtime settings are not supported by sandgate`);
    }
    if (!req.name) throw invalid('name is required for sandbox-scoped updates');
    const found = await this.deps.workspaces.visible(caller, await this.deps.store.getByName(requestedWorkspace(caller, req.workspace), req.name));
    const id = found.sandbox.metadata!.id!;

    let outcome: { revision: number; hash: string } | undefined;
    const written = await this.deps.store.mutate(id, (cur) => {
      const pinned = req.expected_resource_version ?? 0;
      if (pinned !== 0 && pinned !== cur.resourceVersion) {
        throw new GatewayError(Code.ABORTED, `persist policy revision failed due to concurrent modification (current resource_version: ${cur.resourceVersion})`);
      }
      // The baseline is the create-time policy (§11.5); a sandbox created without one takes this one.
      const baselineBytes = cur.sandbox.spec?.policy;
      const current = policyInForce(cur);
      // Merges edit the policy in force (an empty one if there is none), then face the same checks.
      const submitted =
        req.policy ??
        encodePolicy(applyMergeOperations(current.bytes ? decodePolicy(current.bytes) : decodePolicy(Buffer.alloc(0)), req.merge_operations));
      const checked = checkPolicy(submitted, 'policy', baselineBytes ? decodePolicy(baselineBytes) : undefined);
      const hash = policyHash(checked.policy);
      const same = current.bytes !== undefined && policyHash(decodePolicy(current.bytes)) === hash;
      const revision = same ? current.revision : current.revision + 1;
      outcome = { revision, hash };
      const annotations = { ...(cur.sandbox.metadata?.annotations ?? {}), ...req.annotations };
      const annotationsChanged = Object.entries(req.annotations).some(([k, v]) => cur.sandbox.metadata?.annotations?.[k] !== v);
      if (same && !annotationsChanged) return null;
      const sandbox = {
        ...cur.sandbox,
        metadata: { ...cur.sandbox.metadata!, annotations },
        spec: { ...cur.sandbox.spec!, ...(baselineBytes ? {} : { policy: checked.bytes }) },
      };
      return { sandbox, extra: same ? undefined : { pol: checked.bytes.toString('base64'), polrev: String(revision) } };
    });
    if (!written || !outcome) throw notFound();
    const connected = await this.deps.pushPolicy(id, outcome.revision);
    this.deps.log.info('sandbox policy updated', { sandboxId: id, revision: outcome.revision, supervisorConnected: connected });
    return { version: outcome.revision, policy_hash: outcome.hash, annotations: written.sandbox.metadata?.annotations ?? {} };
  }

  /** Peer.PushPolicy on the owner replica. */
  handlePeerPushPolicy(
    call: ServerUnaryCall<{ sandbox_id?: string; revision?: number }, { connected: boolean; applied_revision: number }>,
    callback: sendUnaryData<{ connected: boolean; applied_revision: number }>,
  ): void {
    if (!secretsEqual(presentedPeerSecret(call.metadata), this.deps.peerSecret)) {
      callback(toServiceError(new GatewayError(Code.PERMISSION_DENIED, 'bad peer secret')));
      return;
    }
    const { sandbox_id: sandboxId, revision = 0 } = call.request;
    if (!sandboxId) {
      callback(toServiceError(new GatewayError(Code.INVALID_ARGUMENT, 'sandbox_id is required')));
      return;
    }
    this.deps
      .pushPolicyLocal(sandboxId, revision)
      .then((connected) => callback(null, { connected, applied_revision: connected ? revision : 0 }))
      .catch((err: unknown) => callback(toServiceError(err, this.deps.log)));
  }
}

/** UpdateConfig's annotation limits (§11.4), with upstream's messages. */
function validateUpdateAnnotations(annotations: Record<string, string>): void {
  const entries = Object.entries(annotations);
  if (entries.length > ANNOTATION_LIMITS.entries) throw invalid(`annotations exceeds maximum entries (${entries.length} > ${ANNOTATION_LIMITS.entries})`);
  for (const [key, value] of entries) {
    if (Buffer.byteLength(key) > ANNOTATION_LIMITS.key) throw invalid(`annotations key exceeds maximum length (${Buffer.byteLength(key)} > ${ANNOTATION_LIMITS.key})`);
    if (Buffer.byteLength(value) > ANNOTATION_LIMITS.value) {
      throw invalid(`annotations value exceeds maximum length (${Buffer.byteLength(value)} > ${ANNOTATION_LIMITS.value})`);
    }
    validateLabelKey(key, 'annotation');
  }
}

