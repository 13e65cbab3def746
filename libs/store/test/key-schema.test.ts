// ARCHITECTURE.md's "Redis key schema" table and libs/store/src/keys.ts name the same keys.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ClusterCounter, clusterKeys, jobQueue, keys, type ClusterCounterName } from '@sandgate/store';

const ARCHITECTURE = new URL('../../../ARCHITECTURE.md', import.meta.url);
/** `{id}`, `{ws}`, `{sha256(token)}`…: a placeholder, whatever it is called. */
const placeholder = (pattern: string) => pattern.replace(/\{[^}]*\}/g, '{}');

/** The first column of every row of the table under "## Redis key schema", with the row's text. */
function documentedKeys(): Map<string, string> {
  const doc = readFileSync(ARCHITECTURE, 'utf8');
  const section = doc.split(/^## /m).find((s) => s.startsWith('Redis key schema\n'));
  if (!section) throw new Error('ARCHITECTURE.md has no "## Redis key schema" section');
  const rows = new Map<string, string>();
  for (const line of section.split('\n')) {
    const m = /^\| `([^`]+)` \|/.exec(line);
    if (m) rows.set(placeholder(m[1]!), line);
  }
  return rows;
}

/** Every key keys.ts can name, with `{}` for each argument. */
function codeKeys(): string[] {
  const named = Object.values(keys as Record<string, (...args: string[]) => string>).map((fn) => fn(...Array<string>(fn.length).fill('{}')));
  return [...named, `${jobQueue.prefix}:${jobQueue.name}:*`];
}

describe('Redis key schema', () => {
  it('documents every key keys.ts names', () => {
    const documented = documentedKeys();
    expect(codeKeys().filter((k) => !documented.has(k))).toEqual([]);
  });

  it('names in keys.ts every key it documents', () => {
    const named = new Set(codeKeys());
    expect([...documentedKeys().keys()].filter((k) => !named.has(k))).toEqual([]);
  });

  it('names the same keys in the Redis Cluster layout, each with its hash tag', () => {
    const names = Object.keys(keys) as (keyof typeof keys)[];
    expect(Object.keys(clusterKeys).sort()).toEqual([...names].sort());
    for (const name of names) {
      const args = Array<string>(keys[name].length).fill('x');
      const plain = (keys[name] as (...a: string[]) => string)(...args);
      const tagged = (clusterKeys[name] as (...a: string[]) => string)(...args);
      // Exactly one hash tag, and without it the key is the single-Redis one.
      expect(tagged.match(/\{/g), name).toHaveLength(1);
      // The tag either wraps the key's own argument or follows the whole key.
      expect([tagged.replace(/\{[a-z]:([^}]*)\}/, '$1'), tagged.replace(/:\{[^}]*\}$/, '')], name).toContain(plain);
    }
  });

  it('documents every cluster counter', () => {
    const row = documentedKeys().get(keys.counter('{}' as ClusterCounterName))!;
    for (const name of Object.values(ClusterCounter)) expect(row, name).toContain(`\`${name}\``);
  });
});
