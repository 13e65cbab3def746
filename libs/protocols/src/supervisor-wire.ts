// The supervisor's side of the wire: codecs for the messages it sends and receives, from the
// static code supervisor-wire-gen.ts generates, on protobufjs/minimal. Importing this never
// loads protobufjs' reflection or the descriptor (load.ts), which is what the supervisor saves.
// The bytes and decoded objects are the reflective codecs' (codec.ts; tested on samples).
import { TO_OBJECT, type Codec } from './codec.ts';
import { openshell, sandgate, type StaticMessageType } from './supervisor-wire.generated.js';
import type { ExecFrame, GatewayMessage, SupervisorMessage, TcpFrame } from './sandgate-types.ts';

function staticCodec<T extends object>(type: StaticMessageType): Codec<T> {
  return {
    encode: (value) => {
      const bytes = type.encode(type.fromObject(value)).finish();
      return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    },
    decode: (bytes) => type.toObject(type.decode(bytes), TO_OBJECT) as T,
  };
}

/** openshell.sandbox.v1.SandboxPolicy, decoded into whatever part of it the caller declares. */
export function sandboxPolicyCodec<T extends object>(): Codec<T> {
  return staticCodec<T>(openshell.sandbox.v1.SandboxPolicy);
}

export interface WireMethod<Req, Res> {
  /** The HTTP/2 path, `/package.Service/Method`. */
  path: string;
  request: Codec<Req>;
  response: Codec<Res>;
}

const execFrame = staticCodec<ExecFrame>(sandgate.v1.ExecFrame);
const tcpFrame = staticCodec<TcpFrame>(sandgate.v1.TcpFrame);

/** sandgate.v1.SupervisorGateway, the service a supervisor dials (all three methods bidirectional). */
export const supervisorGateway = {
  Control: {
    path: '/sandgate.v1.SupervisorGateway/Control',
    request: staticCodec<SupervisorMessage>(sandgate.v1.SupervisorMessage),
    response: staticCodec<GatewayMessage>(sandgate.v1.GatewayMessage),
  } satisfies WireMethod<SupervisorMessage, GatewayMessage>,
  ExecChannel: { path: '/sandgate.v1.SupervisorGateway/ExecChannel', request: execFrame, response: execFrame } satisfies WireMethod<ExecFrame, ExecFrame>,
  TcpChannel: { path: '/sandgate.v1.SupervisorGateway/TcpChannel', request: tcpFrame, response: tcpFrame } satisfies WireMethod<TcpFrame, TcpFrame>,
};
