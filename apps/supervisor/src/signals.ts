// Signal names to numbers (child_process reports names, node-pty and the protocol numbers), and
// which numbers a client may send.
import os from 'node:os';

export function signalNumber(name: NodeJS.Signals | string | null | undefined): number | null {
  if (!name) return null;
  return (os.constants.signals as Record<string, number>)[name] ?? null;
}

/** A signal number a client may send to an exec: any known signal, or a real-time one. */
export function isValidSignal(num: unknown): num is number {
  return typeof num === 'number' && Number.isInteger(num) && num >= 1 && num <= 64;
}
