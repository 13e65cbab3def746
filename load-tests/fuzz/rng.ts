// Per-input randomness. Every input draws from its own PRNG, derived from the run's seed, the
// target and the input's index, so a run is reproducible (`--seed`) whatever order the bounded
// pool of workers finishes inputs in.
import { seeded } from '../chaos/rng.ts';

export type Rng = () => number;

export function inputRng(seed: number, target: string, index: number): Rng {
  let h = (seed ^ 0x9e3779b9) >>> 0;
  for (const ch of `${target}:${index}`) h = Math.imul(h ^ ch.charCodeAt(0), 0x01000193) >>> 0;
  return seeded(h);
}

export function int(rng: Rng, lo: number, hi: number): number {
  return lo + Math.floor(rng() * (hi - lo + 1));
}

export function pick<T>(rng: Rng, items: readonly T[]): T {
  return items[Math.floor(rng() * items.length)]!;
}

export function chance(rng: Rng, p: number): boolean {
  return rng() < p;
}

export function bytes(rng: Rng, n: number): Buffer {
  const out = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) out[i] = Math.floor(rng() * 256);
  return out;
}

/** A length skewed towards small values (most hostile inputs are short), up to `max`. */
export function skewedLength(rng: Rng, max: number): number {
  return Math.min(max, Math.floor(Math.pow(rng(), 3) * max));
}

/** A printable-ish string of length n (ASCII, sometimes control or high bytes). */
export function junkString(rng: Rng, n: number): string {
  let s = '';
  for (let i = 0; i < n; i++) {
    const r = rng();
    s += String.fromCharCode(r < 0.9 ? 0x21 + Math.floor(rng() * 94) : r < 0.95 ? Math.floor(rng() * 32) : 0x80 + Math.floor(rng() * 0x780));
  }
  return s;
}
