// A replica running with debug faults says so everywhere an operator looks: /readyz lists them
// (replica.ts hands them to the HTTP surface), /metrics has one sandgate_debug_break series per
// fault, and the log repeats them at ERROR every minute, which no log level hides.
import { DEBUG_BREAKS, DEBUG_ENV, type DebugBreak } from '@sandgate/core';
import type { Logger, Metrics } from '@sandgate/telemetry';

export const DEBUG_BREAK_REMINDER_MS = 60_000;

/** Starts announcing the faults; returns the function that stops the reminder. */
export function announceDebugBreaks(breaks: ReadonlySet<DebugBreak>, log: Logger, metrics: Metrics, intervalMs = DEBUG_BREAK_REMINDER_MS): () => void {
  if (breaks.size === 0) return () => undefined;
  for (const name of breaks) metrics.gauge('sandgate_debug_break', () => 1, { name });
  const say = () =>
    log.error(`UNSAFE: debug faults are on (${DEBUG_ENV.unsafe}=1); this replica is for negative test runs only`, {
      debugBreaks: [...breaks],
      removed: [...breaks].map((b) => DEBUG_BREAKS[b].removes),
    });
  say();
  const timer = setInterval(say, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
