// The per-sandbox streams: snapshots (appended by the record scripts) and log lines (appended by
// the gateway). Watchers take a start (positions, then snapshot and log tail) and then follow
// from those positions, blocking, on a connection of their own.
import { duplicateClient, type RedisClient } from './client.ts';
import { codec, type Sandbox } from '@sandgate/protocols';
import { keysFor, type KeySchema } from './keys.ts';
import { SandboxStore, type StoredSandbox } from './sandbox-store.ts';

const sandboxCodec = codec<Sandbox>('openshell.v1.Sandbox');

/** Log lines kept per sandbox (the tail GetSandboxLogs and watchers replay). */
const LOG_TAIL_MAX = 2000;
/** Entries per blocking read: bounds the work (and memory) of one follow step. */
const FOLLOW_BATCH = 200;
/** The id before every stream entry. */
const STREAM_START = '0-0';

export type SandboxEvent = { id: string; kind: 'snapshot'; rv: number; sandbox: Sandbox } | { id: string; kind: 'deleted' };

export interface LogLine {
  timestamp_ms: number;
  level: string;
  target: string;
  message: string;
  source: string;
}

/** A log line with its stream entry id (the position to follow from). */
export type LogEntry = LogLine & { id: string };

/** What a follower reads: a change of the sandbox, or a log line. */
export type FollowedEntry = { kind: 'event'; event: SandboxEvent } | { kind: 'log'; line: LogEntry };

/** Where to follow each stream from (stream entry ids; a follower reads what comes after). */
export interface StreamPositions {
  events: string;
  logs: string;
}

export interface WatchStart {
  record: StoredSandbox;
  /** The last lines of the log, oldest first. */
  logTail: LogEntry[];
  /** Positions taken before the snapshot: following from them misses nothing. */
  from: StreamPositions;
}

type RawEntry = [id: string | Buffer, fields: (string | Buffer)[]];

function fieldsOf(raw: (string | Buffer)[]): Map<string, string | Buffer> {
  const m = new Map<string, string | Buffer>();
  for (let i = 0; i + 1 < raw.length; i += 2) m.set(raw[i]!.toString(), raw[i + 1]!);
  return m;
}

/** One entry of `sg:events:{id}`, read with a Buffer reply (snapshots are binary). */
function toEvent(sandboxId: string, [entryId, raw]: RawEntry): SandboxEvent {
  const id = entryId.toString();
  const f = fieldsOf(raw);
  if (f.has('deleted')) return { id, kind: 'deleted' };
  const rv = Number(f.get('rv')?.toString() ?? 0);
  const sandbox = sandboxCodec.decode(f.get('pb') as Buffer);
  sandbox.metadata = { ...sandbox.metadata!, id: sandboxId, resource_version: rv };
  return { id, kind: 'snapshot', rv, sandbox };
}

/** One entry of `sg:logs:{id}`, read with a string or a Buffer reply. */
function toLogEntry([entryId, raw]: RawEntry): LogEntry {
  const f = fieldsOf(raw);
  const text = (name: string) => f.get(name)?.toString();
  return {
    id: entryId.toString(),
    timestamp_ms: Number(text('ts') ?? 0),
    level: text('level') ?? 'INFO',
    target: text('target') ?? '',
    source: text('source') ?? 'gateway',
    message: text('msg') ?? '',
  };
}

/**
 * The stream entry id just before `id`: following from it reads `id` itself and what comes after
 * (XREAD reads after the id it is given). Lets a watcher's position point before an entry.
 */
export function streamIdBefore(id: string): string {
  const [ms, seq] = id.split('-').map((x) => BigInt(x)) as [bigint, bigint];
  if (seq > 0n) return `${ms}-${seq - 1n}`;
  if (ms > 0n) return `${ms - 1n}-18446744073709551615`;
  return STREAM_START;
}

/** The id of the newest entry of a stream, or the start when it is empty. */
async function lastEntryId(redis: RedisClient, key: string): Promise<string> {
  const last = (await redis.xrevrange(key, '+', '-', 'COUNT', 1)) as [string, string[]][];
  return last[0]?.[0] ?? STREAM_START;
}

export class SandboxLogStore {
  private readonly redis: RedisClient;
  private readonly keys: KeySchema;
  constructor(redis: RedisClient) {
    this.redis = redis;
    this.keys = keysFor(redis);
  }

  async append(sandboxId: string, line: LogLine): Promise<void> {
    await this.redis.xadd(
      this.keys.logs(sandboxId),
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
  async tail(sandboxId: string, n: number): Promise<{ lines: LogEntry[]; total: number }> {
    const key = this.keys.logs(sandboxId);
    const [entries, total] = await Promise.all([
      // COUNT 0 is answered with a null reply, not an empty list.
      n > 0 ? (this.redis.xrevrange(key, '+', '-', 'COUNT', n) as Promise<[string, string[]][]>) : Promise.resolve([]),
      this.redis.xlen(key),
    ]);
    return { lines: entries.reverse().map(toLogEntry), total };
  }
}

/** Reads a sandbox's snapshot and follows its event (and log) streams. */
export class SandboxFeed {
  private readonly redis: RedisClient;
  private readonly keys: KeySchema;
  private readonly records: SandboxStore;
  private readonly logs: SandboxLogStore;
  constructor(redis: RedisClient) {
    this.redis = redis;
    this.keys = keysFor(redis);
    this.records = new SandboxStore(redis);
    this.logs = new SandboxLogStore(redis);
  }

  /** Positions first, snapshot second: nothing written in between can be missed. Null: no such sandbox. */
  async start(sandboxId: string, logTailLines: number): Promise<WatchStart | null> {
    const events = await lastEntryId(this.redis, this.keys.events(sandboxId));
    const { lines } = await this.logs.tail(sandboxId, logTailLines);
    const logs = lines.at(-1)?.id ?? (await lastEntryId(this.redis, this.keys.logs(sandboxId)));
    const record = await this.records.get(sandboxId);
    return record ? { record, logTail: lines, from: { events, logs } } : null;
  }

  /** A blocking reader of what comes after `from`, on a connection of its own: close() it. */
  follow(sandboxId: string, from: StreamPositions, opts: { logs: boolean }): StreamFollower {
    return new StreamFollower(this.redis, sandboxId, from, opts.logs);
  }
}

export class StreamFollower {
  private readonly conn: RedisClient;
  private readonly keys: KeySchema;
  private readonly sandboxId: string;
  private readonly from: StreamPositions;
  private readonly withLogs: boolean;
  constructor(redis: RedisClient, sandboxId: string, from: StreamPositions, withLogs: boolean) {
    // Named, so an operator (or a test) can see which follow connections are open.
    this.conn = duplicateClient(redis, `sandgate-follow:${sandboxId}`);
    this.keys = keysFor(redis);
    // Failures surface as the pending read's rejection; the event would only be unhandled.
    this.conn.on('error', () => undefined);
    this.sandboxId = sandboxId;
    this.from = { ...from };
    this.withLogs = withLogs;
  }

  /** Blocks up to `blockMs` for what comes next; [] when nothing did. Advances the positions. */
  async next(blockMs: number): Promise<FollowedEntry[]> {
    const eventsKey = this.keys.events(this.sandboxId);
    const streams = this.withLogs ? [eventsKey, this.keys.logs(this.sandboxId), this.from.events, this.from.logs] : [eventsKey, this.from.events];
    const res = (await this.conn.xreadBuffer('COUNT', FOLLOW_BATCH, 'BLOCK', blockMs, 'STREAMS', ...streams)) as
      | [Buffer, RawEntry[]][]
      | null;
    const out: FollowedEntry[] = [];
    for (const [streamKey, entries] of res ?? []) {
      const isEvents = streamKey.toString() === eventsKey;
      for (const raw of entries) {
        if (isEvents) {
          const event = toEvent(this.sandboxId, raw);
          this.from.events = event.id;
          out.push({ kind: 'event', event });
        } else {
          const line = toLogEntry(raw);
          this.from.logs = line.id;
          out.push({ kind: 'log', line });
        }
      }
    }
    return out;
  }

  /** Ends the connection (a pending read rejects). */
  close(): void {
    this.conn.disconnect();
  }
}
