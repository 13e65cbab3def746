// SSH sessions: CreateSshSession mints a token bound to one sandbox and to its current run,
// RevokeSshSession voids one, and ForwardTcp asks here whether a token may open one more
// connection. Tokens and the connection counts live in Redis (libs/store ssh-sessions.ts), so
// every replica gives the same answer; the counted slots are heartbeated by the replica relaying
// the connection, so a replica crash frees its slots within the store's stale window.
import { randomUUID } from 'node:crypto';
import { isIP } from 'node:net';
import type {
  CreateSshSessionRequest,
  CreateSshSessionResponse,
  RevokeSshSessionRequest,
  RevokeSshSessionResponse,
} from '@sandgate/protocols';
import { GatewayError, Code, notFound, type Principal } from '@sandgate/core';
import type { ForwardSlot, SandboxStore, SshSessionStore, StoredSandbox } from '@sandgate/store';
import type { Logger, Metrics } from '@sandgate/telemetry';
import { requireAccess, type WorkspaceAccess } from '../api/access.ts';

export const DEFAULT_SSH_SESSION_TTL_SECONDS = 86_400;
export const DEFAULT_SSH_MAX_PER_TOKEN = 3;
export const DEFAULT_SSH_MAX_PER_SANDBOX = 20;

export interface SshServiceDeps {
  store: SandboxStore;
  sessions: SshSessionStore;
  /** Is the sandbox's supervisor session live anywhere (the access rule's second input)? */
  sessionLive: (sandboxId: string) => Promise<boolean>;
  /** What CreateSshSession reports as the gateway's address (never empty). */
  gatewayHost: string;
  gatewayPort: number;
  /** `https` when the public port serves TLS: clients of CreateSshSession dial ForwardTcp with it. */
  gatewayScheme: 'http' | 'https';
  /** 0 = tokens never expire. */
  ttlSeconds: number;
  maxPerToken: number;
  maxPerSandbox: number;
  /** Workspace scoping (access.ts): another workspace's sandbox, or its token, is NOT_FOUND. */
  workspaces: WorkspaceAccess;
  log: Logger;
  metrics: Metrics;
}

/** A host as the CreateSshSession contract wants it: IPv6 literals in brackets, never empty. */
export function gatewayHostForResponse(host: string): string {
  const h = host.trim();
  if (h === '' || h === '::' || h === '[::]') return h === '' ? '127.0.0.1' : '[::]';
  if (isIP(h) === 6) return `[${h}]`;
  return h;
}

/** SANDGATE_SSH_SESSION_TTL_SECONDS (0 = never expire), else the default of 24 h. */
export function sshSessionTtlFromEnv(env: Record<string, string | undefined>): number {
  const raw = env.SANDGATE_SSH_SESSION_TTL_SECONDS;
  if (raw === undefined || raw.trim() === '') return DEFAULT_SSH_SESSION_TTL_SECONDS;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`SANDGATE_SSH_SESSION_TTL_SECONDS must be a whole number of seconds, got '${raw}'`);
  return n;
}

export class SshService {
  private readonly deps: SshServiceDeps;
  /** Forwards this replica relays, heartbeated in Redis while they live. */
  private readonly live = new Map<string, ForwardSlot>();
  private readonly heartbeatTimer: NodeJS.Timeout;

  constructor(deps: SshServiceDeps) {
    this.deps = deps;
    this.heartbeatTimer = setInterval(() => {
      deps.sessions
        .heartbeatForwards(this.live.values())
        .catch((err: unknown) => deps.log.warn('ssh forward heartbeat failed', { err }));
    }, Math.max(500, Math.floor(deps.sessions.staleMs / 3)));
    this.heartbeatTimer.unref();
    deps.metrics.gauge('sandgate_ssh_forwards_active', () => this.live.size);
  }

  /**
   * Workspace scoping, then the access rule, exactly as exec applies them (ForwardTcp checks them
   * before the token; the token must then be for this very sandbox, so its sandbox is one the
   * caller may use too).
   */
  accessibleSandbox(sandboxId: string, caller: Principal): Promise<StoredSandbox> {
    return requireAccess(this.deps, sandboxId, { caller, workspaces: this.deps.workspaces });
  }

  async create(req: CreateSshSessionRequest, caller: Principal): Promise<CreateSshSessionResponse> {
    const sandboxId = req.sandbox_id ?? '';
    if (!sandboxId) throw new GatewayError(Code.INVALID_ARGUMENT, 'sandbox_id is required');
    const record = await this.accessibleSandbox(sandboxId, caller);
    const token = randomUUID();
    const now = Date.now();
    const expiresAtMs = this.deps.ttlSeconds > 0 ? now + this.deps.ttlSeconds * 1000 : 0;
    const stored = await this.deps.sessions.create(token, {
      sandboxId,
      runStartedAtMs: record.runStartedAtMs,
      expiresAtMs,
      revoked: false,
      createdAtMs: now,
    });
    // Deleted since it was read: NOT_FOUND, as if the delete had come first.
    if (!stored) throw notFound();
    this.deps.metrics.inc('sandgate_ssh_sessions_created_total');
    return {
      sandbox_id: sandboxId,
      token,
      gateway_host: this.deps.gatewayHost,
      gateway_port: this.deps.gatewayPort,
      gateway_scheme: this.deps.gatewayScheme,
      host_key_fingerprint: '',
      expires_at_ms: expiresAtMs,
    };
  }

  async revoke(req: RevokeSshSessionRequest, caller: Principal): Promise<RevokeSshSessionResponse> {
    const token = req.token ?? '';
    if (!token) throw new GatewayError(Code.INVALID_ARGUMENT, 'token is required');
    // A token of another workspace's sandbox is NOT_FOUND (revoking it would be touching that
    // sandbox). A token whose sandbox is gone grants nothing any more: anyone holding it may void it.
    const session = await this.deps.sessions.get(token);
    if (session) {
      const record = await this.deps.store.get(session.sandboxId);
      if (record && !(await this.deps.workspaces.mayUse(caller, record.sandbox.metadata?.workspace ?? ''))) throw notFound();
    }
    const revoked = await this.deps.sessions.revoke(token);
    if (revoked) this.deps.metrics.inc('sandgate_ssh_sessions_revoked_total');
    return { revoked };
  }

  /**
   * May this token open a connection to this sandbox now? Checked after the access rule, so the
   * record is the current one. Each failure says which check failed.
   */
  async checkToken(token: string, record: StoredSandbox): Promise<void> {
    const unauthenticated = (message: string) => new GatewayError(Code.UNAUTHENTICATED, message);
    if (!token) throw unauthenticated('authorization_token is required for ForwardTcp');
    const session = await this.deps.sessions.get(token);
    if (!session) throw unauthenticated('SSH session token not found');
    if (session.revoked) throw unauthenticated('SSH session token is not valid: it was revoked');
    if (session.sandboxId !== record.sandbox.metadata?.id) throw unauthenticated('SSH session token is not valid for this sandbox');
    if (session.expiresAtMs > 0 && Date.now() >= session.expiresAtMs) throw unauthenticated('SSH session token expired');
    if (session.runStartedAtMs !== record.runStartedAtMs) {
      throw unauthenticated('SSH session token is not valid: it was issued for an earlier run of the sandbox (stopped or restarted since)');
    }
  }

  /** Takes one connection slot (per token and per sandbox); returns its release function. */
  async acquire(token: string, sandboxId: string): Promise<() => void> {
    const slot: ForwardSlot = { token, sandboxId, forwardId: randomUUID() };
    const result = await this.deps.sessions.acquireForward(slot, { perToken: this.deps.maxPerToken, perSandbox: this.deps.maxPerSandbox });
    if (result !== 'ok') {
      this.deps.metrics.inc('sandgate_ssh_forwards_rejected_total');
      throw new GatewayError(
        Code.RESOURCE_EXHAUSTED,
        result === 'token-limit'
          ? `SSH session connection limit reached (${this.deps.maxPerToken} per token)`
          : `sandbox SSH connection limit reached (${this.deps.maxPerSandbox} per sandbox)`,
      );
    }
    this.live.set(slot.forwardId, slot);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.live.delete(slot.forwardId);
      this.deps.sessions.releaseForward(slot).catch((err: unknown) => this.deps.log.warn('ssh forward release failed', { err }));
    };
  }

  close(): void {
    clearInterval(this.heartbeatTimer);
  }
}
