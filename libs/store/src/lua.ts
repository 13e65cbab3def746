// Atomic Lua scripts, one file each under libs/store/lua, named `<name>-<nkeys>.lua` (BullMQ's
// convention; `n` for a script over a variable number of keys). Each file's header states its
// KEYS, ARGV and return values. Run by SHA with a fallback to EVAL when Redis has not seen them
// yet (after a restart, for example, or on a cluster node that has not run it).
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Cluster, Redis } from 'ioredis';

const LUA_DIR = fileURLToPath(new URL('../lua/', import.meta.url));
const SCRIPT_FILE = /^(.+)-(\d+|n)\.lua$/;

export class LuaScript {
  readonly name: string;
  readonly sha: string;
  readonly source: string;
  /** -1: a script over a variable number of keys (e.g. one pair per session). */
  readonly numberOfKeys: number;
  constructor(name: string, source: string, numberOfKeys: number) {
    this.name = name;
    this.source = source;
    this.numberOfKeys = numberOfKeys;
    this.sha = createHash('sha1').update(source).digest('hex');
  }

  async run(redis: Redis | Cluster, keys: string[], args: (string | number | Buffer)[]): Promise<unknown> {
    if (this.numberOfKeys >= 0 && keys.length !== this.numberOfKeys) {
      throw new Error(`script ${this.name} expects ${this.numberOfKeys} keys, got ${keys.length}`);
    }
    try {
      return await redis.evalsha(this.sha, keys.length, ...keys, ...args);
    } catch (err) {
      if (err instanceof Error && err.message.startsWith('NOSCRIPT')) {
        return await redis.eval(this.source, keys.length, ...keys, ...args);
      }
      throw err;
    }
  }
}

function loadScripts(): Map<string, LuaScript> {
  const scripts = new Map<string, LuaScript>();
  for (const file of readdirSync(LUA_DIR)) {
    const m = SCRIPT_FILE.exec(file);
    if (!m) continue;
    const numberOfKeys = m[2] === 'n' ? -1 : Number(m[2]);
    scripts.set(m[1]!, new LuaScript(m[1]!, readFileSync(LUA_DIR + file, 'utf8'), numberOfKeys));
  }
  return scripts;
}

/** Every script, read once when the store is first imported. */
const SCRIPTS = loadScripts();

/** The script `lua/<name>-<nkeys>.lua`; a missing file is a packaging bug, so it throws at import. */
export function luaScript(name: string): LuaScript {
  const script = SCRIPTS.get(name);
  if (!script) throw new Error(`no Lua script '${name}' in ${LUA_DIR}`);
  return script;
}
