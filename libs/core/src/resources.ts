// SandboxTemplate.resources: a google.protobuf.Struct `{limits: {cpu, memory}}` with Kubernetes
// quantities, as upstream's `openshell sandbox create --cpu/--memory` sends it, parsed into the
// limits the compute driver enforces. Everything else in the Struct is refused naming it: a
// limit sandgate accepted but did not enforce would be a lie. Pure: no I/O.
import { decodeStruct, type JsonValue } from '@sandgate/protocols';
import { invalid } from './status.ts';

/** What the driver enforces (the shape of @sandgate/compute's ResourceLimits). */
export interface ParsedLimits {
  cpuMillis?: number;
  memoryBytes?: number;
  pids?: number;
}

/** Below these a sandbox cannot even start its supervisor. */
export const MIN_CPU_MILLIS = 10;
export const MIN_MEMORY_BYTES = 16 * 1024 * 1024;
/** Far beyond any host; keeps every figure an exact JS number. */
export const MAX_CPU_MILLIS = 1024 * 1000;
export const MAX_MEMORY_BYTES = 2 ** 50;
export const MIN_PIDS = 16;
export const MAX_PIDS = 1 << 22;

const WHERE = 'spec.template.resources';
const SUPPORTED = '(only limits.cpu, limits.memory and limits.pids are enforced)';

const BINARY_SUFFIX: Record<string, number> = { Ki: 10, Mi: 20, Gi: 30, Ti: 40, Pi: 50, Ei: 60 };
const DECIMAL_SUFFIX: Record<string, number> = { n: -9, u: -6, m: -3, '': 0, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };
const QUANTITY = /^\+?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE]([+-]?[0-9]+))?$/;

/** An exact non-negative rational from a Kubernetes quantity (`500m`, `0.5`, `256Mi`, `1e9`), or null. */
export function parseQuantity(text: string): { num: bigint; den: bigint } | null {
  const m = QUANTITY.exec(text.trim());
  if (!m) return null;
  const [whole, frac = ''] = m[1]!.split('.');
  let num = BigInt(`${whole || '0'}${frac}`);
  let den = 10n ** BigInt(frac.length);
  const suffix = m[2] ?? '';
  let exp10 = m[3] !== undefined ? Number(m[3]) : (DECIMAL_SUFFIX[suffix] ?? 0);
  if (suffix in BINARY_SUFFIX) {
    num *= 2n ** BigInt(BINARY_SUFFIX[suffix]!);
    exp10 = 0;
  }
  if (Math.abs(exp10) > 30) return null;
  if (exp10 >= 0) num *= 10n ** BigInt(exp10);
  else den *= 10n ** BigInt(-exp10);
  return { num, den };
}

const ceilDiv = (a: bigint, b: bigint) => (a + b - 1n) / b;

function quantityText(value: JsonValue, at: string): string {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  throw invalid(`${at} must be a quantity string or number, got ${JSON.stringify(value)}`);
}

/** CPU in millicores, rounded up as Kubernetes does (`0.5` = 500, `250m` = 250, `2` = 2000). */
export function parseCpuMillis(value: JsonValue, at = `${WHERE}.limits.cpu`): number {
  const text = quantityText(value, at);
  const q = parseQuantity(text);
  if (!q) throw invalid(`${at} '${text}' is not a valid CPU quantity: use cores or millicores, for example 2, 0.5 or 500m`);
  const millis = ceilDiv(q.num * 1000n, q.den);
  if (millis < BigInt(MIN_CPU_MILLIS)) throw invalid(`${at} '${text}' is below the minimum ${MIN_CPU_MILLIS}m`);
  if (millis > BigInt(MAX_CPU_MILLIS)) throw invalid(`${at} '${text}' is above the maximum ${MAX_CPU_MILLIS / 1000} cores`);
  return Number(millis);
}

/** Memory in bytes, rounded up (`256Mi`, `1Gi`, `512M`, `1e9`, plain bytes). */
export function parseMemoryBytes(value: JsonValue, at = `${WHERE}.limits.memory`): number {
  const text = quantityText(value, at);
  const q = parseQuantity(text);
  if (!q) throw invalid(`${at} '${text}' is not a valid memory quantity: use bytes or a quantity such as 256Mi, 1Gi or 512M`);
  const bytes = ceilDiv(q.num, q.den);
  if (bytes < BigInt(MIN_MEMORY_BYTES)) throw invalid(`${at} '${text}' is below the minimum 16Mi`);
  if (bytes > BigInt(MAX_MEMORY_BYTES)) throw invalid(`${at} '${text}' is above the maximum 1Pi`);
  return Number(bytes);
}

function parsePids(value: JsonValue, at: string): number {
  const n = typeof value === 'string' && /^[0-9]+$/.test(value.trim()) ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isInteger(n)) throw invalid(`${at} must be a whole number of processes, got ${JSON.stringify(value)}`);
  if (n < MIN_PIDS || n > MAX_PIDS) throw invalid(`${at} ${n} is out of range [${MIN_PIDS}, ${MAX_PIDS}]`);
  return n;
}

/** The limits a resources Struct asks for; INVALID_ARGUMENT naming any key or value sandgate cannot enforce. */
export function limitsFromStruct(fields: Record<string, JsonValue>): ParsedLimits {
  const out: ParsedLimits = {};
  for (const [key, value] of Object.entries(fields)) {
    if (key === 'requests') {
      throw invalid(
        `${WHERE}.requests is not supported by sandgate (a request is a scheduling hint, and sandgate only enforces limits: use limits.cpu and limits.memory)`,
      );
    }
    if (key !== 'limits') throw invalid(`${WHERE}.${key} is not supported by sandgate ${SUPPORTED}`);
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      throw invalid(`${WHERE}.limits must be an object such as {cpu: "500m", memory: "256Mi"}`);
    }
    for (const [name, quantity] of Object.entries(value)) {
      const at = `${WHERE}.limits.${name}`;
      if (name === 'cpu') out.cpuMillis = parseCpuMillis(quantity, at);
      else if (name === 'memory') out.memoryBytes = parseMemoryBytes(quantity, at);
      else if (name === 'pids') out.pids = parsePids(quantity, at);
      else throw invalid(`${at} is not supported by sandgate ${SUPPORTED}`);
    }
  }
  return out;
}

/** SandboxTemplate.resources bytes → the limits to enforce; absent or empty bytes → none. */
export function parseResources(bytes: Uint8Array | undefined): ParsedLimits {
  if (!bytes || bytes.byteLength === 0) return {};
  let fields: Record<string, JsonValue>;
  try {
    fields = decodeStruct(bytes);
  } catch (err) {
    throw invalid(`${WHERE} is not a valid google.protobuf.Struct: ${err instanceof Error ? err.message : String(err)}`);
  }
  return limitsFromStruct(fields);
}

/** `500m`, `2`: millicores as the shortest quantity (for display). */
export function formatCpu(millis: number): string {
  return millis % 1000 === 0 ? String(millis / 1000) : `${millis}m`;
}

/** Bytes as the largest exact binary quantity (`256Mi`), for display. */
export function formatMemory(bytes: number): string {
  for (const [suffix, shift] of [['Gi', 30], ['Mi', 20], ['Ki', 10]] as const) {
    if (bytes % 2 ** shift === 0) return `${bytes / 2 ** shift}${suffix}`;
  }
  return String(bytes);
}
