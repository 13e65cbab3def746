// Loads sandgate's .proto files with protobufjs and turns their services into grpc-js service
// definitions. We do this ourselves (instead of @grpc/proto-loader) so one protobufjs Root serves
// gRPC, Redis persistence (records are stored as encoded `Sandbox` bytes) and proto3 JSON output.
import protobuf from 'protobufjs';
import type { ServiceDefinition, MethodDefinition } from '@grpc/grpc-js';
import { loadDescriptor } from './descriptor.ts';
import { TO_OBJECT, type Codec } from './codec.ts';

export type { Codec } from './codec.ts';

export const root = loadDescriptor();

export function messageType(fullName: string): protobuf.Type {
  return root.lookupType(fullName);
}

export function encodeMessage(type: protobuf.Type, value: object): Buffer {
  const message = type.fromObject(value as Record<string, unknown>);
  const bytes = type.encode(message).finish();
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

export function decodeMessage<T>(type: protobuf.Type, bytes: Uint8Array): T {
  return type.toObject(type.decode(bytes), TO_OBJECT) as T;
}

/** A codec for one message type, by full name (e.g. `openshell.v1.Sandbox`). */
export function codec<T extends object>(fullName: string): Codec<T> {
  const type = messageType(fullName);
  return {
    encode: (value) => encodeMessage(type, value),
    decode: (bytes) => decodeMessage<T>(type, bytes),
  };
}

/** grpc-js service definition for a protobufjs service, e.g. `openshell.v1.OpenShell`. */
export function serviceDefinition(fullName: string): ServiceDefinition {
  const service = root.lookupService(fullName);
  const definition: Record<string, MethodDefinition<unknown, unknown>> = {};
  for (const method of service.methodsArray) {
    method.resolve();
    const requestType = method.resolvedRequestType!;
    const responseType = method.resolvedResponseType!;
    definition[method.name] = {
      path: `/${fullName}/${method.name}`,
      requestStream: Boolean(method.requestStream),
      responseStream: Boolean(method.responseStream),
      requestSerialize: (value: unknown) => encodeMessage(requestType, value as object),
      requestDeserialize: (bytes: Buffer) => decodeMessage(requestType, bytes),
      responseSerialize: (value: unknown) => encodeMessage(responseType, value as object),
      responseDeserialize: (bytes: Buffer) => decodeMessage(responseType, bytes),
      originalName: method.name,
    };
  }
  return definition as ServiceDefinition;
}
