// A raw OpenShell gRPC client for tests that need what the CLI does not expose. It presents the
// credentials given, else those registered for the address (credentials.ts).
import { credentials as grpcCredentials, makeGenericClientConstructor, Metadata, type Client, type Interceptor, type InterceptingCall, type ServiceError } from '@grpc/grpc-js';
import { InterceptingCall as Intercepting } from '@grpc/grpc-js';
import { serviceDefinition } from '@sandgate/protocols';
import { credentialsFor, type GatewayCredentials } from './credentials.ts';

// sandgate's own public calls (sandgate.v1.Sandgate: pools, usage, files) ride the same client, as in the CLI.
const OpenShellClient = makeGenericClientConstructor({ ...serviceDefinition('openshell.v1.OpenShell'), ...serviceDefinition('sandgate.v1.Sandgate') }, 'OpenShell');

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyClient = Client & Record<string, any>;

/** Adds `authorization: Bearer <token>` to every call, as OpenShell's SDKs do. */
export function bearerInterceptor(token: string): Interceptor {
  return (options, nextCall): InterceptingCall =>
    new Intercepting(nextCall(options), {
      start(metadata: Metadata, listener, next) {
        metadata.set('authorization', `Bearer ${token}`);
        next(metadata, listener);
      },
    });
}

/**
 * `creds` undefined: the registered credentials of `address`; `{}`: none at all (anonymous, plaintext).
 * `options`: more channel options (`grpc.use_local_subchannel_pool: 1` for a connection of its own).
 */
export function openShellClient(address: string, creds?: GatewayCredentials, options: Record<string, string | number> = {}): AnyClient {
  const c = creds ?? credentialsFor(address);
  const channel = c.ca ? grpcCredentials.createSsl(c.ca, c.key ?? null, c.cert ?? null) : grpcCredentials.createInsecure();
  // Reconnect quickly after a replica or the balancer dropped us (grpc-js defaults back off to 2 min).
  return new OpenShellClient(address, channel, {
    'grpc.initial_reconnect_backoff_ms': 100,
    'grpc.max_reconnect_backoff_ms': 1000,
    ...(c.servername ? { 'grpc.ssl_target_name_override': c.servername, 'grpc.default_authority': c.servername } : {}),
    ...options,
    interceptors: c.token ? [bearerInterceptor(c.token)] : [],
  }) as unknown as AnyClient;
}

/** Calls a unary method and resolves with the response or rejects with the ServiceError. */
export function unaryCall<T>(client: AnyClient, method: string, request: object): Promise<T> {
  return new Promise((resolve, reject) => {
    client[method](request, (err: ServiceError | null, res: T) => (err ? reject(err) : resolve(res)));
  });
}
