// What every codec shares, whether it compiles its functions at run time (load.ts, the gateway's
// and the CLI's) or had them generated (supervisor-wire.ts, the supervisor's): one shape of a
// decoded message, so both decode the same bytes into the same object.
import type { IConversionOptions } from 'protobufjs';

/**
 * How decoded messages look in TypeScript: snake_case keys as in the .proto, int64 as JS numbers
 * (all our int64s are millisecond timestamps or counters far below 2^53), enums as numbers,
 * bytes as Buffers, absent scalars left undefined (so explicit presence stays visible), and
 * repeated/map fields always present.
 */
export const TO_OBJECT: IConversionOptions = {
  longs: Number,
  enums: Number,
  bytes: Buffer,
  defaults: false,
  arrays: true,
  objects: true,
  oneofs: false,
};

/** A codec for one message type. */
export interface Codec<T> {
  encode(value: T): Buffer;
  decode(bytes: Uint8Array): T;
}
