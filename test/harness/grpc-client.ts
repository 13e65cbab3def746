// A raw OpenShell gRPC client for tests that need what the CLI does not expose.
import { credentials, makeGenericClientConstructor, type Client, type ServiceError } from '@grpc/grpc-js';
import { serviceDefinition } from '@sandgate/protocols';

const OpenShellClient = makeGenericClientConstructor(serviceDefinition('openshell.v1.OpenShell'), 'OpenShell');

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyClient = Client & Record<string, any>;

export function openShellClient(address: string): AnyClient {
  // Reconnect quickly after a replica or the balancer dropped us (grpc-js defaults back off to 2 min).
  return new OpenShellClient(address, credentials.createInsecure(), {
    'grpc.initial_reconnect_backoff_ms': 100,
    'grpc.max_reconnect_backoff_ms': 1000,
  }) as unknown as AnyClient;
}

/** Calls a unary method and resolves with the response or rejects with the ServiceError. */
export function unaryCall<T>(client: AnyClient, method: string, request: object): Promise<T> {
  return new Promise((resolve, reject) => {
    client[method](request, (err: ServiceError | null, res: T) => (err ? reject(err) : resolve(res)));
  });
}
