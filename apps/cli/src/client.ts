// A small programmatic OpenShell client over gRPC (plaintext or TLS): promisified unary calls, the exec
// streams, and `waitForReady`. The CLI commands use it; so can tests and load tests.
import {
  credentials,
  InterceptingCall,
  makeGenericClientConstructor,
  status as Status,
  Metadata,
  type CallOptions,
  type Interceptor,
  type Client,
  type ClientDuplexStream,
  type ClientReadableStream,
  type ServiceError,
} from '@grpc/grpc-js';
import {
  SandboxPhase,
  serviceDefinition,
  type CreateSandboxRequest,
  type ExecSandboxEvent,
  type ExecSandboxInput,
  type ExecSandboxRequest,
  type HealthResponse,
  type ListSandboxesRequest,
  type Sandbox,
  type SandboxSpec,
  type StringMap,
  type CreateSshSessionResponse,
  type TcpForwardFrame,
} from '@sandgate/protocols';
import { endpointWantsTls, normaliseEndpoint } from './args.ts';

// One client for OpenShell's calls and sandgate's own (sandgate.v1.Sandgate: GetSandboxUsage):
// each method carries its full path, so both services share the channel.
const OpenShellClient = makeGenericClientConstructor(
  { ...serviceDefinition('openshell.v1.OpenShell'), ...serviceDefinition('sandgate.v1.Sandgate') },
  'OpenShell',
);

type UnaryMethod = (req: object, md: Metadata, opts: CallOptions, cb: (err: ServiceError | null, res: unknown) => void) => unknown;

export interface ClientOptions {
  /** Deadline for each unary call, in milliseconds (default 60 s). */
  unaryTimeoutMs?: number;
  /** Sent on every call as `authorization: Bearer <token>`, as OpenShell's SDKs send it. */
  token?: string;
  /**
   * TLS: the CA to trust (absent: the system's), the mTLS pair, the name to verify. An
   * `https://`/`grpcs://` endpoint is TLS even without this.
   */
  tls?: { ca?: Buffer; cert?: Buffer; key?: Buffer; servername?: string } | null;
}

/** Adds `authorization: Bearer <token>` to every call. */
export function bearerInterceptor(token: string): Interceptor {
  return (options, nextCall) =>
    new InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        metadata.set('authorization', `Bearer ${token}`);
        next(metadata, listener);
      },
    });
}

/** What CreateSandbox takes, with the always-present maps optional. */
export interface CreateSandboxInput {
  name?: string;
  labels?: StringMap;
  annotations?: StringMap;
  workspace?: string;
  spec?: Partial<SandboxSpec>;
}

export interface ExecResult {
  exitCode: number;
  stdout: Buffer;
  stderr: Buffer;
}

export interface WaitForReadyOptions {
  timeoutMs?: number;
  intervalMs?: number;
  /** The workspace the sandbox is in; undefined: the caller's own. */
  workspace?: string;
  /** Called with every polled state (for progress output). */
  onPoll?: (sandbox: Sandbox) => void;
}

export interface SandgateClient {
  /** The normalised `host:port` this client dials. */
  readonly endpoint: string;
  /** The underlying grpc-js client (every OpenShell method, by its proto name). */
  readonly raw: Client;
  /** Any unary method by name, e.g. `unary('GetGatewayInfo', {})`. */
  unary<T>(method: string, request: object, options?: CallOptions): Promise<T>;
  health(): Promise<HealthResponse>;
  createSandbox(request: CreateSandboxInput): Promise<Sandbox>;
  getSandbox(name: string, workspace?: string): Promise<Sandbox>;
  listSandboxes(request?: Partial<ListSandboxesRequest>): Promise<Sandbox[]>;
  deleteSandbox(name: string, workspace?: string): Promise<boolean>;
  /** Bidi `ExecSandboxInteractive`: write `{start}` first, then `{stdin}`/`{resize}`; `end()` is stdin EOF. */
  execInteractive(options?: CallOptions): ClientDuplexStream<ExecSandboxInput, ExecSandboxEvent>;
  /** Server-streaming `ExecSandbox` (stdin given up front). */
  execStream(request: Partial<ExecSandboxRequest> & { sandbox_id: string; command: string[] }, options?: CallOptions): ClientReadableStream<ExecSandboxEvent>;
  /** Runs a command with `ExecSandbox` and collects its output and exit code. */
  exec(request: Partial<ExecSandboxRequest> & { sandbox_id: string; command: string[] }, options?: CallOptions): Promise<ExecResult>;
  /**
   * Polls GetSandbox until the sandbox is Ready (or already Completed/Stopped); rejects with a
   * SandboxNotReadyError on Error/Deleting or timeout, and with the ServiceError on NOT_FOUND.
   */
  waitForReady(name: string, options?: WaitForReadyOptions): Promise<Sandbox>;
  /** WatchSandbox: a server stream of SandboxStreamEvent. */
  watch(request: { id: string; follow_status?: boolean; follow_logs?: boolean; log_tail_lines?: number; log_sources?: string[]; stop_on_terminal?: boolean }): ClientReadableStream<unknown>;
  /** CreateSshSession: a token for ForwardTcp to this sandbox (bound to its current run). */
  createSshSession(sandboxId: string): Promise<CreateSshSessionResponse>;
  /** RevokeSshSession: true if the token existed. */
  revokeSshSession(token: string, options?: CallOptions): Promise<boolean>;
  /** Bidi `ForwardTcp`: write `{init}` first, then `{data}`; `end()` is the half-close. */
  forwardTcp(options?: CallOptions): ClientDuplexStream<TcpForwardFrame, TcpForwardFrame>;
  close(): void;
}

export function isServiceError(err: unknown): err is ServiceError {
  return typeof err === 'object' && err !== null && typeof (err as ServiceError).code === 'number' && 'details' in err;
}

/** `NOT_FOUND`, `UNAVAILABLE`… for a numeric gRPC status. */
export function statusName(code: number): string {
  return (Status as unknown as Record<number, string>)[code] ?? `STATUS_${code}`;
}

/** Why a sandbox could not become ready (its Ready condition's message, or the phase). */
export class SandboxNotReadyError extends Error {
  readonly sandbox: Sandbox | undefined;
  constructor(message: string, sandbox?: Sandbox) {
    super(message);
    this.name = 'SandboxNotReadyError';
    this.sandbox = sandbox;
  }
}

export function readyConditionMessage(sandbox: Sandbox): string | undefined {
  const cond = sandbox.status?.conditions?.find((c) => c.type === 'Ready');
  return cond?.message || cond?.reason || undefined;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function createClient(endpoint: string, options: ClientOptions = {}): SandgateClient {
  const address = normaliseEndpoint(endpoint);
  const tls = options.tls ?? (endpointWantsTls(endpoint) ? {} : null);
  const channel = tls ? credentials.createSsl(tls.ca ?? null, tls.key ?? null, tls.cert ?? null) : credentials.createInsecure();
  const raw = new OpenShellClient(address, channel, {
    'grpc.keepalive_time_ms': 20_000,
    'grpc.keepalive_timeout_ms': 10_000,
    'grpc.initial_reconnect_backoff_ms': 100,
    'grpc.max_reconnect_backoff_ms': 2000,
    ...(tls?.servername ? { 'grpc.ssl_target_name_override': tls.servername } : {}),
    interceptors: options.token ? [bearerInterceptor(options.token)] : [],
  });
  const methods = raw as unknown as Record<string, unknown>;
  const unaryTimeoutMs = options.unaryTimeoutMs ?? 60_000;

  const unary = <T>(method: string, request: object, callOptions: CallOptions = {}): Promise<T> =>
    new Promise((resolve, reject) => {
      const fn = methods[method];
      if (typeof fn !== 'function') {
        reject(new Error(`unknown OpenShell method '${method}'`));
        return;
      }
      const opts: CallOptions = { deadline: Date.now() + unaryTimeoutMs, ...callOptions };
      (fn as UnaryMethod).call(raw, request, new Metadata(), opts, (err, res) => (err ? reject(err) : resolve(res as T)));
    });

  const execStream: SandgateClient['execStream'] = (request, callOptions = {}) =>
    (methods.ExecSandbox as (req: object, md: Metadata, opts: CallOptions) => ClientReadableStream<ExecSandboxEvent>).call(
      raw,
      { environment: {}, ...request },
      new Metadata(),
      callOptions,
    );

  const client: SandgateClient = {
    endpoint: address,
    raw,
    unary,
    health: () => unary<HealthResponse>('Health', {}),
    async createSandbox(request) {
      const spec = request.spec ?? {};
      const full: CreateSandboxRequest = {
        name: request.name,
        labels: request.labels ?? {},
        annotations: request.annotations ?? {},
        workspace: request.workspace,
        spec: { environment: {}, providers: [], command: [], ...spec },
      };
      const res = await unary<{ sandbox?: Sandbox }>('CreateSandbox', full);
      if (!res.sandbox) throw new Error('CreateSandbox returned no sandbox');
      return res.sandbox;
    },
    async getSandbox(name, workspace) {
      const res = await unary<{ sandbox?: Sandbox }>('GetSandbox', { name, workspace });
      if (!res.sandbox) throw new Error('GetSandbox returned no sandbox');
      return res.sandbox;
    },
    async listSandboxes(request = {}) {
      const res = await unary<{ sandboxes?: Sandbox[] }>('ListSandboxes', request);
      return res.sandboxes ?? [];
    },
    async deleteSandbox(name, workspace) {
      const res = await unary<{ deleted?: boolean }>('DeleteSandbox', { name, workspace });
      return Boolean(res.deleted);
    },
    execInteractive: (callOptions = {}) =>
      (methods.ExecSandboxInteractive as (md: Metadata, opts: CallOptions) => ClientDuplexStream<ExecSandboxInput, ExecSandboxEvent>).call(
        raw,
        new Metadata(),
        callOptions,
      ),
    execStream,
    exec: (request, callOptions) =>
      new Promise((resolve, reject) => {
        const call = execStream(request, callOptions);
        const stdout: Buffer[] = [];
        const stderr: Buffer[] = [];
        let exitCode: number | undefined;
        let failed = false;
        call.on('data', (ev: ExecSandboxEvent) => {
          if (ev.stdout?.data) stdout.push(ev.stdout.data);
          if (ev.stderr?.data) stderr.push(ev.stderr.data);
          if (ev.exit) exitCode = ev.exit.exit_code ?? 0;
        });
        call.on('error', (err) => {
          failed = true;
          reject(err);
        });
        call.on('status', () => {
          if (failed) return;
          if (exitCode === undefined) reject(new Error('stream ended without an exit event'));
          else resolve({ exitCode, stdout: Buffer.concat(stdout), stderr: Buffer.concat(stderr) });
        });
      }),
    async waitForReady(name, waitOptions = {}) {
      const timeoutMs = waitOptions.timeoutMs ?? 300_000;
      const intervalMs = waitOptions.intervalMs ?? 200;
      const deadline = Date.now() + timeoutMs;
      let last: Sandbox | undefined;
      for (;;) {
        try {
          const callDeadline = Math.max(Date.now() + 1000, Math.min(deadline, Date.now() + 10_000));
          last = (await unary<{ sandbox?: Sandbox }>('GetSandbox', { name, workspace: waitOptions.workspace }, { deadline: callDeadline })).sandbox;
        } catch (err) {
          // A replica going away mid-wait is not the sandbox's fault: keep polling until the deadline.
          if (!isServiceError(err) || (err.code !== Status.UNAVAILABLE && err.code !== Status.DEADLINE_EXCEEDED)) throw err;
        }
        if (last) {
          waitOptions.onPoll?.(last);
          const phase = last.status?.phase;
          // Completed/Stopped: the main process already ran and exited; nothing left to wait for.
          if (phase === SandboxPhase.READY || phase === SandboxPhase.COMPLETED || phase === SandboxPhase.STOPPED) return last;
          // Error with an exit code: the main process ran and failed; its result is what callers want.
          if (phase === SandboxPhase.ERROR && last.status?.exit_code !== undefined) return last;
          if (phase === SandboxPhase.ERROR) {
            throw new SandboxNotReadyError(`sandbox ${name} failed: ${readyConditionMessage(last) ?? 'phase Error'}`, last);
          }
          if (phase === SandboxPhase.DELETING) throw new SandboxNotReadyError(`sandbox ${name} is being deleted`, last);
        }
        if (Date.now() + intervalMs > deadline) {
          const why = last ? readyConditionMessage(last) : undefined;
          throw new SandboxNotReadyError(
            `sandbox ${name} was not ready after ${Math.round(timeoutMs / 1000)}s${why ? `: ${why}` : ''}`,
            last,
          );
        }
        await sleep(intervalMs);
      }
    },
    watch: (request) =>
      (methods.WatchSandbox as (req: object, md: Metadata, opts: CallOptions) => ClientReadableStream<unknown>).call(
        raw,
        { log_sources: [], ...request },
        new Metadata(),
        {},
      ),
    createSshSession: (sandboxId) => unary<CreateSshSessionResponse>('CreateSshSession', { sandbox_id: sandboxId }),
    async revokeSshSession(token, callOptions) {
      const res = await unary<{ revoked?: boolean }>('RevokeSshSession', { token }, callOptions);
      return Boolean(res.revoked);
    },
    forwardTcp: (callOptions = {}) =>
      (methods.ForwardTcp as (md: Metadata, opts: CallOptions) => ClientDuplexStream<TcpForwardFrame, TcpForwardFrame>).call(
        raw,
        new Metadata(),
        callOptions,
      ),
    close: () => raw.close(),
  };
  return client;
}
