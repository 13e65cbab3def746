// The supervisor's control session with the gateway: dial an endpoint, say hello, exchange
// heartbeats, hand `open_exec` requests to the exec layer, and reconnect forever (rotating through
// the endpoints, with backoff) whenever the stream ends, errors or goes silent. The gateway being
// unavailable is never a reason for the supervisor to exit.
import type { ExecStart, GatewayMessage, StartMain, SupervisorMessage, TcpOpen } from '@sandgate/protocols';
import { backoffDelay, DEFAULT_BACKOFF, type BackoffOptions } from './backoff.ts';
import { callMetadata, createGatewayClient, type CallError, type CallMetadata, type GatewayCall, type GatewayClient, type GatewayTls } from './gateway-client.ts';
import type { Logger } from '@sandgate/telemetry/log';

/** `policy_update` (sandgate.proto GatewayMessage field 8). */
export type PolicyUpdate = NonNullable<GatewayMessage['policy_update']>;

/** One live control session; execs opened through it use the same client, hence the same replica. */
export interface GatewayConnection {
  readonly endpoint: string;
  readonly client: GatewayClient;
  readonly sessionId: string;
  readonly replicaId: string;
  /** Aborted when this control session dies: every exec using it must consider its path broken. */
  readonly signal: AbortSignal;
  metadata(): CallMetadata;
}

export interface ControlSessionOptions {
  endpoints: string[];
  sandboxId: string;
  instanceId: string;
  supervisorVersion: string;
  mainPid: () => number;
  /** A warm-pool member whose main process waits for start_main (said in every hello). */
  awaitingMain?: () => boolean;
  /** Read on every dial so a rotated credential file is picked up. */
  credential: () => string;
  /** The gateway serves TLS (its CA and the name to verify); absent: plaintext. */
  tls?: GatewayTls;
  log: Logger;
  onOpenExec: (start: ExecStart, conn: GatewayConnection) => void;
  /** The gateway's deadline backstop: kill what is left of an exec; resolves with how many died. */
  onKillExec: (execId: string) => Promise<number>;
  /** The gateway wants a TCP channel (an SSH connection, a forwarded port). */
  onOpenTcp?: (open: TcpOpen, conn: GatewayConnection) => void;
  /**
   * The sandbox's policy changed: apply it (new connections follow it) and return '' or, keeping
   * the previous policy, why it could not be applied. Absent: every update is refused.
   */
  onPolicyUpdate?: (update: PolicyUpdate) => string;
  /** A claimed pool member: start the main process (idempotent). Absent: start_main is ignored. */
  onStartMain?: (start: StartMain) => void;
  /** hello_ack said the gateway exports traces (`tracing`): record spans and relay them (sendSpans). */
  onTracing?: () => void;
  /** Without a hello_ack by then, the attempt is abandoned. */
  helloTimeoutMs?: number;
  backoff?: BackoffOptions;
  /** Debug fault `supervisor-reconnect` (negative chaos runs only): once an established session is lost, never dial again. */
  noReconnect?: boolean;
}

export const DEFAULT_HEARTBEAT_INTERVAL_MS = 2000;
/** The session is dead after this many heartbeat intervals without any message from the gateway. */
export const MISSED_HEARTBEATS = 3;
const DEFAULT_HELLO_TIMEOUT_MS = 10_000;

interface Attempt {
  readonly endpoint: string;
  readonly client: GatewayClient;
  readonly call: GatewayCall<SupervisorMessage, GatewayMessage>;
  readonly abort: AbortController;
  conn: GatewayConnection | undefined;
  lastSeen: number;
  intervalMs: number;
  timers: NodeJS.Timeout[];
  closed: boolean;
}

/** A report the gateway must acknowledge; resent on every connection until it is. */
interface PendingReport {
  message: SupervisorMessage;
  acked: () => void;
}

/** How often an unacknowledged report is resent on a live session. */
const REPORT_RESEND_MS = 2000;

export class ControlSession {
  private readonly opts: ControlSessionOptions;
  private readonly reports = new Map<string, PendingReport>();
  private readonly log: Logger;
  private nextEndpoint = 0;
  private failures = 0;
  private current: Attempt | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private stopped = true;

  constructor(opts: ControlSessionOptions) {
    if (opts.endpoints.length === 0) throw new Error('no gateway endpoints');
    this.opts = opts;
    this.log = opts.log;
  }

  /** The live session, if hello_ack has been received. */
  get connection(): GatewayConnection | undefined {
    return this.current?.conn;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.connect();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    if (this.current) this.drop(this.current, 'supervisor shutting down');
  }

  /**
   * Sends a report that must become durable at the gateway (`main_exit`, `terminal_final`):
   * resolves once acknowledged, resending it on this and every later connection until then.
   */
  report(kind: 'main_exit' | 'terminal_final', message: SupervisorMessage): Promise<void> {
    return new Promise((resolve) => {
      this.reports.set(kind, { message, acked: resolve });
      if (this.current?.conn) this.send(this.current, message);
    });
  }

  private onAck(kind: 'main_exit' | 'terminal_final', instanceId: string | undefined): void {
    const pending = this.reports.get(kind);
    if (!pending) return;
    const sent = kind === 'main_exit' ? pending.message.main_exit?.instance_id : pending.message.terminal_final?.instance_id;
    if (sent !== instanceId) return;
    this.reports.delete(kind);
    pending.acked();
  }

  /** Tells the gateway an exec could not even be opened (no channel to report on). */
  reportExecOpenFailed(conn: GatewayConnection, execId: string, message: string): void {
    const attempt = this.current;
    if (!attempt || attempt.conn !== conn) return;
    this.send(attempt, { exec_open_failed: { exec_id: execId, message } });
  }

  /**
   * Finished spans (OTLP JSON) to the gateway, which posts them to its collector: the sandbox
   * needs no network path of its own. False when no session is live (the caller keeps them).
   */
  sendSpans(otlpJson: Uint8Array): boolean {
    const attempt = this.current;
    if (!attempt?.conn || attempt.closed) return false;
    this.send(attempt, { spans: { otlp_json: Buffer.from(otlpJson.buffer, otlpJson.byteOffset, otlpJson.byteLength) } });
    return true;
  }

  /** Tells the gateway a TCP channel could not be opened. */
  reportTcpOpenFailed(conn: GatewayConnection, channelId: string, message: string): void {
    const attempt = this.current;
    if (!attempt || attempt.conn !== conn) return;
    this.send(attempt, { tcp_open_failed: { channel_id: channelId, message } });
  }

  private connect(): void {
    if (this.stopped) return;
    const { endpoints } = this.opts;
    const endpoint = endpoints[this.nextEndpoint % endpoints.length];
    this.nextEndpoint = (this.nextEndpoint + 1) % endpoints.length;

    let client: GatewayClient | undefined;
    let call: GatewayCall<SupervisorMessage, GatewayMessage>;
    let md: CallMetadata;
    try {
      md = callMetadata(this.opts.sandboxId, this.opts.credential());
      // A new client (channel) per attempt: a reconnect must be free to reach another replica.
      client = createGatewayClient(endpoint, this.opts.tls);
      call = client.Control(md);
    } catch (err) {
      this.log.error('cannot open control stream', { endpoint, err });
      try {
        client?.close();
      } catch {
        // nothing to close
      }
      this.scheduleReconnect();
      return;
    }

    const attempt: Attempt = {
      endpoint,
      client,
      call,
      abort: new AbortController(),
      conn: undefined,
      lastSeen: Date.now(),
      intervalMs: DEFAULT_HEARTBEAT_INTERVAL_MS,
      timers: [],
      closed: false,
    };
    this.current = attempt;
    this.log.debug('dialling gateway', { endpoint });

    call.on('data', (msg: GatewayMessage) => {
      try {
        this.onMessage(attempt, msg, md);
      } catch (err) {
        this.log.error('control message handler failed', { err });
      }
    });
    call.on('error', (err: CallError) => this.drop(attempt, 'control stream error', err));
    call.on('end', () => this.drop(attempt, 'control stream ended by gateway'));

    attempt.timers.push(
      setTimeout(() => {
        if (!attempt.conn) this.drop(attempt, 'no hello_ack in time');
      }, this.opts.helloTimeoutMs ?? DEFAULT_HELLO_TIMEOUT_MS),
    );
    this.send(attempt, {
      hello: {
        sandbox_id: this.opts.sandboxId,
        instance_id: this.opts.instanceId,
        supervisor_version: this.opts.supervisorVersion,
        main_pid: this.opts.mainPid(),
        awaiting_main: this.opts.awaitingMain?.() ?? false,
      },
    });
  }

  private onMessage(attempt: Attempt, msg: GatewayMessage, md: CallMetadata): void {
    if (attempt.closed) return;
    attempt.lastSeen = Date.now();
    if (msg.hello_ack) {
      if (attempt.conn) return; // a duplicate ack changes nothing
      const ack = msg.hello_ack;
      attempt.intervalMs = clampInterval(ack.heartbeat_interval_ms);
      attempt.conn = {
        endpoint: attempt.endpoint,
        client: attempt.client,
        sessionId: ack.session_id ?? '',
        replicaId: ack.replica_id ?? '',
        signal: attempt.abort.signal,
        metadata: () => md,
      };
      this.failures = 0;
      if (ack.tracing) this.opts.onTracing?.();
      this.startHeartbeats(attempt);
      for (const r of this.reports.values()) this.send(attempt, r.message);
      this.log.info('control session established', {
        endpoint: attempt.endpoint,
        session_id: attempt.conn.sessionId,
        replica_id: attempt.conn.replicaId,
        heartbeat_interval_ms: attempt.intervalMs,
      });
    } else if (msg.open_exec) {
      if (!attempt.conn) {
        this.log.warn('open_exec before hello_ack ignored', { exec_id: msg.open_exec.exec_id });
        return;
      }
      this.opts.onOpenExec(msg.open_exec, attempt.conn);
    } else if (msg.open_tcp) {
      if (!attempt.conn) return;
      if (this.opts.onOpenTcp) this.opts.onOpenTcp(msg.open_tcp, attempt.conn);
      else this.send(attempt, { tcp_open_failed: { channel_id: msg.open_tcp.channel_id, message: 'tcp channels are not supported' } });
    } else if (msg.policy_update) {
      if (!attempt.conn) return;
      const update = msg.policy_update;
      let error: string;
      try {
        error = this.opts.onPolicyUpdate ? this.opts.onPolicyUpdate(update) : 'policy updates are not supported by this supervisor';
      } catch (err) {
        error = err instanceof Error ? err.message : String(err);
      }
      if (error) this.log.warn('policy update refused, keeping the previous policy', { revision: update.revision, error });
      else this.log.info('policy updated', { revision: update.revision });
      const applied: SupervisorMessage = { policy_applied: { revision: update.revision ?? 0, error } };
      this.send(attempt, applied);
    } else if (msg.start_main) {
      if (!attempt.conn || !this.opts.onStartMain) return;
      this.opts.onStartMain(msg.start_main);
      this.send(attempt, { main_started: { instance_id: this.opts.instanceId } });
    } else if (msg.main_exit_ack) {
      this.onAck('main_exit', msg.main_exit_ack.instance_id);
    } else if (msg.terminal_final_ack) {
      this.onAck('terminal_final', msg.terminal_final_ack.instance_id);
    } else if (msg.kill_exec) {
      const { exec_id: execId = '', request_id: requestId = '' } = msg.kill_exec;
      if (!execId) return;
      void this.opts
        .onKillExec(execId)
        .catch((err: unknown) => {
          this.log.warn('kill_exec failed', { exec_id: execId, err });
          return 0;
        })
        .then((killed) => {
          if (!attempt.closed) this.send(attempt, { exec_kill_result: { exec_id: execId, request_id: requestId, killed } });
        });
    }
    // Gateway heartbeats only matter through lastSeen; unknown messages are ignored.
  }

  private startHeartbeats(attempt: Attempt): void {
    const timer = setInterval(() => {
      if (attempt.closed) return;
      if (Date.now() - attempt.lastSeen > MISSED_HEARTBEATS * attempt.intervalMs) {
        this.drop(attempt, 'gateway silent for too long');
        return;
      }
      this.send(attempt, { heartbeat: { sent_at_ms: Date.now() } });
    }, attempt.intervalMs);
    attempt.timers.push(timer);
    // Unacknowledged reports go out again (the gateway's answer may have been lost with a replica).
    attempt.timers.push(
      setInterval(() => {
        for (const r of this.reports.values()) this.send(attempt, r.message);
      }, REPORT_RESEND_MS),
    );
  }

  private send(attempt: Attempt, msg: SupervisorMessage): void {
    if (attempt.closed) return;
    try {
      attempt.call.write(msg);
    } catch (err) {
      this.drop(attempt, 'control stream write failed', err);
    }
  }

  /** Tears one attempt down (idempotent) and, unless stopped, schedules the next. */
  private drop(attempt: Attempt, reason: string, err?: unknown): void {
    if (attempt.closed) return;
    attempt.closed = true;
    for (const t of attempt.timers) clearTimeout(t);
    const wasUp = attempt.conn !== undefined;
    const fields: Record<string, unknown> = { endpoint: attempt.endpoint, reason };
    // The whole error (gRPC status and code included), through the logger's one serialiser.
    if (err) fields.err = err;
    if (wasUp) this.log.warn('control session lost', fields);
    else if (!this.stopped) {
      // While the gateway is down this repeats every couple of seconds: keep the log readable.
      const loud = this.failures < 3 || this.failures % 30 === 0;
      this.log[loud ? 'warn' : 'debug']('control session attempt failed', { ...fields, failures: this.failures + 1 });
    }
    // Execs first (they cancel their own calls), then the stream, then the channel.
    attempt.abort.abort(new Error(reason));
    try {
      attempt.call.cancel();
    } catch {
      // already finished
    }
    try {
      attempt.client.close();
    } catch {
      // already closed
    }
    if (this.current === attempt) this.current = undefined;
    if (wasUp && this.opts.noReconnect) return this.log.warn('not reconnecting (debug fault supervisor-reconnect)');
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (this.stopped) return;
    clearTimeout(this.reconnectTimer);
    const delay = backoffDelay(this.failures++, this.opts.backoff ?? DEFAULT_BACKOFF);
    this.reconnectTimer = setTimeout(() => this.connect(), delay);
  }
}

function clampInterval(ms: number | undefined): number {
  if (!ms || !Number.isFinite(ms)) return DEFAULT_HEARTBEAT_INTERVAL_MS;
  return Math.min(60_000, Math.max(50, ms));
}
