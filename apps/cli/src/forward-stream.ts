// One local byte stream over one ForwardTcp call, with back-pressure both ways: what
// `sandgate ssh-proxy` does with its stdin/stdout and `sandgate forward` with each accepted socket.
import type { ClientDuplexStream, ServiceError } from '@grpc/grpc-js';
import type { TcpForwardFrame, TcpForwardInit } from '@sandgate/protocols';

export interface ForwardStreamIo {
  /** What goes to the sandbox; its end is our half-close. */
  input: NodeJS.ReadableStream & { pause(): unknown; resume(): unknown };
  /** Where the sandbox's bytes go. */
  output: NodeJS.WritableStream;
  /** End `output` when the gateway closes the connection (a socket), or only flush it (stdout). */
  endOutput: boolean;
}

/**
 * Sends `init`, then relays until the call is over. Resolves with null when the gateway closed
 * the connection normally (everything handed to `output`), or with the call's error.
 */
export function pipeOverForward(call: ClientDuplexStream<TcpForwardFrame, TcpForwardFrame>, init: TcpForwardInit, io: ForwardStreamIo): Promise<ServiceError | null> {
  return new Promise((resolve) => {
    let settled = false;
    let inputOpen = true;
    const finish = (err: ServiceError | null) => {
      if (settled) return;
      settled = true;
      io.input.pause();
      resolve(err);
    };

    call.write({ init });

    // Local → sandbox. A full call pauses the input (and so whoever writes to it).
    io.input.on('data', (chunk: Buffer | string) => {
      if (!inputOpen) return;
      const data = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      if (!call.write({ data })) {
        io.input.pause();
        call.once('drain', () => {
          if (!settled) io.input.resume();
        });
      }
    });
    // The local side is done sending: half-close; the gateway closes once the sandbox side is done.
    const endInput = () => {
      if (!inputOpen) return;
      inputOpen = false;
      call.end();
    };
    io.input.once('end', endInput);
    io.input.once('error', endInput);

    // Sandbox → local. A full output pauses the call (HTTP/2 flow control does the rest).
    let paused = false;
    call.on('data', (frame: TcpForwardFrame) => {
      if (!frame.data || frame.data.length === 0) return;
      if (!io.output.write(frame.data) && !paused) {
        paused = true;
        call.pause();
        io.output.once('drain', () => {
          paused = false;
          call.resume();
        });
      }
    });
    call.on('error', (err: ServiceError) => finish(err));
    // The gateway ended the call with OK: flush (or end) the output, then go.
    call.on('end', () => {
      if (io.endOutput) io.output.end(() => finish(null));
      else io.output.write('', () => finish(null));
    });
    io.input.resume();
  });
}
