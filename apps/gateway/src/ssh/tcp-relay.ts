// Moving a TCP channel's bytes between hops, with back-pressure (libs/relay's pump) and one set of
// end rules on every hop:
//   * `data` frames carry bytes; `eof` is a half-close of the sender's direction;
//   * a stream ending (or erroring) means the connection is closed, in both directions; towards
//     the client, a clean close only after the target's `eof` (or a file transfer's `error`), and
//     UNAVAILABLE when the supervisor's side ended without saying so (its path broke).
// ForwardTcp (client ↔ entry replica) maps onto that: the client's half-close becomes `eof`, the
// target's `eof` ends the client's call (the server closes first, as OpenShell clients expect).
import type { Duplex } from 'node:stream';
import type { TcpForwardFrame, TcpFrame } from '@sandgate/protocols';
import { GatewayError, Code } from '@sandgate/core';
import { byteSlices, pump } from '@sandgate/relay';
import type { ServiceError } from '@grpc/grpc-js';
import type { TcpPath } from '../relay/exec-router.ts';
import { endWithError } from '../api/calls.ts';
import { relayFailure } from '../api/grpc-errors.ts';

/** The server side of a TCP channel we need (a ForwardTcp call, or a peer link at the owner). */
type ServerCall = Duplex & { cancelled: boolean; on(event: string, fn: (...args: unknown[]) => void): unknown };

function pathError(frame: TcpFrame): GatewayError {
  return new GatewayError((frame.error?.code ?? Code.UNAVAILABLE) as Code, frame.error?.message || 'relay channel failed');
}

const brokenError = (err: unknown): GatewayError => relayFailure(err, 'relay channel dropped');

/** ForwardTcp at the entry replica: the client's call ↔ the path to the supervisor. */
export function relayForward(client: ServerCall, path: TcpPath, clientError: (err: unknown) => Partial<ServiceError>, onDone: () => void): void {
  const up = path.stream;
  let done = false;
  let eofSent = false;
  const sendEof = () => {
    if (eofSent || done || up.writableEnded) return;
    eofSent = true;
    up.write({ eof: {} });
  };
  const finish = (err?: GatewayError) => {
    if (done) return;
    done = true;
    stopUp();
    stopDown();
    // The connection is over: close the upstream hop once the client has been handed everything.
    const closeUpstream = () => {
      if (!up.writableEnded) up.end();
    };
    if (err) {
      endWithError(client, clientError(err));
      closeUpstream();
    } else if (client.writableEnded) {
      closeUpstream();
    } else {
      client.once('finish', closeUpstream);
      client.once('close', closeUpstream);
      client.end();
    }
    onDone();
  };
  const stopUp = pump(client, up, (frame: TcpForwardFrame): TcpFrame[] | null => {
    if (eofSent) return null;
    if (frame.data !== undefined) return frame.data.length > 0 ? byteSlices(frame.data).map((data) => ({ data })) : null;
    // Anything but data after init ends the client → target direction (as upstream does).
    sendEof();
    return null;
  });
  client.on('end', sendEof);
  const stopDown = pump(up, client, (frame: TcpFrame): TcpForwardFrame | null => {
    if (frame.data) return frame.data.length > 0 ? { data: frame.data } : null;
    if (frame.eof) finish();
    else if (frame.error) finish(pathError(frame));
    return null;
  });
  // A connection the target closed sends `eof` first (finish above). The hop ending without one
  // is the path breaking under it: a supervisor whose connection to its replica dropped ends its
  // channel call, it does not close the connection. Said as UNAVAILABLE, never as a clean close:
  // an SSH client that sees a clean close exits 255 and, at LogLevel ERROR, says nothing at all.
  up.on('end', () => finish(new GatewayError(Code.UNAVAILABLE, 'relay channel ended before the connection was closed')));
  up.on('error', (err: unknown) => finish(brokenError(err)));
  up.on('cancelled', () => finish(brokenError(undefined)));
  const early = path.failure();
  if (early) finish(brokenError(early));
  client.on('cancelled', () => {
    if (done) return;
    done = true;
    stopUp();
    stopDown();
    path.abort('client closed the forward');
    onDone();
  });
}

/** At the owner replica: the entry replica's peer link ↔ the supervisor's TcpChannel. */
export function spliceTcp(call: ServerCall, path: TcpPath): void {
  const up = path.stream;
  // `eof` (the connection closed) or `error` (a file transfer failed): the channel said how it ends.
  let endSaid = false;
  pump(up, call, (f: TcpFrame) => {
    if (f.eof || f.error) endSaid = true;
    return f.data || f.eof || f.error || f.file_info ? f : null;
  });
  pump(call, up, (f: TcpFrame) => (f.data || f.eof ? f : null));
  up.on('end', () => {
    // Without `eof` or `error` first the supervisor's channel broke (its connection here dropped):
    // the entry replica hears UNAVAILABLE, not a closed connection (see relayForward).
    if (!endSaid) return endWithError(call, new GatewayError(Code.UNAVAILABLE, 'supervisor tcp channel ended before the connection was closed'));
    // Close the supervisor's side only after the entry replica has been handed everything.
    call.once('finish', () => {
      if (!up.writableEnded) up.end();
    });
    if (!call.writableEnded) call.end();
  });
  // The entry replica ending its side means the connection is closed.
  call.on('end', () => {
    if (!up.writableEnded) up.end();
  });
  const broken = () => endWithError(call, new GatewayError(Code.UNAVAILABLE, 'supervisor tcp channel dropped'));
  up.on('error', broken);
  up.on('cancelled', broken);
  call.on('cancelled', () => path.abort('peer relay cancelled'));
}
