// Finds the way to a sandbox's supervisor: directly when this replica holds its session,
// otherwise through the owner replica's peer port (found in Redis).
import type { ServiceError } from '@grpc/grpc-js';
import { constants as http2Constants, type ServerHttp2Stream } from 'node:http2';
import type { Duplex } from 'node:stream';
import type { ExecFrame, ExecStart, TcpOpen } from '@sandgate/protocols';
import { setTimeout as sleep } from 'node:timers/promises';
import { GatewayError, Code, type DebugBreak } from '@sandgate/core';
import type { OwnershipStore, ReplicaRegistry } from '@sandgate/store';
import { injectContext, inSpan, TraceAttr, type Logger } from '@sandgate/telemetry';
import type { ExecChannelCall, Session, SessionRegistry, TcpChannelCall } from '../sessions/sessions.ts';
import { endWithError } from '../api/calls.ts';
import { relayFailure, toServiceError } from '../api/grpc-errors.ts';
import { OwnerCache } from './owner-cache.ts';
import { WarmCalls } from './warm-calls.ts';
import { connectLink, type LinkChannel, type LinkError } from '@sandgate/relay';
import { execFrameCodec, peerCallCodec, tcpFrameCodec, type PeerCalls } from './peer-port.ts';

/**
 * Resets the HTTP/2 stream under a grpc-js server call (RST_STREAM CANCEL). Ending the call with
 * a status is not enough while its writes are held by flow control (stdin that the process does
 * not read): the status goes out as trailers, after that data, i.e. never, and the supervisor,
 * never told, keeps the exec running. A reset is not flow-controlled: the supervisor's call fails
 * at once and it kills the tree. grpc-js offers no public server-side cancel, hence the reach
 * into the call (its ServerInterceptingCall chain down to the http2 stream); if that shape ever
 * changes this does nothing, and the ordinary status still ends the call once writes drain.
 */
function resetServerStream(call: unknown): void {
  let link = (call as { call?: unknown }).call;
  for (let depth = 0; depth < 4 && link; depth++) {
    const stream = (link as { stream?: ServerHttp2Stream }).stream;
    if (stream && typeof stream.close === 'function') {
      if (!stream.closed && !stream.destroyed) stream.close(http2Constants.NGHTTP2_CANCEL);
      return;
    }
    link = (link as { nextCall?: unknown }).nextCall;
  }
}

/** One exec's frame stream to the supervisor, wherever it is, and how to tear it down. */
export interface ExecPath {
  readonly stream: Duplex;
  readonly via: 'local' | 'peer';
  /** Break the path: the supervisor then kills the exec's process tree. */
  abort(reason: string): void;
  /**
   * The first failure the stream reported, if it failed before its consumer was listening (an
   * `error` event emitted then would otherwise be lost).
   */
  failure(): unknown;
}

/** Records the first error or cancel of a stream from now on. */
function firstFailure(stream: NodeJS.EventEmitter): () => unknown {
  let failure: unknown;
  stream.on('error', (err: unknown) => (failure ??= err));
  stream.on('cancelled', () => (failure ??= { code: Code.CANCELLED, details: 'cancelled' }));
  return () => failure;
}

/** One TCP channel's frame stream to the supervisor (TcpFrames), wherever it is. */
export type TcpPath = ExecPath;

/**
 * One owner replica as seen from here: exec links opened ahead of need (peer links, see
 * libs/relay/src/link.ts); the unary peer calls each take a link of their own.
 */
interface Peer {
  address: string;
  warmExec: WarmCalls<LinkChannel<ExecFrame>>;
}

/** Idle exec links kept open per owner replica (see warm-calls.ts). */
const WARM_EXEC_LINKS_PER_PEER = 2;

/** What the router asks of the sessions this process holds. */
export type LocalSessions = Pick<SessionRegistry, 'get' | 'killExec' | 'openExec' | 'openTcp' | 'pushPolicy' | 'startMain'>;

/** For a process that holds no supervisor session (a standalone worker): every sandbox is remote. */
export const NO_LOCAL_SESSIONS: LocalSessions = {
  get: () => undefined,
  killExec: () => Promise.reject(new Error('no local sessions')),
  openExec: () => Promise.reject(new Error('no local sessions')),
  openTcp: () => Promise.reject(new Error('no local sessions')),
  pushPolicy: async () => false,
  startMain: async () => 'no-session',
};

export interface RouterDeps {
  replicaId: string;
  sessions: LocalSessions;
  ownership: OwnershipStore;
  replicas: ReplicaRegistry;
  peerSecret: string;
  log: Logger;
  /** Debug faults of this process (only `owner-hints` acts here); normally empty. */
  debugBreaks?: ReadonlySet<DebugBreak>;
}

/**
 * No replica could be reached for the sandbox's supervisor session, and nothing of the exec or
 * channel was sent anywhere: the owner just died or drained and the supervisor is reconnecting,
 * or the session is moving. Routing again later is safe (nothing can run twice).
 */
export class SessionAway extends GatewayError {
  constructor(message: string) {
    super(Code.UNAVAILABLE, message);
  }
}

/** This replica does not hold the sandbox's session (any longer). Safe to route again. */
export class SessionNotHere extends SessionAway {
  constructor() {
    super('supervisor relay failed: supervisor session not connected');
  }
}

/**
 * How long an exec or TCP channel that finds its sandbox's session away (SessionAway) waits for
 * it to come back before answering UNAVAILABLE. A client then sees its call succeed a little
 * later instead of failing during a failover it would have to retry through. Longer than a
 * supervisor's reconnect (its backoff is at most 2 s, plus the hello); bounded, so a sandbox
 * whose supervisor is gone for good still gets its answer.
 */
const SESSION_RETURN_WAIT_MS = 5_000;
/** How often the owner record is read again meanwhile. */
const SESSION_RETURN_POLL_MS = 25;

/** The status an owner answers a peer link with; "not here" is flagged for the entry replica. */
export function toPeerError(err: unknown, log?: Logger): Partial<ServiceError> & { notHere: boolean } {
  return { ...toServiceError(err, log), notHere: err instanceof SessionNotHere };
}

/** Owner hints live this long; correctness never depends on them (see owner-cache.ts). */
const OWNER_CACHE_TTL_MS = 30_000;
const OWNER_CACHE_MAX_ENTRIES = 100_000;

export class ExecRouter {
  private readonly deps: RouterDeps;
  private readonly peers = new Map<string, Peer>();
  private readonly owners: OwnerCache;
  /** Debug fault `owner-hints` (negative chaos runs only): a cached owner is final, stale or not. */
  private readonly trustHints: boolean;

  constructor(deps: RouterDeps) {
    this.deps = deps;
    this.trustHints = deps.debugBreaks?.has('owner-hints') ?? false;
    this.owners = new OwnerCache({ ttlMs: OWNER_CACHE_TTL_MS, maxEntries: OWNER_CACHE_MAX_ENTRIES, pinned: this.trustHints });
  }

  /** Does this replica hold the sandbox's supervisor session right now? */
  holdsSession(sandboxId: string): boolean {
    return this.deps.sessions.get(sandboxId) !== undefined;
  }

  /** Is the sandbox's supervisor session live anywhere: here, or a fresh owner record naming a live replica. */
  async sessionLive(sandboxId: string): Promise<boolean> {
    if (this.deps.sessions.get(sandboxId)) return true;
    const owner = await this.deps.ownership.get(sandboxId);
    if (!owner || owner.replica === this.deps.replicaId) return false;
    return (await this.deps.replicas.get(owner.replica)) !== null;
  }

  /**
   * Opens the exec on the owner replica, wherever that is. `start` is sent as the first frame.
   * `deadlineAtMs` (an exec with a timeout): when the exec's deadline, fixed as the gateway
   * accepted it, passes. Each attempt's start frame carries what is left of it (`timeout_ms`), and
   * the wait for a moving session ends there too: time spent finding the session is the exec's.
   */
  open(sandboxId: string, start: ExecStart, deadlineAtMs?: number): Promise<ExecPath> {
    // At least 1 ms: 0 would mean "no timeout" to the supervisor.
    const stamp = () => (deadlineAtMs === undefined ? start : { ...start, timeout_ms: Math.max(1, deadlineAtMs - Date.now()) });
    return this.route(
      sandboxId,
      () => this.openLocal(sandboxId, stamp()),
      (peer) => this.openPeerCall(peer.warmExec.take(), { start: stamp() }),
      deadlineAtMs,
    );
  }

  /**
   * routeOnce, again while the session is away (SessionAway: nothing was sent), for at most
   * SESSION_RETURN_WAIT_MS, and not past `deadlineAtMs` when given.
   */
  private async route(
    sandboxId: string,
    local: () => Promise<ExecPath>,
    viaPeer: (peer: Peer) => Promise<ExecPath>,
    deadlineAtMs?: number,
  ): Promise<ExecPath> {
    const startedAt = Date.now();
    for (let attempt = 1; ; attempt++) {
      try {
        const path = await this.routeOnce(sandboxId, local, viaPeer);
        if (attempt > 1) this.deps.log.info('relay waited for the supervisor session to return', { sandboxId, waitedMs: Date.now() - startedAt, attempts: attempt });
        return path;
      } catch (err) {
        if (!(err instanceof SessionAway)) throw err;
        if (deadlineAtMs !== undefined && Date.now() >= deadlineAtMs) {
          throw new SessionAway("supervisor relay failed: the sandbox's session was away until the exec's timeout_seconds passed; nothing ran; retry");
        }
        if (Date.now() - startedAt >= SESSION_RETURN_WAIT_MS) throw err;
        await sleep(SESSION_RETURN_POLL_MS);
      }
    }
  }

  /**
   * Local session → local path. Otherwise the cached owner first; if it answers "not here" (the
   * session moved and nothing was started), look the owner up in Redis and try once more.
   */
  private async routeOnce(
    sandboxId: string,
    local: () => Promise<ExecPath>,
    viaPeer: (peer: Peer) => Promise<ExecPath>,
  ): Promise<ExecPath> {
    if (this.holdsSession(sandboxId)) return local();
    const cached = this.owners.get(sandboxId);
    if (cached) {
      const path = await this.tryPeer(sandboxId, cached.address, viaPeer);
      if (path) return path;
      if (this.holdsSession(sandboxId)) return local();
      if (this.trustHints) throw new GatewayError(Code.UNAVAILABLE, 'supervisor relay failed: the cached owner says not here (debug fault owner-hints)');
    }
    const path = await this.tryPeer(sandboxId, await this.ownerPeerAddress(sandboxId), viaPeer);
    if (path) return path;
    throw new SessionAway('supervisor relay failed: the supervisor session is moving between replicas; retry');
  }

  /** The path through the replica at `address`, or null when it answered "not here". */
  private async tryPeer(sandboxId: string, address: string, viaPeer: (peer: Peer) => Promise<ExecPath>): Promise<ExecPath | null> {
    try {
      return await viaPeer(this.peer(address));
    } catch (err) {
      const e = err as Partial<LinkError>;
      if (e.notHere) {
        this.owners.forget(sandboxId);
        return null;
      }
      // The link itself broke (not an answer from the owner): the next call reconnects and re-resolves.
      if (!e.answered) this.evict(address);
      const failure = relayFailure(err, 'supervisor relay failed');
      // Broken before its handshake completed (the owner died, or is restarting): nothing was sent.
      if (e.unsent) {
        this.owners.forget(sandboxId);
        throw new SessionAway(failure.message);
      }
      throw failure;
    }
  }

  /**
   * Sends the first frame and waits for OPENED (the owner holds the session); a failure before it
   * — "not here" included — rejects, and nothing has run. Frames arriving meanwhile stay buffered.
   */
  private openPeerCall<F>(call: LinkChannel<F>, first: F): Promise<ExecPath> {
    return new Promise<ExecPath>((resolve, reject) => {
      let opened = false;
      const failure = firstFailure(call);
      call.on('error', (err: unknown) => {
        if (!opened) reject(err);
      });
      call.once('metadata', () => {
        opened = true;
        resolve({ stream: call as unknown as Duplex, via: 'peer', abort: () => call.cancel(), failure });
      });
      call.write(first);
    });
  }

  /** The peer address of the replica holding the sandbox's session (not this one), or UNAVAILABLE. */
  private async ownerPeerAddress(sandboxId: string): Promise<string> {
    return (await this.ownerPeer(sandboxId)).address;
  }

  /** The replica holding the sandbox's session (not this one) and its peer address, or UNAVAILABLE. */
  private async ownerPeer(sandboxId: string): Promise<{ replica: string; address: string }> {
    const owner = await this.deps.ownership.get(sandboxId);
    if (!owner || owner.replica === this.deps.replicaId) {
      throw new SessionAway('supervisor relay failed: supervisor session not connected');
    }
    const info = await this.deps.replicas.get(owner.replica);
    if (!info) {
      throw new SessionAway(`supervisor relay failed: the session is held by replica ${owner.replica}, which is not live; the supervisor is reconnecting, retry`);
    }
    this.owners.set(sandboxId, { replica: owner.replica, address: info.peerAddress });
    return { replica: owner.replica, address: info.peerAddress };
  }

  /**
   * Kills what is left of an exec, wherever the sandbox's session is. Throws UNAVAILABLE when no
   * replica holds the session right now (the caller, a durable job, retries).
   */
  killExec(sandboxId: string, execId: string): Promise<number> {
    const attributes = { [TraceAttr.sandboxId]: sandboxId, [TraceAttr.execId]: execId, [TraceAttr.replicaId]: this.deps.replicaId };
    return inSpan('sandgate.KillExec', { attributes }, async (span) => {
      if (this.deps.sessions.get(sandboxId)) {
        span.setAttribute(TraceAttr.execPath, 'local');
        const killed = await this.killExecLocal(sandboxId, execId);
        span.setAttribute(TraceAttr.killed, killed);
        return killed;
      }
      span.setAttribute(TraceAttr.execPath, 'relayed');
      const owner = await this.ownerPeer(sandboxId);
      const trace = injectContext();
      const request = trace.traceparent ? { sandbox_id: sandboxId, exec_id: execId, trace_context: trace } : { sandbox_id: sandboxId, exec_id: execId };
      const res = await this.peerCall(owner, 'KillExec', request, 15_000);
      span.setAttribute(TraceAttr.killed, res.killed ?? 0);
      return res.killed ?? 0;
    });
  }

  /**
   * Makes the sandbox's supervisor apply its policy in force (at least `revision`), wherever its
   * session is, and waits for the confirmation. False when no live replica holds the session:
   * the supervisor then gets the policy at its next hello (or its next run's launch).
   */
  async pushPolicy(sandboxId: string, revision: number): Promise<boolean> {
    if (this.deps.sessions.get(sandboxId)) return this.deps.sessions.pushPolicy(sandboxId, revision);
    const owner = await this.deps.ownership.get(sandboxId);
    if (!owner || owner.replica === this.deps.replicaId) return false;
    const info = await this.deps.replicas.get(owner.replica);
    if (!info) return false;
    // The owner waits POLICY_APPLY_TIMEOUT_MS for its supervisor; this deadline only bounds a hung peer.
    const res = await this.peerCall({ replica: owner.replica, address: info.peerAddress }, 'PushPolicy', { sandbox_id: sandboxId, revision }, 10_000);
    return res.connected ?? false;
  }

  /**
   * Makes a claimed warm-pool member's supervisor start its main process (the claim's command and
   * environment, read from the record by the owner), wherever its session is, and waits for the
   * confirmation. False when no live replica holds the session: the supervisor then gets
   * start_main at its next hello.
   */
  async startMain(sandboxId: string): Promise<boolean> {
    if (this.deps.sessions.get(sandboxId)) return (await this.deps.sessions.startMain(sandboxId)) === 'started';
    const owner = await this.deps.ownership.get(sandboxId);
    if (!owner || owner.replica === this.deps.replicaId) return false;
    const info = await this.deps.replicas.get(owner.replica);
    if (!info) return false;
    const res = await this.peerCall({ replica: owner.replica, address: info.peerAddress }, 'StartMain', { sandbox_id: sandboxId }, 10_000);
    return res.connected ?? false;
  }

  /**
   * One unary peer call on a link of its own (kind 'call'): the request goes out once the owner
   * proved itself — and named itself as the replica the owner record names, so an address now
   * held by another replica gets no request; one response or a STATUS comes back. A broken link
   * evicts the peer, as a failed relay does.
   */
  private peerCall<M extends keyof PeerCalls>(
    { replica, address }: { replica: string; address: string },
    method: M,
    request: Parameters<PeerCalls[M]>[0],
    timeoutMs: number,
  ): Promise<Partial<Awaited<ReturnType<PeerCalls[M]>>>> {
    return new Promise((resolve, reject) => {
      const link = connectLink(address, peerCallCodec, { ...this.linkHello('call'), to: replica });
      let settled = false;
      const settle = (err: unknown, res?: Record<string, unknown>) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        link.cancel();
        if (!err) return resolve((res ?? {}) as Partial<Awaited<ReturnType<PeerCalls[M]>>>);
        const e = err as Partial<LinkError>;
        if (e.code === Code.UNAVAILABLE) this.evict(address);
        reject(err);
      };
      const timer = setTimeout(
        () => settle(new GatewayError(Code.DEADLINE_EXCEEDED, `peer call ${method} to ${address} got no answer within ${timeoutMs / 1000}s`)),
        timeoutMs,
      );
      link.on('refused', (why: string) => this.deps.log.warn('peer refused: it could not prove it holds the peer secret', { address, why }));
      link.on('error', (err: unknown) => settle(err));
      link.once('data', (res: Record<string, unknown>) => settle(null, res));
      link.once('end', () => settle(new GatewayError(Code.UNAVAILABLE, `peer call ${method} to ${address} ended without an answer`)));
      link.end({ method, request });
    });
  }

  killExecLocal(sandboxId: string, execId: string): Promise<number> {
    const session = this.deps.sessions.get(sandboxId);
    if (!session) return Promise.reject(new GatewayError(Code.UNAVAILABLE, 'supervisor session not connected'));
    return this.deps.sessions.killExec(session, execId);
  }

  /** This replica holds the session: ask the supervisor for an ExecChannel. */
  openLocal(sandboxId: string, start: ExecStart): Promise<ExecPath> {
    return this.localPath(sandboxId, (session) => this.deps.sessions.openExec(session, start));
  }

  /** The path over a channel the supervisor opens (`open`) on this replica's session of the sandbox. */
  private async localPath(sandboxId: string, open: (session: Session) => Promise<ExecChannelCall | TcpChannelCall>): Promise<ExecPath> {
    const session = this.deps.sessions.get(sandboxId);
    if (!session) throw new SessionNotHere();
    const call = await open(session);
    return {
      stream: call as unknown as Duplex,
      via: 'local',
      abort: (reason) => {
        const blocked = call.writableLength > 0;
        endWithError(call, new GatewayError(Code.CANCELLED, reason));
        if (blocked) resetServerStream(call);
      },
      failure: firstFailure(call),
    };
  }

  // ---- TCP channels (SSH and ForwardTcp): the same routing as exec, with TcpFrames -----------

  /** Opens a TCP channel to the sandbox's supervisor, wherever its session is. */
  openTcp(sandboxId: string, open: TcpOpen): Promise<TcpPath> {
    return this.route(
      sandboxId,
      () => this.openTcpLocal(sandboxId, open),
      (peer) => this.openPeerCall(connectLink(peer.address, tcpFrameCodec, this.linkHello('tcp')), { open }),
    );
  }

  /** This replica holds the session: ask the supervisor for a TcpChannel. */
  openTcpLocal(sandboxId: string, open: TcpOpen): Promise<TcpPath> {
    return this.localPath(sandboxId, (session) => this.deps.sessions.openTcp(session, open));
  }

  private peer(address: string): Peer {
    let peer = this.peers.get(address);
    if (!peer) {
      // `reuse`: a link whose exec ended cleanly comes back to the pool (link.ts, 'successor').
      const warmExec = new WarmCalls(() => connectLink(address, execFrameCodec, { ...this.linkHello('exec'), reuse: true }), WARM_EXEC_LINKS_PER_PEER, {
        // Idle links double as a liveness probe: one that drops (the replica died, froze or is
        // shutting down) takes every owner hint naming that replica with it.
        onIdleLost: () => this.owners.forgetAddress(address),
      });
      peer = { address, warmExec };
      this.peers.set(address, peer);
    }
    return peer;
  }

  private linkHello(kind: 'exec' | 'tcp' | 'call') {
    return { secret: this.deps.peerSecret, kind, from: this.deps.replicaId };
  }

  private evict(address: string): void {
    this.owners.forgetAddress(address);
    const peer = this.peers.get(address);
    if (peer) {
      this.peers.delete(address);
      peer.warmExec.close();
    }
  }

  close(): void {
    for (const peer of this.peers.values()) {
      peer.warmExec.close();
    }
    this.peers.clear();
  }
}
