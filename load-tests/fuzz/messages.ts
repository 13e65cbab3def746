// Message bodies: random bytes, random protobuf wire data, valid protobuf of every type in
// sandgate's schema (so a method gets other methods' messages), deep nesting and oversized fields.
import { root, encodeMessage, type messageType } from '@sandgate/protocols';
import { bytes, chance, int, junkString, pick, skewedLength, type Rng } from './rng.ts';

/** protobufjs's types, named through @sandgate/protocols (the one package that depends on it). */
export type PbType = ReturnType<typeof messageType>;
type PbField = PbType['fieldsArray'][number];
type Namespace = { nestedArray: unknown[] };

/** Every message type of the loaded schema. */
function allTypes(ns: Namespace, out: PbType[] = []): PbType[] {
  for (const nested of ns.nestedArray) {
    if ((nested as PbType).fields !== undefined && (nested as PbType).encode) out.push(nested as PbType);
    if ((nested as Namespace).nestedArray) allTypes(nested as Namespace, out);
  }
  return out;
}

export const MESSAGE_TYPES = allTypes(root as unknown as Namespace);

/** Names the fuzzer fills string fields with: never a live sandbox's, so no input acts on one. */
const NAMES = ['', 'fuzz-nonexistent', 'x', '../../etc/passwd', '*', '%00', 'a'.repeat(300), '\u0000\uffff', 'default'];

/** A plausible value for one field: random, empty or hostile. */
function fieldValue(rng: Rng, field: PbField, depth: number): unknown {
  field.resolve();
  if (field.resolvedType && (field.resolvedType as PbType).fields !== undefined) {
    return depth > 3 ? {} : randomObject(rng, field.resolvedType as PbType, depth + 1);
  }
  if (field.resolvedType) {
    const values = Object.values((field.resolvedType as unknown as { values: Record<string, number> }).values);
    return chance(rng, 0.8) ? pick(rng, values) : int(rng, -5, 1000);
  }
  switch (field.type) {
    case 'string':
      return chance(rng, 0.7) ? pick(rng, NAMES) : junkString(rng, skewedLength(rng, 2000));
    case 'bytes':
      return bytes(rng, skewedLength(rng, 4096));
    case 'bool':
      return chance(rng, 0.5);
    case 'double':
    case 'float':
      return pick(rng, [0, -1, 1e308, Number.NaN, Number.POSITIVE_INFINITY, rng() * 1e6]);
    default:
      return pick(rng, [0, 1, -1, 2 ** 31 - 1, -(2 ** 31), 2 ** 32 - 1, Number.MAX_SAFE_INTEGER, int(rng, 0, 100_000)]);
  }
}

export function randomObject(rng: Rng, type: PbType, depth = 0): Record<string, unknown> {
  const obj: Record<string, unknown> = {};
  for (const field of type.fieldsArray) {
    if (!chance(rng, 0.5)) continue;
    if (field.map) {
      const m: Record<string, unknown> = {};
      for (let i = int(rng, 0, 3); i > 0; i--) m[junkString(rng, int(rng, 0, 20))] = field.type === 'string' ? junkString(rng, int(rng, 0, 50)) : fieldValue(rng, field, depth);
      obj[field.name] = m;
    } else if (field.repeated) {
      obj[field.name] = Array.from({ length: int(rng, 0, 5) }, () => fieldValue(rng, field, depth));
    } else obj[field.name] = fieldValue(rng, field, depth);
  }
  return obj;
}

/** A valid encoding of a random message of some type of the schema (usually not the method's). */
export function wrongTypeMessage(rng: Rng): { type: string; bytes: Buffer } {
  const type = pick(rng, MESSAGE_TYPES);
  try {
    return { type: type.fullName, bytes: encodeMessage(type, randomObject(rng, type)) };
  } catch {
    return { type: type.fullName, bytes: Buffer.alloc(0) };
  }
}

function varint(n: number): Buffer {
  const out: number[] = [];
  let v = n;
  while (v > 0x7f) {
    out.push((v & 0x7f) | 0x80);
    v = Math.floor(v / 128);
  }
  out.push(v);
  return Buffer.from(out);
}

/** Random but well-formed protobuf wire data: fields with random numbers and wire types. */
export function randomWire(rng: Rng, depth = 0): Buffer {
  const parts: Buffer[] = [];
  for (let i = int(rng, 0, 8); i > 0; i--) {
    const fieldNo = chance(rng, 0.8) ? int(rng, 1, 16) : int(rng, 1, 536_870_911);
    const wire = pick(rng, [0, 1, 2, 5, 2, 2]);
    parts.push(varint(fieldNo * 8 + wire));
    if (wire === 0) parts.push(varint(pick(rng, [0, 1, 127, 128, 2 ** 31, 2 ** 53 - 1, int(rng, 0, 1e6)])));
    else if (wire === 1) parts.push(bytes(rng, 8));
    else if (wire === 5) parts.push(bytes(rng, 4));
    else {
      const inner = depth < 4 && chance(rng, 0.4) ? randomWire(rng, depth + 1) : bytes(rng, skewedLength(rng, 512));
      parts.push(varint(inner.length), inner);
    }
  }
  return Buffer.concat(parts);
}

/** Field 1, length-delimited, nested `levels` deep: a recursion bomb for decoders. */
export function deepNesting(levels: number): Buffer {
  let inner = Buffer.alloc(0);
  for (let i = 0; i < levels; i++) inner = Buffer.concat([Buffer.from([0x0a]), varint(inner.length), inner]);
  return inner;
}

/** A length-delimited field that claims more bytes than follow, or an unterminated varint. */
export function truncatedWire(rng: Rng): Buffer {
  return pick(rng, [
    Buffer.concat([Buffer.from([0x0a]), varint(int(rng, 10, 2 ** 28))]),
    Buffer.from([0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
    Buffer.from([0x08, 0x80]),
    Buffer.from([0x0f]), // wire type 7: invalid
    Buffer.from([0x0b, 0x08, 0x01]), // start group, never ended
    Buffer.from([0x00]), // field number 0
  ]);
}

export type BodyKind = 'random-bytes' | 'random-wire' | 'wrong-type' | 'right-type-hostile' | 'deep-nesting' | 'truncated-wire' | 'empty' | 'big-field';

export const BODY_KINDS: BodyKind[] = ['random-bytes', 'random-wire', 'wrong-type', 'right-type-hostile', 'deep-nesting', 'truncated-wire', 'empty', 'big-field'];

/** A body of one kind, for a method whose request type is `requestType`. */
export function body(rng: Rng, kind: BodyKind, requestType: PbType): Buffer {
  switch (kind) {
    case 'random-bytes':
      return bytes(rng, skewedLength(rng, 8192));
    case 'random-wire':
      return randomWire(rng);
    case 'wrong-type':
      return wrongTypeMessage(rng).bytes;
    case 'right-type-hostile':
      try {
        return encodeMessage(requestType, randomObject(rng, requestType));
      } catch {
        return Buffer.alloc(0);
      }
    case 'deep-nesting':
      return deepNesting(pick(rng, [100, 1000, 5000]));
    case 'truncated-wire':
      return truncatedWire(rng);
    case 'empty':
      return Buffer.alloc(0);
    case 'big-field': {
      // One string field of 1–3 MiB (under gRPC's 4 MiB default, so the handler sees it).
      const n = int(rng, 1, 3) * 1024 * 1024;
      return Buffer.concat([Buffer.from([0x0a]), varint(n), Buffer.alloc(n, 0x61)]);
    }
  }
}
