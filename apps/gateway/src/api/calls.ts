// Small rules for gRPC calls (and peer-link channels, which behave like them) shared by every
// service: how a call is failed, how its first message is taken, and how to act once it is gone.
import { GatewayError, Code } from '@sandgate/core';

/** Fails a call with `err` (a GatewayError keeps its code and message), unless it already ended. */
export function endWithError(call: { emit(event: 'error', err: unknown): boolean; writableEnded?: boolean; destroyed?: boolean }, err: unknown): void {
  if (call.writableEnded || call.destroyed) return;
  const e = err instanceof GatewayError ? { code: err.code, details: err.message, message: err.message } : err;
  call.emit('error', e);
}

/**
 * Calls `fn` once, on whichever of the events comes first. The listeners stay attached: a later
 * 'error' must still find a listener, or it would be thrown as unhandled.
 */
export function onceAny(emitter: NodeJS.EventEmitter, events: string[], fn: () => void): void {
  let fired = false;
  const handler = () => {
    if (fired) return;
    fired = true;
    fn();
  };
  for (const e of events) emitter.on(e, handler);
}

/** Calls `fn` once the call is gone, whichever way it goes (ended, failed or cancelled). */
export function onceGone(call: NodeJS.EventEmitter, fn: () => void): void {
  onceAny(call, ['close', 'finish', 'error', 'cancelled'], fn);
}

/**
 * Hands the first message of a client stream to `fn`, with the stream paused so that later
 * messages wait until the caller pipes it somewhere. A stream that ends before sending anything
 * is failed with INVALID_ARGUMENT `emptyMessage`.
 */
export function takeFirstMessage<T>(
  call: NodeJS.EventEmitter & { pause(): unknown; emit(event: 'error', err: unknown): boolean },
  emptyMessage: string,
  fn: (first: T) => void,
): void {
  const onEarlyEnd = () => endWithError(call, new GatewayError(Code.INVALID_ARGUMENT, emptyMessage));
  call.on('end', onEarlyEnd);
  call.once('data', (first: T) => {
    call.off('end', onEarlyEnd);
    call.pause();
    fn(first);
  });
}
