// sandgate's .proto files, compiled once into proto/descriptor.json (protobufjs' JSON form, field
// names as written: keepCase). Every process loads the JSON instead of parsing the .proto text:
// about a quarter of the time, which counts where start-up counts (each sandbox's supervisor,
// each CLI command). The .proto files stay the source; a unit test fails when the JSON no longer
// matches them.
//   node libs/protocols/src/descriptor.ts     # writes proto/descriptor.json again
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';

export const PROTO_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'proto');
export const DESCRIPTOR_FILE = path.join(PROTO_DIR, 'descriptor.json');

const PROTO_FILES = [
  'openshell/datamodel/v1/datamodel.proto',
  'openshell/v1/openshell.proto',
  'openshell/sandbox/v1/sandbox.proto',
  'sandgate/v1/sandgate.proto',
];

/** Parses the .proto files themselves (the generator's and the freshness test's path). */
export function parseProtoFiles(): protobuf.Root {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => (path.isAbsolute(target) ? target : path.join(PROTO_DIR, target));
  root.loadSync(PROTO_FILES, { keepCase: true });
  root.resolveAll();
  return root;
}

/** The descriptor as written to DESCRIPTOR_FILE: stable, so a regeneration without changes is no diff. */
export function renderDescriptor(root: protobuf.Root): string {
  return JSON.stringify(root.toJSON(), null, 1) + '\n';
}

/** The Root every process uses, from DESCRIPTOR_FILE. */
export function loadDescriptor(): protobuf.Root {
  const root = protobuf.Root.fromJSON(JSON.parse(fs.readFileSync(DESCRIPTOR_FILE, 'utf8')) as protobuf.INamespace);
  root.resolveAll();
  return root;
}

if (import.meta.main) {
  fs.writeFileSync(DESCRIPTOR_FILE, renderDescriptor(parseProtoFiles()));
  console.log(`wrote ${path.relative(process.cwd(), DESCRIPTOR_FILE)}`);
}
