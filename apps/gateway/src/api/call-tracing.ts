// The SERVER span of one public gRPC call (OTel RPC semantic conventions): parented on the
// caller's `traceparent` metadata, active while the call is handled (so exec paths, peer links,
// jobs and Redis commands below it join the trace), ended with the call's status code.
import type { Metadata, sendUnaryData } from '@grpc/grpc-js';
import { extractContext, failSpan, otelContext, SpanKind, startSpan, TraceAttr, type TraceCarrier } from '@sandgate/telemetry';

interface TracedCall {
  metadata: Metadata;
  emit(event: string, ...args: unknown[]): boolean;
  on(event: string, fn: (...args: unknown[]) => void): unknown;
}

/** The W3C carrier in a call's metadata. */
export function metadataCarrier(metadata: Metadata): TraceCarrier {
  const carrier: TraceCarrier = {};
  const parent = metadata.get('traceparent')[0];
  if (typeof parent === 'string') carrier.traceparent = parent;
  const state = metadata.get('tracestate')[0];
  if (typeof state === 'string') carrier.tracestate = state;
  return carrier;
}

const CANCELLED = 1;
const UNKNOWN = 2;

export function traceCall(
  fullMethod: string,
  call: TracedCall,
  callback: sendUnaryData<unknown> | undefined,
  respondsByCallback: boolean,
  run: (call: TracedCall, callback?: sendUnaryData<unknown>) => void,
): void {
  const slash = fullMethod.lastIndexOf('/');
  const { span, ctx } = startSpan(fullMethod, {
    kind: SpanKind.SERVER,
    parent: extractContext(metadataCarrier(call.metadata)),
    attributes: {
      [TraceAttr.rpcSystem]: 'grpc',
      [TraceAttr.rpcService]: fullMethod.slice(0, slash),
      [TraceAttr.rpcMethod]: fullMethod.slice(slash + 1),
    },
  });
  let ended = false;
  const end = (code: number, err?: unknown) => {
    if (ended) return;
    ended = true;
    span.setAttribute(TraceAttr.rpcStatus, code);
    if (code !== 0) failSpan(span, err ?? { details: code === CANCELLED ? 'cancelled' : `status ${code}` });
    span.end();
  };
  const codeOf = (err: unknown) => {
    const code = (err as { code?: unknown } | null)?.code;
    return typeof code === 'number' ? code : UNKNOWN;
  };
  call.on('cancelled', () => end(CANCELLED));
  let wrapped = callback;
  if (respondsByCallback && callback) {
    wrapped = ((err: unknown, ...rest: unknown[]) => {
      end(err ? codeOf(err) : 0, err);
      (callback as (...a: unknown[]) => void)(err, ...rest);
    }) as sendUnaryData<unknown>;
  } else {
    // Streaming responses end with a status: an 'error' emitted by the handler, or OK at 'finish'.
    // (A listener, not a wrapper: nothing is added to the call's per-message path.)
    call.on('error', (err: unknown) => end(codeOf(err), err));
    call.on('finish', () => end(0));
    call.on('close', () => end(0));
  }
  otelContext.with(ctx, () => run(call, wrapped));
}
