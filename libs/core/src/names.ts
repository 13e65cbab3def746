// Generated sandbox names in upstream's two-word form (openshell-v1-more.md §13): one adjective
// and one noun joined by '-', no number, cut to 19 bytes with trailing hyphens trimmed (the word
// lists are short enough that the cut never applies; it stays as upstream's rule). Clients only
// check the shape; the lists are sandgate's own (name-words.ts).
import { MAX_NAME_LEN } from './limits.ts';
import { ADJECTIVES, NOUNS } from './name-words.ts';

/** `random` returns an integer in [0, n); injected so the function stays pure and testable. */
export function generateName(random: (n: number) => number): string {
  const name = `${ADJECTIVES[random(ADJECTIVES.length)]}-${NOUNS[random(NOUNS.length)]}`;
  return name.slice(0, MAX_NAME_LEN).replace(/-+$/, '');
}

/** How many distinct names generateName can return (for the collision estimate in ARCHITECTURE.md). */
export const GENERATED_NAME_COUNT = ADJECTIVES.length * NOUNS.length;
