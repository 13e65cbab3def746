// Canonical proto3 JSON (lowerCamelCase names, 64-bit integers as strings, enums by name, bytes
// as base64, defaults omitted, explicit-presence fields kept) for the CLI's `-o json` output.
import protobuf from 'protobufjs';
import { messageType } from './load.ts';

const JSON_OPTIONS: protobuf.IConversionOptions = {
  longs: String,
  enums: String,
  bytes: String,
  defaults: false,
  json: true,
  oneofs: false,
};

export function toProto3Json(fullName: string, value: object): unknown {
  const type = messageType(fullName);
  const plain = type.toObject(type.fromObject(value as Record<string, unknown>), JSON_OPTIONS);
  return renameFields(type, plain);
}

function lowerCamel(name: string): string {
  return name.replace(/_([a-z0-9])/g, (_m, c: string) => c.toUpperCase());
}

// The root keeps .proto field names (snake_case); JSON wants lowerCamelCase. Walk with the type
// so map keys (labels, environment…) are left exactly as the user wrote them.
function renameFields(type: protobuf.Type, plain: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, val] of Object.entries(plain)) {
    const field = type.fields[key];
    if (!field) continue;
    field.resolve();
    const sub = field.resolvedType instanceof protobuf.Type ? field.resolvedType : null;
    let converted: unknown = val;
    if (sub) {
      if (field.map) {
        converted = Object.fromEntries(
          Object.entries(val as Record<string, Record<string, unknown>>).map(([k, v]) => [k, renameFields(sub, v)]),
        );
      } else if (field.repeated) {
        converted = (val as Record<string, unknown>[]).map((v) => renameFields(sub, v));
      } else {
        converted = renameFields(sub, val as Record<string, unknown>);
      }
    }
    out[lowerCamel(key)] = converted;
  }
  return out;
}
