// grpc-js client for sandgate.v1.SupervisorGateway. One client = one channel = one connection, so a
// fresh client per connection attempt lets a reconnect land on another replica behind the load
// balancer.
import * as grpc from '@grpc/grpc-js';
import { MetadataKey, serviceDefinition } from '@sandgate/protocols';
import type { ExecFrame, GatewayMessage, SupervisorMessage } from '@sandgate/protocols';

export interface GatewayClient extends grpc.Client {
  Control(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<SupervisorMessage, GatewayMessage>;
  ExecChannel(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<ExecFrame, ExecFrame>;
}

type GatewayClientConstructor = new (
  address: string,
  credentials: grpc.ChannelCredentials,
  options?: grpc.ClientOptions,
) => GatewayClient;

let ctor: GatewayClientConstructor | undefined;

function clientConstructor(): GatewayClientConstructor {
  ctor ??= grpc.makeGenericClientConstructor(
    serviceDefinition('sandgate.v1.SupervisorGateway'),
    'SupervisorGateway',
  ) as unknown as GatewayClientConstructor;
  return ctor;
}

export const CHANNEL_OPTIONS: grpc.ClientOptions = {
  'grpc.keepalive_time_ms': 10_000,
  'grpc.keepalive_timeout_ms': 5_000,
  'grpc.keepalive_permit_without_calls': 1,
  // grpc-js shares connections between channels to the same address through a global subchannel
  // pool; a reconnect must open a new TCP connection (possibly to another replica behind the LB).
  'grpc.use_local_subchannel_pool': 1,
  // The supervisor does its own reconnecting; grpc-level retries would only hide failures.
  'grpc.enable_retries': 0,
};

/** The gateway serves TLS: verify it against `ca`, for `serverName` whatever address is dialled. */
export interface GatewayTls {
  ca: Buffer;
  serverName: string;
}

export function createGatewayClient(endpoint: string, tls?: GatewayTls): GatewayClient {
  const Ctor = clientConstructor();
  if (!tls) return new Ctor(endpoint, grpc.credentials.createInsecure(), CHANNEL_OPTIONS);
  // The name is checked against the certificate's SANs, so a docker supervisor dialling the bridge
  // IP still verifies the certificate issued for `localhost` (or the load balancer's name).
  return new Ctor(endpoint, grpc.credentials.createSsl(tls.ca), { ...CHANNEL_OPTIONS, 'grpc.ssl_target_name_override': tls.serverName });
}

export function callMetadata(sandboxId: string, credential: string): grpc.Metadata {
  const md = new grpc.Metadata();
  md.set(MetadataKey.credential, credential);
  md.set(MetadataKey.sandboxId, sandboxId);
  return md;
}
