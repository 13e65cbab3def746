import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { DESCRIPTOR_FILE, loadDescriptor, parseProtoFiles, renderDescriptor } from '../src/descriptor.ts';

describe('proto/descriptor.json', () => {
  it('is what the .proto files compile to (after editing one: node libs/protocols/src/descriptor.ts)', () => {
    expect(fs.readFileSync(DESCRIPTOR_FILE, 'utf8'), 'proto/descriptor.json is stale: run node libs/protocols/src/descriptor.ts').toBe(
      renderDescriptor(parseProtoFiles()),
    );
  });

  it('loads into the same types, services and methods as the .proto files', () => {
    const fromText = parseProtoFiles();
    const fromJson = loadDescriptor();
    expect(fromJson.toJSON()).toEqual(fromText.toJSON());
    const svc = fromJson.lookupService('openshell.v1.OpenShell');
    expect(Object.keys(svc.methods)).toEqual(Object.keys(fromText.lookupService('openshell.v1.OpenShell').methods));
    // A message round-trips identically through either root.
    const a = fromText.lookupType('openshell.v1.Sandbox');
    const b = fromJson.lookupType('openshell.v1.Sandbox');
    const msg = { metadata: { id: 'x', name: 'n', labels: { a: 'b' }, created_at_ms: 1700000000000 }, spec: { command: ['sleep', '1'] } };
    expect(Buffer.from(b.encode(b.fromObject(msg)).finish())).toEqual(Buffer.from(a.encode(a.fromObject(msg)).finish()));
  });
});
