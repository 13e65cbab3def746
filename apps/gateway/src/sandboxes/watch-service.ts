// WatchSandbox and GetSandboxLogs across replicas. Snapshots come from the sandbox's event
// stream (appended atomically by every record write, so every change arrives once, in order,
// whichever replica made it); log lines from its log stream. One blocking Redis connection per
// watcher (the store's follower), closed with the call.
import type { Principal } from '@sandgate/core';
import type { ServerUnaryCall, ServerWritableStream, sendUnaryData } from '@grpc/grpc-js';
import type {
  GetSandboxLogsRequest,
  GetSandboxLogsResponse,
  SandboxLogLine,
  SandboxStreamEvent,
  WatchSandboxRequest,
} from '@sandgate/protocols';
import { invalid, isWatchTerminal, notFound } from '@sandgate/core';
import { streamIdBefore, type LogLine, type SandboxFeed, type SandboxLogStore, type SandboxStore } from '@sandgate/store';
import type { Logger } from '@sandgate/telemetry';
import type { WorkspaceAccess } from '../api/access.ts';
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
  feed: SandboxFeed;
  store: SandboxStore;
  logs: SandboxLogStore;
  /** Workspace scoping of both calls (access.ts). */
  workspaces: WorkspaceAccess;
  log: Logger;
}

export class WatchService {
  private readonly deps: WatchDeps;

  constructor(deps: WatchDeps) {
    this.deps = deps;
  }

  async getLogs(req: GetSandboxLogsRequest, caller: Principal): Promise<GetSandboxLogsResponse> {
    if (!req.sandbox_id) throw invalid('sandbox_id is required');
    await this.deps.workspaces.visible(caller, await this.deps.store.get(req.sandbox_id));
    const { lines, total } = await this.deps.logs.tail(req.sandbox_id, req.lines || 2000);
    const filter = { sinceMs: req.since_ms ?? 0, sources: req.sources, minLevel: req.min_level ?? '' };
    return { logs: lines.filter((l) => logMatches(l, filter)).map((l) => toWire(req.sandbox_id!, l)), buffer_total: total };
  }

  handleLogs(call: ServerUnaryCall<GetSandboxLogsRequest, GetSandboxLogsResponse>, cb: sendUnaryData<GetSandboxLogsResponse>, caller: Principal): void {
    this.getLogs(call.request, caller).then(
      (res) => cb(null, res),
      (err: unknown) => cb(toServiceError(err, this.deps.log)),
    );
  }

  /** Resolves when the watch has ended (for tests: a watch must end when its client goes away). */
  handleWatch(call: WatchCall, caller: Principal, opts: WatchOptions = {}): Promise<void> {
    return this.watch(call, caller, opts).catch((err: unknown) => endWithError(call, toServiceError(err, this.deps.log)));
  }

  private async watch(call: WatchCall, caller: Principal, opts: WatchOptions): Promise<void> {
    const req = call.request;
    const id = req.id;
    if (!id) throw invalid('id is required');
    // Scoped before anything of the sandbox is read: another workspace's is NOT_FOUND. A sandbox
    // never changes workspace, so the check holds for the whole stream.
    const current = await this.deps.workspaces.visible(caller, await this.deps.store.get(id));
    // Where the stream stands after what was sent last (REST's SSE event ids resume from it).
    let at: WatchPosition;
    const emit = (ev: SandboxStreamEvent) => send(call, opts.positions ? { ...ev, position: { ...at } } : ev);
    const followStatus = req.follow_status || req.stop_on_terminal;
    const filter = { sinceMs: req.log_since_ms ?? 0, sources: req.log_sources, minLevel: req.log_min_level ?? '' };
    if (opts.resumeFrom) {
      // A client that saw everything up to here: no snapshot, no tail, nothing twice.
      at = { ...opts.resumeFrom };
      if (req.stop_on_terminal && isWatchTerminal(current.sandbox.status?.phase) && current.resourceVersion <= at.rv) return void call.end();
    } else {
      const start = await this.deps.feed.start(id, req.log_tail_lines || 200);
      if (!start) throw notFound();
      // The snapshot's position precedes the log tail, so a resume from it replays the tail.
      at = { events: start.from.events, logs: req.follow_logs && start.logTail[0] ? streamIdBefore(start.logTail[0].id) : start.from.logs, rv: start.record.resourceVersion };
      if (!(await emit({ sandbox: start.record.sandbox }))) return;
      if (req.stop_on_terminal && isWatchTerminal(start.record.sandbox.status?.phase)) return void call.end();
      if (req.follow_logs) {
        for (const l of start.logTail) {
          at.logs = l.id;
          if (logMatches(l, filter) && !(await emit({ log: toWire(id, l) }))) return;
        }
      }
      at.logs = start.from.logs;
    }
    if (!followStatus && !req.follow_logs) return void call.end();

    const follower = this.deps.feed.follow(id, { events: at.events, logs: at.logs }, { logs: !!req.follow_logs });
    // Ends a pending blocking read at once when the client goes away.
    const stop = () => follower.close();
    call.on('cancelled', stop);
    call.on('close', stop);
    try {
      while (!callEnded(call)) {
        for (const entry of await follower.next(BLOCK_MS)) {
          if (entry.kind === 'log') {
            at.logs = entry.line.id;
            if (logMatches(entry.line, filter) && !(await emit({ log: toWire(id, entry.line) }))) return;
            continue;
          }
          const ev = entry.event;
          at.events = ev.id;
          if (ev.kind === 'deleted') return void call.end();
          if (ev.rv <= at.rv || !followStatus) continue;
          at.rv = ev.rv;
          if (!(await emit({ sandbox: ev.sandbox }))) return;
          if (req.stop_on_terminal && isWatchTerminal(ev.sandbox.status?.phase)) return void call.end();
        }
      }
    } catch (err) {
      if (callEnded(call)) return;
      throw err;
    } finally {
      call.off('cancelled', stop);
      call.off('close', stop);
      follower.close();
    }
  }
}

/**
 * Where a watch stands: everything of the event stream up to `events`, of the log stream up to
 * `logs` (stream entry ids) and snapshots up to resource version `rv` were handled. Following from
 * it misses nothing and repeats nothing.
 */
export interface WatchPosition {
  events: string;
  logs: string;
  rv: number;
}

export interface WatchOptions {
  /** Resume a watch that had reached this position (REST's Last-Event-ID). */
  resumeFrom?: WatchPosition;
  /** Write each event with the position after it (`{...event, position}`): REST's SSE ids. */
  positions?: boolean;
}

type WatchCall = ServerWritableStream<WatchSandboxRequest, SandboxStreamEvent>;

const callEnded = (call: WatchCall) => call.cancelled || call.destroyed || call.writableEnded;

/**
 * Writes one message; if the client is slow, waits until it drains, or until the call ends (the
 * client went away: no drain ever comes then). false: the call has ended, stop sending.
 */
async function send(call: WatchCall, ev: SandboxStreamEvent | (SandboxStreamEvent & { position: WatchPosition })): Promise<boolean> {
  if (callEnded(call)) return false;
  if (!call.write(ev)) {
    await new Promise<void>((resolve) => {
      const done = () => {
        for (const name of CALL_ENDS) call.off(name, done);
        resolve();
      };
      for (const name of CALL_ENDS) call.on(name, done);
      if (callEnded(call)) done();
    });
  }
  return !callEnded(call);
}

/** What ends a wait for 'drain': the drain itself, or the call going away. */
const CALL_ENDS = ['drain', 'cancelled', 'close', 'error'] as const;
