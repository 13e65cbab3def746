// WatchSandbox and GetSandboxLogs across replicas. Snapshots come from the sandbox's event
// stream (appended atomically by every record write, so every change arrives once, in order,
// whichever replica made it); log lines from its log stream. One blocking Redis connection per
// watcher, closed with the call.
import type { ServerUnaryCall, ServerWritableStream, sendUnaryData } from '@grpc/grpc-js';
import type { Redis } from 'ioredis';
import type {
  GetSandboxLogsRequest,
  GetSandboxLogsResponse,
  SandboxLogLine,
  SandboxStreamEvent,
  WatchSandboxRequest,
} from '@sandgate/protocols';
import { invalid, isWatchTerminal, notFound } from '@sandgate/core';
import { keys, lastEventId, toEvent, toLogLine, type LogLine, type SandboxLogStore, type SandboxStore } from '@sandgate/store';
import type { Logger } from '@sandgate/telemetry';
import { toServiceError } from '../api/grpc-errors.ts';
import { endWithError } from '../sessions/sessions.ts';

const LEVELS: Record<string, number> = { ERROR: 0, WARN: 1, WARNING: 1, INFO: 2, OCSF: 2, DEBUG: 3, TRACE: 4 };
const BLOCK_MS = 5_000;

export interface LogFilter {
  sinceMs: number;
  sources: string[];
  minLevel: string;
}

/** Upstream's filter: since, source ("" counts as gateway), minimum level (unknown levels pass). */
export function logMatches(line: LogLine, f: LogFilter): boolean {
  if (f.sinceMs && line.timestamp_ms < f.sinceMs) return false;
  const source = line.source || 'gateway';
  if (f.sources.length > 0 && !f.sources.includes(source)) return false;
  const min = LEVELS[f.minLevel.toUpperCase()];
  const lvl = LEVELS[line.level.toUpperCase()];
  if (f.minLevel && min !== undefined && lvl !== undefined && lvl > min) return false;
  return true;
}

function toWire(sandboxId: string, l: LogLine): SandboxLogLine {
  return { sandbox_id: sandboxId, timestamp_ms: l.timestamp_ms, level: l.level, target: l.target, message: l.message, source: l.source, fields: {} };
}

export interface WatchDeps {
  redis: Redis;
  store: SandboxStore;
  logs: SandboxLogStore;
  log: Logger;
}

export class WatchService {
  private readonly deps: WatchDeps;

  constructor(deps: WatchDeps) {
    this.deps = deps;
  }

  async getLogs(req: GetSandboxLogsRequest): Promise<GetSandboxLogsResponse> {
    if (!req.sandbox_id) throw invalid('sandbox_id is required');
    if (!(await this.deps.store.get(req.sandbox_id))) throw notFound();
    const { lines, total } = await this.deps.logs.tail(req.sandbox_id, req.lines || 2000);
    const filter = { sinceMs: req.since_ms ?? 0, sources: req.sources, minLevel: req.min_level ?? '' };
    return { logs: lines.filter((l) => logMatches(l, filter)).map((l) => toWire(req.sandbox_id!, l)), buffer_total: total };
  }

  handleLogs(call: ServerUnaryCall<GetSandboxLogsRequest, GetSandboxLogsResponse>, cb: sendUnaryData<GetSandboxLogsResponse>): void {
    this.getLogs(call.request).then(
      (res) => cb(null, res),
      (err: unknown) => cb(toServiceError(err, this.deps.log)),
    );
  }

  handleWatch(call: ServerWritableStream<WatchSandboxRequest, SandboxStreamEvent>): void {
    this.watch(call).catch((err: unknown) => endWithError(call, toServiceError(err, this.deps.log)));
  }

  private async watch(call: ServerWritableStream<WatchSandboxRequest, SandboxStreamEvent>): Promise<void> {
    const req = call.request;
    const id = req.id;
    if (!id) throw invalid('id is required');
    const { redis, store, logs } = this.deps;
    // Positions first, snapshot second: nothing written in between can be missed.
    let eventsFrom = await lastEventId(redis, id);
    const logTail = await logs.tail(id, req.log_tail_lines || 200);
    let logsFrom = logTail.lines.at(-1)?.id ?? (await lastLogId(redis, id));
    const rec = await store.get(id);
    if (!rec) throw notFound();

    const send = async (ev: SandboxStreamEvent) => {
      if (!call.write(ev)) await new Promise((r) => call.once('drain', r));
    };
    await send({ sandbox: rec.sandbox });
    let sentRv = rec.resourceVersion;
    if (req.stop_on_terminal && isWatchTerminal(rec.sandbox.status?.phase)) return void call.end();
    const filter = { sinceMs: req.log_since_ms ?? 0, sources: req.log_sources, minLevel: req.log_min_level ?? '' };
    if (req.follow_logs) {
      for (const l of logTail.lines) if (logMatches(l, filter)) await send({ log: toWire(id, l) });
    }
    const followStatus = req.follow_status || req.stop_on_terminal;
    if (!followStatus && !req.follow_logs) return void call.end();

    const conn = redis.duplicate();
    conn.on('error', () => undefined);
    const closeConn = () => conn.disconnect();
    call.on('cancelled', closeConn);
    call.on('close', closeConn);
    try {
      while (!call.cancelled && !call.destroyed) {
        const streams = [keys.events(id), ...(req.follow_logs ? [keys.logs(id)] : [])];
        const from = [eventsFrom, ...(req.follow_logs ? [logsFrom] : [])];
        const res = (await conn.xreadBuffer('COUNT', 200, 'BLOCK', BLOCK_MS, 'STREAMS', ...streams, ...from)) as
          | [Buffer, [Buffer, Buffer[]][]][]
          | null;
        if (!res) continue;
        for (const [streamKey, entries] of res) {
          const isEvents = streamKey.toString() === keys.events(id);
          for (const [entryId, raw] of entries) {
            if (isEvents) {
              const ev = toEvent(id, [entryId.toString(), raw]);
              eventsFrom = ev.id;
              if (ev.kind === 'deleted') return void call.end();
              if (ev.rv <= sentRv || !followStatus) continue;
              sentRv = ev.rv;
              await send({ sandbox: ev.sandbox });
              if (req.stop_on_terminal && isWatchTerminal(ev.sandbox.status?.phase)) return void call.end();
            } else {
              const line = toLogLine([entryId.toString(), raw]);
              logsFrom = line.id;
              if (logMatches(line, filter)) await send({ log: toWire(id, line) });
            }
          }
        }
      }
    } catch (err) {
      if (call.cancelled || call.destroyed) return;
      throw err;
    } finally {
      closeConn();
    }
  }
}

async function lastLogId(redis: Redis, id: string): Promise<string> {
  const last = (await redis.xrevrange(keys.logs(id), '+', '-', 'COUNT', 1)) as [string, string[]][];
  return last[0]?.[0] ?? '0-0';
}
