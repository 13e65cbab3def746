// Signal name <-> number conversions (child_process reports names, node-pty and the protocol numbers).
import os from 'node:os';

const BY_NUMBER = new Map<number, NodeJS.Signals>();
for (const [name, num] of Object.entries(os.constants.signals)) {
  if (!BY_NUMBER.has(num)) BY_NUMBER.set(num, name as NodeJS.Signals);
}

export function signalNumber(name: NodeJS.Signals | string | null | undefined): number | null {
  if (!name) return null;
  return (os.constants.signals as Record<string, number>)[name] ?? null;
}

export function signalName(num: number): NodeJS.Signals | undefined {
  return BY_NUMBER.get(num);
}

/** A signal number a client may send to an exec: any known signal, or a real-time one. */
export function isValidSignal(num: unknown): num is number {
  return typeof num === 'number' && Number.isInteger(num) && num >= 1 && num <= 64;
}
