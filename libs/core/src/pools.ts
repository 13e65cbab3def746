// Warm pools: the pure rules. A pool keeps `size` sandboxes of one template (image, resources,
// policy) started and Ready in a workspace of its own that no caller can name; a create that
// asks for the pool (POOL_ANNOTATION) claims one and gets its own name, labels, command and
// environment on it. Everything a member was launched with must be what the create asks for,
// or the create is refused naming the field: a claim never silently ignores part of a request.
import { invalid } from './status.ts';
import { validateSandboxName } from './validation.ts';
import { parseResources } from './resources.ts';

/** The annotation on a CreateSandbox request that claims a member of the named pool. */
export const POOL_ANNOTATION = 'sandgate.dev/pool';
/** Most members one pool keeps started. */
export const MAX_POOL_SIZE = 64;

/** A pool's members' workspace: ':' never appears in a workspace a caller can create or name. */
export function poolWorkspace(pool: string): string {
  return `pool:${pool}`;
}

/** A member's name in its pool's workspace: from its id, so a member whose record is lost can still have its name freed. */
export function poolMemberName(pool: string, id: string): string {
  return `${pool}-${id.slice(0, 8)}`;
}

export function isPoolWorkspace(workspace: string): boolean {
  return workspace.startsWith('pool:');
}

/** What every member of a pool is launched with; a change makes a new generation. */
export interface PoolTemplate {
  /** Empty: the gateway's default image. */
  image: string;
  /** template.resources (google.protobuf.Struct bytes), base64; empty: none. */
  resources: string;
  /** spec.policy (SandboxPolicy bytes, as checked at SetPool), base64; empty: none. */
  policy: string;
}

export interface PoolDefinition {
  name: string;
  size: number;
  template: PoolTemplate;
  generation: number;
  createdAtMs: number;
  /** Consecutive failed starts of this generation's members; 0 while they start fine. */
  failures: number;
  /** While failing: no member is started before this time (ms since the epoch); 0 otherwise. */
  retryAtMs: number;
  /** While failing: why the last member could not start. */
  lastError: string;
  /** Creates that name no pool but ask for exactly this template claim from it too. */
  autoMatch: boolean;
}

/**
 * The refill's back-off for a pool whose members cannot start (an image that does not run, a
 * template the driver refuses): the first wait, doubled per consecutive failure up to the cap.
 * Without it, every sweep (10 s) and every claim would boot and delete `size` broken members.
 */
export const POOL_RETRY_FIRST_MS = 5_000;
export const POOL_RETRY_LONGEST_MS = 5 * 60_000;

/** Whether the refill may start members of `pool` at `nowMs` (no back-off in force). */
export function poolMayStartMembers(pool: PoolDefinition, nowMs: number): boolean {
  return pool.retryAtMs <= nowMs;
}

/** SetPool's checks: a DNS-label name (as a sandbox name), a size within MAX_POOL_SIZE. */
export function validatePoolSettings(name: string | undefined, size: number | undefined): { name: string; size: number } {
  if (!name) throw invalid('name is required: the pool to set');
  try {
    validateSandboxName(name); // a pool's name follows a sandbox's rules (members are named after it)
  } catch (err) {
    throw invalid(`pool ${(err as Error).message}`);
  }
  const n = size ?? 0;
  if (!Number.isInteger(n) || n < 0 || n > MAX_POOL_SIZE) throw invalid(`size ${n} is out of range: 0 to ${MAX_POOL_SIZE}`);
  return { name, size: n };
}

/** The parts of a (validated) CreateSandbox spec a claim is checked against. */
export interface ClaimSpec {
  log_level?: string;
  template?: {
    image?: string;
    runtime_class_name?: string;
    agent_socket?: string;
    resources?: Uint8Array;
    driver_config?: Uint8Array;
    user_namespaces?: boolean;
  };
  policy?: Uint8Array;
}

/**
 * Refuses (INVALID_ARGUMENT naming the field) a create whose spec asks for something the pool's
 * members were not launched with. Fields the claim applies (name, labels, annotations, command,
 * tty, environment, restart policy) are free; an unset image, resources or policy means the pool's.
 */
export function checkClaimMatchesPool(spec: ClaimSpec, pool: PoolDefinition, defaultImage: string): void {
  const t = spec.template;
  const where = `pool '${pool.name}'`;
  const poolImage = pool.template.image || defaultImage;
  if (t?.image && t.image !== poolImage) {
    throw invalid(`spec.template.image '${t.image}' differs from ${where}'s image '${poolImage}': leave it empty or create without the pool`);
  }
  if (t?.resources && t.resources.byteLength > 0) {
    const asked = JSON.stringify(parseResources(t.resources));
    const kept = JSON.stringify(parseResources(Buffer.from(pool.template.resources, 'base64')));
    if (asked !== kept) throw invalid(`spec.template.resources differ from ${where}'s (${kept}): leave them empty or create without the pool`);
  }
  if (spec.policy && spec.policy.byteLength > 0 && Buffer.from(spec.policy).toString('base64') !== pool.template.policy) {
    throw invalid(`spec.policy differs from ${where}'s policy: leave it empty or create without the pool`);
  }
  for (const field of ['runtime_class_name', 'agent_socket'] as const) {
    if (t?.[field]) throw invalid(`spec.template.${field} cannot be set on a sandbox claimed from ${where}`);
  }
  if (t?.driver_config && t.driver_config.byteLength > 0) throw invalid(`spec.template.driver_config cannot be set on a sandbox claimed from ${where}`);
  if (t?.user_namespaces) throw invalid(`spec.template.user_namespaces cannot be set on a sandbox claimed from ${where}`);
  // The supervisor's log level is fixed when the member starts.
  if (spec.log_level && spec.log_level !== 'info') throw invalid(`spec.log_level '${spec.log_level}' cannot be set on a sandbox claimed from ${where} (its members log at info)`);
}

/** The same limits, however the quantities were written ('256Mi' or bytes, keys in any order). */
function sameLimits(a: Uint8Array | undefined, b: Uint8Array | undefined): boolean {
  const x = parseResources(a);
  const y = parseResources(b);
  return x.cpuMillis === y.cpuMillis && x.memoryBytes === y.memoryBytes && x.pids === y.pids && x.diskBytes === y.diskBytes;
}

/**
 * Whether a create that names no pool asks for exactly what `pool`'s members were launched with,
 * so that a member serves it as well as a cold sandbox would (an auto-match pool). Unlike a claim
 * naming the pool, where an unset image, resources or policy means the pool's, here unset means
 * what a cold create would get: the default image, no limits, no policy. Anything a claim refuses
 * (checkClaimMatchesPool) makes it no match.
 */
export function createMatchesPoolTemplate(spec: ClaimSpec, pool: PoolDefinition, defaultImage: string): boolean {
  const t = spec.template;
  if ((t?.image || defaultImage) !== (pool.template.image || defaultImage)) return false;
  if (!sameLimits(t?.resources, pool.template.resources ? Buffer.from(pool.template.resources, 'base64') : undefined)) return false;
  const policy = spec.policy && spec.policy.byteLength > 0 ? Buffer.from(spec.policy).toString('base64') : '';
  if (policy !== pool.template.policy) return false;
  if (t?.runtime_class_name || t?.agent_socket || t?.user_namespaces || (t?.driver_config && t.driver_config.byteLength > 0)) return false;
  return !spec.log_level || spec.log_level === 'info';
}
