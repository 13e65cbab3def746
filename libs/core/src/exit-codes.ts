// Exit status normalisation shared by the supervisor and the gateway.
export const EXIT_TIMEOUT = 124;

/** A process that died by signal N reports 128+N, as shells do. */
export function normaliseExit(code: number | null, signal: number | null): number {
  if (signal !== null && signal > 0) return 128 + signal;
  return code ?? 0;
}
