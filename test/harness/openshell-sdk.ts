// A client built the way OpenShell's official TypeScript SDK builds its transport: connect-node's
// gRPC transport (`createGrpcTransport`) with `https://` base URLs and the CA, client certificate
// and key passed to Node's TLS (`nodeOptions`), an interceptor that sets
// `authorization: Bearer <token>`, `createClient` from @connectrpc/connect, and messages as
// @bufbuild/protobuf v2 values. The SDK uses generated code; here the service descriptor is built
// at run time from the same .proto files the gateway loads (protobufjs → FileDescriptorSet →
// @bufbuild/protobuf's registry), so the wire format is the SDK's, not grpc-js'.
import { createClient, type Client, type Interceptor } from '@connectrpc/connect';

/** The SDK's error type (what every failed call rejects with). */
export { ConnectError } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { createFileRegistry, fromBinary, type DescService } from '@bufbuild/protobuf';
import { FileDescriptorSetSchema } from '@bufbuild/protobuf/wkt';
import protobuf from 'protobufjs';
import descriptor from 'protobufjs/ext/descriptor/index.js';
import { root } from '@sandgate/protocols';

interface FieldProto {
  name: string;
  typeName?: string;
}
interface MessageProto {
  name: string;
  field: FieldProto[];
  nestedType: MessageProto[];
}
interface FileProto {
  name: string;
  package: string;
  dependency: string[];
  messageType: MessageProto[];
}

/**
 * protobufjs writes type references relative to their scope and names no file dependencies;
 * @bufbuild/protobuf wants fully qualified names (`.openshell.v1.Sandbox`) and files after the
 * files they depend on. This qualifies every reference (resolved by protobufjs itself) and
 * orders the files.
 */
function qualify(files: FileProto[]): FileProto[] {
  root.resolveAll();
  const fileOfPackage = new Map(files.map((f) => [f.package, f.name]));
  const deps = new Map<string, Set<string>>(files.map((f) => [f.name, new Set<string>()]));
  const note = (file: FileProto, fullName: string) => {
    const pkg = [...fileOfPackage.keys()].filter((p) => fullName.startsWith(`.${p}.`)).sort((a, b) => b.length - a.length)[0];
    const dep = pkg === undefined ? undefined : fileOfPackage.get(pkg);
    if (dep && dep !== file.name) deps.get(file.name)!.add(dep);
  };
  const walk = (file: FileProto, scope: string, m: MessageProto, mapOwner?: { type: protobuf.Type; field: string }) => {
    const full = `${scope}.${m.name}`;
    const entries = new Set(m.nestedType.map((n) => n.name));
    const type = mapOwner ? null : (root.lookup(full.slice(1)) as protobuf.Type | null);
    for (const f of m.field) {
      if (!f.typeName || f.typeName.startsWith('.')) continue;
      if (!mapOwner && entries.has(f.typeName)) {
        f.typeName = `${full}.${f.typeName}`;
        continue;
      }
      // A map entry's value: the owning map field's value type.
      const resolved = mapOwner ? mapOwner.type.fields[mapOwner.field]!.resolvedType : type?.fields[f.name]?.resolvedType;
      if (!resolved) throw new Error(`cannot resolve ${f.typeName} of ${full}.${f.name}`);
      f.typeName = resolved.fullName;
      note(file, f.typeName);
    }
    for (const n of m.nestedType) {
      const owner = type ? Object.values(type.fields).find((fl) => fl.map && `${full}.${n.name}` === m.field.find((x) => x.name === fl.name)?.typeName) : undefined;
      walk(file, full, n, owner && type ? { type, field: owner.name } : undefined);
    }
  };
  for (const f of files) for (const m of f.messageType) walk(f, `.${f.package}`, m);
  // Services reference messages too (`.openshell.v1.X`), all in their own file's package here.
  const ordered: FileProto[] = [];
  const visit = (f: FileProto) => {
    if (ordered.includes(f)) return;
    for (const d of deps.get(f.name)!) visit(files.find((x) => x.name === d)!);
    ordered.push(f);
  };
  for (const f of files) {
    f.dependency = [...deps.get(f.name)!];
    visit(f);
  }
  return ordered;
}

interface ServiceProto {
  method: { inputType: string; outputType: string }[];
}

let service: DescService | undefined;

/** `openshell.v1.OpenShell` as @bufbuild/protobuf describes it (built once). */
export function openShellService(): DescService {
  if (service) return service;
  root.resolveAll();
  const set = (root as unknown as { toDescriptor(syntax: string): { file: (FileProto & { service: ServiceProto[] })[] } }).toDescriptor('proto3');
  set.file = qualify(set.file) as typeof set.file;
  for (const f of set.file) {
    for (const s of f.service) {
      for (const m of s.method) {
        for (const k of ['inputType', 'outputType'] as const) {
          if (!m[k].startsWith('.')) m[k] = (root.lookup(`${f.package}.${m[k]}`) ?? root.lookup(m[k]))!.fullName;
        }
      }
    }
  }
  const bytes = (descriptor as unknown as { FileDescriptorSet: { encode(v: unknown): { finish(): Uint8Array } } }).FileDescriptorSet.encode(set).finish();
  const registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, bytes));
  const found = registry.getService('openshell.v1.OpenShell');
  if (!found) throw new Error('openshell.v1.OpenShell is not in the descriptor set');
  service = found;
  return service;
}

export interface SdkClientOptions {
  /** `https://host:port` (TLS) — the SDK's form of a gateway address. */
  baseUrl: string;
  /** Trust for the gateway's certificate, and the mTLS pair: handed to Node's TLS as the SDK does. */
  ca?: Buffer | string;
  cert?: Buffer | string;
  key?: Buffer | string;
  /** The name the gateway's certificate is checked for, when the URL's host is an address. */
  servername?: string;
  /** Bearer token, set by an interceptor on every call. */
  token?: string;
}

/** A connect client of `openshell.v1.OpenShell`, configured like the SDK's. */
export function sdkClient(o: SdkClientOptions): Client<DescService> {
  const interceptors: Interceptor[] = [];
  if (o.token) {
    const token = o.token;
    interceptors.push((next) => async (req) => {
      req.header.set('authorization', `Bearer ${token}`);
      return next(req);
    });
  }
  const transport = createGrpcTransport({
    baseUrl: o.baseUrl,
    interceptors,
    nodeOptions: { ca: o.ca, cert: o.cert, key: o.key, servername: o.servername },
  });
  return createClient(openShellService(), transport) as unknown as Client<DescService>;
}
