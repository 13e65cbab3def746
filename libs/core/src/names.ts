// Generated sandbox names: two words joined by '-', at most 19 characters (routable names).
import { MAX_NAME_LEN } from './limits.ts';

const ADJECTIVES = ['amber', 'brave', 'calm', 'deft', 'eager', 'fair', 'glad', 'hazy', 'keen', 'lucid', 'mild', 'noble', 'proud', 'quiet', 'rapid', 'sly', 'tidy', 'vivid', 'warm', 'zesty'];
const NOUNS = ['badger', 'crane', 'dingo', 'egret', 'ferret', 'gecko', 'heron', 'ibis', 'jackal', 'koala', 'lemur', 'marten', 'newt', 'otter', 'panda', 'quail', 'raven', 'stoat', 'tapir', 'wombat'];

/** `random` returns an integer in [0, n); injected so the function stays pure and testable. */
export function generateName(random: (n: number) => number): string {
  const name = `${ADJECTIVES[random(ADJECTIVES.length)]}-${NOUNS[random(NOUNS.length)]}-${random(1000)}`;
  return name.slice(0, MAX_NAME_LEN).replace(/-+$/, '');
}
