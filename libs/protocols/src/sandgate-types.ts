// TypeScript shapes of sandgate's own protocol messages (proto/sandgate/v1/sandgate.proto).
import type { StringMap } from './openshell-types.ts';

export interface ExecStart {
  exec_id?: string;
  sandbox_id?: string;
  argv: string[];
  workdir?: string;
  env: StringMap;
  timeout_seconds?: number;
  tty?: boolean;
  cols?: number;
  rows?: number;
  stdin?: Buffer;
  stdin_eof?: boolean;
  attach_main?: boolean;
  /** W3C trace context (`traceparent`, `tracestate`) of the call this exec serves. */
  trace_context?: StringMap;
  /** What is left of the exec's deadline when the frame was sent, in ms (with timeout_seconds). */
  timeout_ms?: number;
}

export interface ExecExit {
  exit_code?: number;
  timed_out?: boolean;
  signal?: number;
  oom_killed?: boolean;
}

export interface PathError {
  code?: number;
  message?: string;
}

/** One frame of an exec, on the supervisor channel and on the peer relay alike. */
export interface ExecFrame {
  start?: ExecStart;
  attach?: { exec_id?: string; session_id?: string };
  stdin?: Buffer;
  stdin_eof?: Record<string, never>;
  resize?: { cols?: number; rows?: number };
  signal?: { signo?: number };
  stdout?: Buffer;
  stderr?: Buffer;
  exit?: ExecExit;
  error?: PathError;
}

export interface Hello {
  sandbox_id?: string;
  instance_id?: string;
  supervisor_version?: string;
  main_pid?: number;
  /** A warm-pool member whose main process waits for start_main. */
  awaiting_main?: boolean;
}

export interface SupervisorMessage {
  hello?: Hello;
  heartbeat?: { sent_at_ms?: number };
  exec_open_failed?: { exec_id?: string; message?: string };
  exec_kill_result?: { exec_id?: string; request_id?: string; killed?: number };
  main_exit?: { instance_id?: string; exit_code?: number; signal?: number; oom_killed?: boolean };
  terminal_final?: { instance_id?: string };
  tcp_open_failed?: { channel_id?: string; message?: string };
  policy_applied?: { revision?: number; error?: string };
  /** Finished spans: an OTLP ExportTraceServiceRequest, JSON-encoded. */
  spans?: { otlp_json?: Buffer };
  main_started?: { instance_id?: string };
}

export interface GatewayMessage {
  hello_ack?: { session_id?: string; heartbeat_interval_ms?: number; replica_id?: string; fence?: number; tracing?: boolean };
  heartbeat?: { sent_at_ms?: number };
  open_exec?: ExecStart;
  kill_exec?: { exec_id?: string; request_id?: string };
  main_exit_ack?: { instance_id?: string };
  terminal_final_ack?: { instance_id?: string };
  open_tcp?: TcpOpen;
  policy_update?: { policy?: Buffer; revision?: number };
  start_main?: StartMain;
}

/** A claimed warm-pool member's main process (GatewayMessage.start_main). */
export interface StartMain {
  /** Empty: the supervisor's own argv. */
  argv: string[];
  env: StringMap;
  tty?: boolean;
}

/** sandgate.v1.Sandgate/SetPool. */
export interface SetPoolRequest {
  name?: string;
  size?: number;
  image?: string;
  resources?: Buffer;
  policy?: Buffer;
  auto_match?: boolean;
}

/** sandgate.v1.Pool. */
export interface Pool {
  name: string;
  size: number;
  image: string;
  resources?: Buffer;
  policy?: Buffer;
  generation: number;
  ready: number;
  starting: number;
  created_at_ms: number;
  consecutive_failures: number;
  retry_at_ms: number;
  last_error: string;
  auto_match: boolean;
}

/** Where a TCP channel goes: the supervisor's SSH server, or a loopback port in the sandbox. */
export interface TcpOpen {
  channel_id?: string;
  sandbox_id?: string;
  ssh?: Record<string, never>;
  tcp?: { host?: string; port?: number };
  /** Not a connection: a file streamed in or out by the supervisor (FileTarget in the .proto). */
  file?: FileTarget;
  service_id?: string;
  /** W3C trace context of the call this channel serves. */
  trace_context?: StringMap;
}

/** One frame of a TCP channel, on the supervisor channel and on the peer relay alike. */
export interface TcpFrame {
  open?: TcpOpen;
  attach?: { channel_id?: string; session_id?: string };
  data?: Buffer;
  eof?: Record<string, never>;
  error?: PathError;
  /** File channels only: what the supervisor opened (read) or wrote (write). */
  file_info?: FileInfo;
}

/** A file transfer over a TCP channel: read (download) or write (upload), a file or a tar of a directory. */
export interface FileTarget {
  path?: string;
  write?: boolean;
  archive?: boolean;
}

export interface FileInfo {
  /** The absolute path inside the sandbox. */
  path?: string;
  /** The bytes are a tar of a directory. */
  archive?: boolean;
  /** Read: the file's size when opened (absent for a tar). Write: the bytes received. */
  size?: number;
}

/** sandgate.v1.Sandgate/UploadFile and DownloadFile. */
export interface FileRequest {
  sandbox_id?: string;
  path?: string;
  archive?: boolean;
}

export interface UploadFileFrame {
  start?: FileRequest;
  data?: Buffer;
}

export interface FileTransferResult {
  path?: string;
  bytes?: number;
  archive?: boolean;
}

export interface DownloadFileFrame {
  info?: FileInfo;
  data?: Buffer;
}

/** sandgate.v1.Sandgate/GetSandboxUsage. */
export interface GetSandboxUsageRequest {
  sandbox_id?: string;
}

export interface SandboxUsage {
  available?: boolean;
  cpu_seconds?: number;
  memory_bytes?: number;
  sampled_at_ms?: number;
  replica_id?: string;
}
