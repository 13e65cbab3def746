// google.protobuf.Struct <-> plain JSON objects. SandboxTemplate.resources and .driver_config are
// Structs carried as opaque bytes (openshell.proto keeps them wire-identical); this is how the
// gateway reads them and the CLI writes them. protobufjs ships struct.proto, so no .proto of ours.
import protobuf from 'protobufjs';

const structRoot = protobuf.Root.fromJSON(protobuf.common.get('google/protobuf/struct.proto')!);
const StructType = structRoot.lookupType('google.protobuf.Struct');

export type JsonValue = null | number | string | boolean | JsonValue[] | { [key: string]: JsonValue };

interface PbValue {
  nullValue?: number;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: { fields?: Record<string, PbValue> };
  listValue?: { values?: PbValue[] };
}

function fromValue(v: PbValue): JsonValue {
  if (v.numberValue !== undefined) return v.numberValue;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.structValue !== undefined) return fromFields(v.structValue.fields ?? {});
  if (v.listValue !== undefined) return (v.listValue.values ?? []).map(fromValue);
  return null;
}

function fromFields(fields: Record<string, PbValue>): Record<string, JsonValue> {
  return Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, fromValue(v)]));
}

function toValue(v: JsonValue): PbValue {
  if (v === null) return { nullValue: 0 };
  if (typeof v === 'number') return { numberValue: v };
  if (typeof v === 'string') return { stringValue: v };
  if (typeof v === 'boolean') return { boolValue: v };
  if (Array.isArray(v)) return { listValue: { values: v.map(toValue) } };
  return { structValue: { fields: Object.fromEntries(Object.entries(v).map(([k, x]) => [k, toValue(x)])) } };
}

/** Struct bytes → a JSON object. Throws on bytes that are not a Struct. */
export function decodeStruct(bytes: Uint8Array): Record<string, JsonValue> {
  const message = StructType.toObject(StructType.decode(bytes), { defaults: false, arrays: true, objects: true }) as {
    fields?: Record<string, PbValue>;
  };
  return fromFields(message.fields ?? {});
}

/** A JSON object → Struct bytes. */
export function encodeStruct(value: Record<string, JsonValue>): Buffer {
  const message = StructType.fromObject({ fields: Object.fromEntries(Object.entries(value).map(([k, v]) => [k, toValue(v)])) });
  const bytes = StructType.encode(message).finish();
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
