// Process-wide tracing for the long-running commands (gateway, worker, up): started from the
// standard OTEL_* variables before the gateway is imported; nothing is loaded when they ask for
// none (libs/telemetry/src/otel.ts).
import type { RunningTracing } from '@sandgate/telemetry/otel';

export async function startProcessTracing(defaultServiceName: string, instanceId: string, env: Record<string, string | undefined>): Promise<RunningTracing | null> {
  const { startTracing, tracingConfigured } = await import('@sandgate/telemetry/otel');
  if (!tracingConfigured(env)) return null;
  return startTracing({ defaultServiceName, instanceId, env });
}
