import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import protobuf from 'protobufjs';
import { decodeMessage, encodeMessage, root } from '../src/load.ts';
import { sandboxPolicyCodec, supervisorGateway } from '../src/supervisor-wire.ts';
import { POLICY_FIELDS_READ, renderSupervisorWire, renderSupervisorWireTypes, SUPERVISOR_MESSAGES, SUPERVISOR_WIRE_FILE, SUPERVISOR_WIRE_TYPES_FILE } from '../src/supervisor-wire-gen.ts';
import type { Codec } from '../src/codec.ts';

/** A value for every field of `type` (one member per oneof, `choice` picking which), nested to `depth`. */
function sample(type: protobuf.Type, choice: number, depth = 3): Record<string, unknown> {
  const value: Record<string, unknown> = {};
  const skipped = new Set<string>();
  for (const oneof of type.oneofsArray) {
    oneof.fieldsArray.forEach((field, i) => {
      if (i !== choice % oneof.fieldsArray.length) skipped.add(field.name);
    });
  }
  for (const field of type.fieldsArray) {
    if (skipped.has(field.name)) continue;
    field.resolve();
    const one = (n: number): unknown => {
      if (field.resolvedType instanceof protobuf.Enum) return Object.values(field.resolvedType.values).at(-1);
      if (field.resolvedType instanceof protobuf.Type) return depth > 0 ? sample(field.resolvedType, choice + n, depth - 1) : {};
      switch (field.type) {
        case 'string': return `${field.name}-${n} é`;
        case 'bytes': return Buffer.from([0, 255, n, 10]);
        case 'bool': return true;
        case 'double': case 'float': return 1.5 + n;
        case 'int64': case 'uint64': case 'sint64': case 'fixed64': case 'sfixed64': return 1_700_000_000_000 + n;
        case 'int32': case 'sint32': case 'sfixed32': return -7 - n;
        default: return 7 + n;
      }
    };
    if (field.map) value[field.name] = { a: one(0), b: one(1) };
    else if (field.repeated) value[field.name] = [one(0), one(1)];
    else value[field.name] = one(0);
  }
  return value;
}

/** Every sample of a type: one per member of its largest oneof, so each member is tried once. */
function samples(fullName: string): Record<string, unknown>[] {
  const type = root.lookupType(fullName);
  const choices = Math.max(1, ...type.oneofsArray.map((o) => o.fieldsArray.length));
  return [{}, ...Array.from({ length: choices }, (_, i) => sample(type, i))];
}

function expectSameAsReflective(fullName: string, codec: Codec<object>): void {
  const type = root.lookupType(fullName);
  for (const value of samples(fullName)) {
    const bytes = encodeMessage(type, value);
    expect(codec.encode(value), `${fullName} encodes as the reflective codec does`).toEqual(bytes);
    expect(codec.decode(bytes), `${fullName} decodes as the reflective codec does`).toEqual(decodeMessage(type, bytes));
  }
}

/** `value` (a message of `fullName`, as the reflective codec reads it) with only the policy fields a supervisor reads. */
function policyAsRead(fullName: string, value: Record<string, unknown>): Record<string, unknown> {
  const read = POLICY_FIELDS_READ[fullName];
  if (!read) return value;
  const type = root.lookupType(fullName);
  const out: Record<string, unknown> = {};
  for (const name of read) {
    if (!(name in value)) continue;
    const field = type.fields[name]!;
    field.resolve();
    const nested = field.resolvedType instanceof protobuf.Type ? field.resolvedType.fullName.slice(1) : null;
    const one = (v: unknown) => (nested ? policyAsRead(nested, v as Record<string, unknown>) : v);
    const v = value[name];
    if (field.map) out[name] = Object.fromEntries(Object.entries(v as Record<string, unknown>).map(([k, x]) => [k, one(x)]));
    else if (field.repeated) out[name] = (v as unknown[]).map(one);
    else out[name] = one(v);
  }
  return out;
}

describe('the supervisor’s static codecs', () => {
  it('are what the .proto files generate (after editing one: node libs/protocols/src/supervisor-wire-gen.ts)', async () => {
    const stale = 'stale: run node libs/protocols/src/supervisor-wire-gen.ts';
    expect(fs.readFileSync(SUPERVISOR_WIRE_FILE, 'utf8'), stale).toBe(await renderSupervisorWire());
    expect(fs.readFileSync(SUPERVISOR_WIRE_TYPES_FILE, 'utf8'), stale).toBe(renderSupervisorWireTypes());
  });

  it('name the SupervisorGateway service’s methods, paths and message types as the descriptor does', () => {
    const service = root.lookupService('sandgate.v1.SupervisorGateway');
    expect(Object.keys(supervisorGateway).sort()).toEqual(Object.keys(service.methods).sort());
    for (const [name, method] of Object.entries(supervisorGateway)) {
      const described = service.methods[name]!;
      described.resolve();
      expect(method.path).toBe(`/sandgate.v1.SupervisorGateway/${name}`);
      expect(described.requestStream && described.responseStream, `${name} is bidirectional`).toBe(true);
      expectSameAsReflective(described.resolvedRequestType!.fullName.slice(1), method.request as Codec<object>);
      expectSameAsReflective(described.resolvedResponseType!.fullName.slice(1), method.response as Codec<object>);
    }
  });

  it('encode and decode every message the supervisor handles as the reflective codecs do', () => {
    expect(SUPERVISOR_MESSAGES).toContain('openshell.sandbox.v1.SandboxPolicy');
    // A policy with every field set decodes to what the egress proxy reads, as the reflective
    // codec reads it; the fields it does not read are skipped, whatever they hold.
    const policyName = 'openshell.sandbox.v1.SandboxPolicy';
    const policyType = root.lookupType(policyName);
    const policy = sandboxPolicyCodec<Record<string, unknown>>();
    for (const value of samples(policyName)) {
      const bytes = encodeMessage(policyType, value);
      const asRead = policyAsRead(policyName, decodeMessage(policyType, bytes) as Record<string, unknown>);
      expect(policy.decode(bytes), 'a policy decodes to the fields the supervisor reads').toEqual(asRead);
      expect(policy.encode(asRead)).toEqual(encodeMessage(policyType, asRead));
    }
    expect(policy.decode(encodeMessage(policyType, samples(policyName)[1]!))).toMatchObject({
      network_policies: { a: { name: 'name-0 é', endpoints: [{ host: 'host-0 é', port: 7, ports: [7, 8], allowed_ips: ['allowed_ips-0 é', 'allowed_ips-1 é'] }, expect.anything()] } },
    });
    // A nested message on its own, too: ExecStart (env map, argv, bytes stdin) through ExecFrame.
    const frame = { start: { exec_id: 'e1', argv: ['sh', '-c', 'true'], env: { A: 'b' }, tty: true } };
    const reflective = root.lookupType('sandgate.v1.ExecFrame');
    expect(supervisorGateway.ExecChannel.request.encode(frame as never)).toEqual(encodeMessage(reflective, frame));
  });

  it('refuse bytes that are not the message, as the reflective codecs do', () => {
    const garbage = Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]);
    expect(() => supervisorGateway.Control.response.decode(garbage)).toThrow();
    expect(() => decodeMessage(root.lookupType('sandgate.v1.GatewayMessage'), garbage)).toThrow();
  });
});
