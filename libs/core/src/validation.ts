// Request validation for the sandbox surface. Pure functions: they return normalised values or
// throw a GatewayError whose message names the field and the rule that was broken.
import { invalid } from './status.ts';
import * as L from './limits.ts';

const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/;
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const LABEL_NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
/** Exec env keys under this prefix belong to the gateway, except the one upstream lets through. */
const RESERVED_ENV_PREFIX = 'OPENSHELL_';
const RESERVED_ENV_EXCEPTION = 'OPENSHELL_PYFUNC_B64';

const utf8Bytes = (s: string) => Buffer.byteLength(s, 'utf8');
const hasNul = (s: string) => s.includes('\0');
const hasLineBreak = (s: string) => /[\r\n]/.test(s);

export function normaliseWorkspace(workspace: string | undefined): string {
  return workspace && workspace.length > 0 ? workspace : L.DEFAULT_WORKSPACE;
}

/** A sandbox name given by a user: ≤19 chars, DNS-1123 label, and no `--`. */
export function validateSandboxName(name: string): void {
  if (name.length > L.MAX_NAME_LEN) throw invalid(`name exceeds maximum length (${name.length} > ${L.MAX_NAME_LEN})`);
  if (!DNS_LABEL.test(name)) {
    throw invalid(`name '${name}' is invalid: use lowercase letters, digits and '-', starting and ending with a letter or digit`);
  }
  if (name.includes('--')) throw invalid(`name '${name}' is invalid: it must not contain '--'`);
}

export function requireName(name: string | undefined): string {
  if (!name) throw invalid('name is required');
  return name;
}

/** Kubernetes label key: `[prefix/]name`. */
export function validateLabelKey(key: string, what = 'label'): void {
  const slash = key.indexOf('/');
  const prefix = slash >= 0 ? key.slice(0, slash) : '';
  const name = slash >= 0 ? key.slice(slash + 1) : key;
  if (slash >= 0 && (prefix.length === 0 || prefix.length > L.MAX_LABEL_PREFIX_LEN || !DNS_SUBDOMAIN.test(prefix))) {
    throw invalid(`${what} key '${key}' has an invalid prefix: it must be a DNS subdomain of at most ${L.MAX_LABEL_PREFIX_LEN} characters`);
  }
  if (name.length === 0 || name.length > L.MAX_LABEL_NAME_LEN || !LABEL_NAME.test(name)) {
    throw invalid(
      `${what} key '${key}' is invalid: the name part must be 1-${L.MAX_LABEL_NAME_LEN} characters of [A-Za-z0-9-_.], starting and ending with an alphanumeric`,
    );
  }
}

export function validateLabelValue(key: string, value: string): void {
  if (value.length === 0) return;
  if (value.length > L.MAX_LABEL_VALUE_LEN || !LABEL_NAME.test(value)) {
    throw invalid(
      `label '${key}' has an invalid value '${value}': it must be empty or 1-${L.MAX_LABEL_VALUE_LEN} characters of [A-Za-z0-9-_.], starting and ending with an alphanumeric`,
    );
  }
}

export function validateLabels(labels: Record<string, string>): void {
  const entries = Object.entries(labels);
  if (entries.length > L.MAX_MAP_ENTRIES) throw invalid(`too many labels (${entries.length} > ${L.MAX_MAP_ENTRIES})`);
  for (const [key, value] of entries) {
    validateLabelKey(key);
    validateLabelValue(key, value);
  }
}

export function validateAnnotations(annotations: Record<string, string>): void {
  const entries = Object.entries(annotations);
  if (entries.length > L.MAX_MAP_ENTRIES) throw invalid(`too many annotations (${entries.length} > ${L.MAX_MAP_ENTRIES})`);
  for (const [key, value] of entries) {
    if (key.length > L.MAX_ANNOTATION_KEY_LEN) {
      throw invalid(`annotation key '${key.slice(0, 40)}…' exceeds maximum length (${key.length} > ${L.MAX_ANNOTATION_KEY_LEN})`);
    }
    validateLabelKey(key, 'annotation');
    if (utf8Bytes(value) > L.MAX_ANNOTATION_VALUE_LEN) {
      throw invalid(`annotation '${key}' value exceeds maximum length (${utf8Bytes(value)} > ${L.MAX_ANNOTATION_VALUE_LEN} bytes)`);
    }
  }
}

function validateEnvKey(key: string, allowPyfunc: boolean): void {
  if (!ENV_KEY.test(key)) throw invalid('environment keys must match ^[A-Za-z_][A-Za-z0-9_]*$');
  if (key.startsWith(RESERVED_ENV_PREFIX) && !(allowPyfunc && key === RESERVED_ENV_EXCEPTION)) {
    throw invalid(`environment key '${key}' is reserved: keys starting with ${RESERVED_ENV_PREFIX} are set by the gateway`);
  }
}

function validateEnvValue(key: string, value: string, maxBytes?: number): void {
  if (hasNul(value) || hasLineBreak(value)) {
    throw invalid(`environment value of '${key}' must not contain NUL, CR or LF`);
  }
  if (maxBytes !== undefined && utf8Bytes(value) > maxBytes) {
    throw invalid(`environment value of '${key}' exceeds maximum length (${utf8Bytes(value)} > ${maxBytes} bytes)`);
  }
}

/** The sandbox-wide environment in `SandboxSpec.environment` (and the template's). */
export function validateSpecEnvironment(env: Record<string, string>, where = 'spec.environment'): void {
  const entries = Object.entries(env);
  if (entries.length > L.MAX_MAP_ENTRIES) throw invalid(`${where} has too many entries (${entries.length} > ${L.MAX_MAP_ENTRIES})`);
  let total = 0;
  for (const [key, value] of entries) {
    validateEnvKey(key, false);
    validateEnvValue(key, value);
    total += utf8Bytes(key) + utf8Bytes(value);
  }
  if (total > L.MAX_SPEC_ENV_TOTAL_BYTES) {
    throw invalid(`${where} is too large (${total} > ${L.MAX_SPEC_ENV_TOTAL_BYTES} bytes)`);
  }
}

export function validateMainCommand(command: string[]): void {
  if (command.length > L.MAX_MAIN_ARGS) throw invalid(`spec.command has too many arguments (${command.length} > ${L.MAX_MAIN_ARGS})`);
  if (command[0] === '') throw invalid('spec.command[0] must not be empty');
  let total = 0;
  command.forEach((arg, i) => {
    if (hasNul(arg)) throw invalid(`spec.command[${i}] must not contain NUL`);
    const n = utf8Bytes(arg);
    if (n > L.MAX_ARG_BYTES) throw invalid(`spec.command[${i}] exceeds maximum length (${n} > ${L.MAX_ARG_BYTES} bytes)`);
    total += n;
  });
  if (total > L.MAX_MAIN_ARGV_TOTAL_BYTES) throw invalid(`spec.command is too large (${total} > ${L.MAX_MAIN_ARGV_TOTAL_BYTES} bytes)`);
}

export interface ExecParams {
  sandbox_id?: string;
  command: string[];
  workdir?: string;
  environment: Record<string, string>;
}

/** ExecSandbox / ExecSandboxInteractive start: validated before any I/O. */
export function validateExec(req: ExecParams): string {
  if (!req.sandbox_id) throw invalid('sandbox_id is required');
  if (req.command.length === 0) throw invalid('command is required');
  if (req.command.length > L.MAX_EXEC_ARGS) throw invalid(`command has too many arguments (${req.command.length} > ${L.MAX_EXEC_ARGS})`);
  req.command.forEach((arg, i) => {
    if (hasNul(arg)) throw invalid(`command[${i}] must not contain NUL`);
    const n = utf8Bytes(arg);
    if (n > L.MAX_ARG_BYTES) throw invalid(`command[${i}] exceeds maximum length (${n} > ${L.MAX_ARG_BYTES} bytes)`);
  });
  if (req.command[0] === '') throw invalid('command[0] must not be empty');
  for (const [key, value] of Object.entries(req.environment)) {
    validateEnvKey(key, true);
    validateEnvValue(key, value, L.MAX_EXEC_ENV_VALUE_BYTES);
  }
  const workdir = req.workdir ?? '';
  if (hasNul(workdir) || hasLineBreak(workdir)) throw invalid('workdir must not contain NUL, CR or LF');
  if (utf8Bytes(workdir) > L.MAX_WORKDIR_BYTES) throw invalid(`workdir exceeds maximum length (${utf8Bytes(workdir)} > ${L.MAX_WORKDIR_BYTES} bytes)`);
  return req.sandbox_id;
}

export type LabelSelector = ReadonlyArray<readonly [string, string]>;

/** `k=v,k2=v2`: equality only, at most 64 pairs. */
export function parseLabelSelector(selector: string | undefined): LabelSelector {
  if (!selector || selector.trim() === '') return [];
  const pairs = selector.split(',').map((part) => part.trim());
  if (pairs.length > L.MAX_SELECTOR_PAIRS) throw invalid(`label selector has too many terms (${pairs.length} > ${L.MAX_SELECTOR_PAIRS})`);
  return pairs.map((pair) => {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw invalid(`invalid label selector term '${pair}': expected key=value (only equality is supported)`);
    const key = pair.slice(0, eq).trim();
    const value = pair.slice(eq + 1).replace(/^=/, '').trim(); // accept k==v as k=v
    validateLabelKey(key);
    validateLabelValue(key, value);
    return [key, value] as const;
  });
}

export function matchesSelector(labels: Record<string, string>, selector: LabelSelector): boolean {
  return selector.every(([k, v]) => labels[k] === v);
}

export function normaliseListLimit(limit: number | undefined): number {
  if (!limit) return L.LIST_DEFAULT_LIMIT;
  return Math.min(limit, L.LIST_MAX_LIMIT);
}
