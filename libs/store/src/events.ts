// Reading the per-sandbox streams written by the record scripts (snapshots) and by the gateway
// (log lines). Blocking reads need a connection of their own: callers pass a duplicate.
import type { Redis } from 'ioredis';
import { codec, type Sandbox } from '@sandgate/protocols';
import { keys } from './keys.ts';

const sandboxCodec = codec<Sandbox>('openshell.v1.Sandbox');

/** Log lines kept per sandbox (the tail GetSandboxLogs and watchers replay). */
export const LOG_TAIL_MAX = 2000;

export type SandboxEvent = { id: string; kind: 'snapshot'; rv: number; sandbox: Sandbox } | { id: string; kind: 'deleted' };

export interface LogLine {
  timestamp_ms: number;
  level: string;
  target: string;
  message: string;
  source: string;
}

type StreamEntries = [string, Buffer[]][];

function fieldsOf(raw: Buffer[]): Map<string, Buffer> {
  const m = new Map<string, Buffer>();
  for (let i = 0; i + 1 < raw.length; i += 2) m.set(raw[i]!.toString(), raw[i + 1]!);
  return m;
}

/** One entry of `sg:events:{id}`, as read with a Buffer reply (snapshots are binary). */
export function toEvent(sandboxId: string, [id, raw]: [string, Buffer[]]): SandboxEvent {
  const f = fieldsOf(raw);
  if (f.has('deleted')) return { id, kind: 'deleted' };
  const rv = Number(f.get('rv')?.toString() ?? 0);
  const sandbox = sandboxCodec.decode(f.get('pb')!);
  sandbox.metadata = { ...sandbox.metadata!, id: sandboxId, resource_version: rv };
  return { id, kind: 'snapshot', rv, sandbox };
}

/** The id of the newest event, or '0-0': read the snapshot after this, then follow from it. */
export async function lastEventId(redis: Redis, sandboxId: string): Promise<string> {
  const last = (await redis.xrevrange(keys.events(sandboxId), '+', '-', 'COUNT', 1)) as [string, string[]][];
  return last[0]?.[0] ?? '0-0';
}

/** Blocks up to `blockMs` for events after `afterId`. Use a dedicated connection. */
export async function readEvents(conn: Redis, sandboxId: string, afterId: string, blockMs: number): Promise<SandboxEvent[]> {
  const res = (await conn.xreadBuffer('COUNT', 100, 'BLOCK', blockMs, 'STREAMS', keys.events(sandboxId), afterId)) as
    | [Buffer, StreamEntries][]
    | null;
  if (!res) return [];
  return res[0]![1].map(([id, raw]) => toEvent(sandboxId, [id.toString(), raw]));
}

export class SandboxLogStore {
  private readonly redis: Redis;
  constructor(redis: Redis) {
    this.redis = redis;
  }

  async append(sandboxId: string, line: LogLine): Promise<void> {
    await this.redis.xadd(
      keys.logs(sandboxId),
      'MAXLEN',
      '~',
      LOG_TAIL_MAX,
      '*',
      'ts',
      line.timestamp_ms,
      'level',
      line.level,
      'target',
      line.target,
      'source',
      line.source,
      'msg',
      line.message,
    );
  }

  /** The last `n` lines, oldest first, and how many the tail holds. */
  async tail(sandboxId: string, n: number): Promise<{ lines: (LogLine & { id: string })[]; total: number }> {
    const key = keys.logs(sandboxId);
    const [entries, total] = await Promise.all([
      this.redis.xrevrange(key, '+', '-', 'COUNT', n) as Promise<[string, string[]][]>,
      this.redis.xlen(key),
    ]);
    return { lines: entries.reverse().map(toLogLine), total };
  }

  /** Blocks for lines after `afterId` on a dedicated connection. */
  static async follow(conn: Redis, sandboxId: string, afterId: string, blockMs: number): Promise<(LogLine & { id: string })[]> {
    const res = (await conn.xread('COUNT', 500, 'BLOCK', blockMs, 'STREAMS', keys.logs(sandboxId), afterId)) as
      | [string, [string, string[]][]][]
      | null;
    return res ? res[0]![1].map(toLogLine) : [];
  }
}

/** One entry of `sg:logs:{id}`, as read with a string or a Buffer reply. */
export function toLogLine([id, raw]: [string, (string | Buffer)[]]): LogLine & { id: string } {
  const f = new Map<string, string>();
  for (let i = 0; i + 1 < raw.length; i += 2) f.set(raw[i]!.toString(), raw[i + 1]!.toString());
  return {
    id,
    timestamp_ms: Number(f.get('ts') ?? 0),
    level: f.get('level') ?? 'INFO',
    target: f.get('target') ?? '',
    source: f.get('source') ?? 'gateway',
    message: f.get('msg') ?? '',
  };
}
