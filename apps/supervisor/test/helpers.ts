// Test harness: a real grpc-js server playing the gateway, the real supervisor as a child process,
// and /proc scanning to prove process trees are really gone. No network mocks.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { serviceDefinition } from '@sandgate/protocols';
import type { ExecExit, ExecFrame, ExecStart, GatewayMessage, SupervisorMessage, TcpFrame, TcpOpen } from '@sandgate/protocols';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
export const MAIN_TS = 'apps/supervisor/src/main.ts';

export async function waitFor<T>(
  what: string,
  fn: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  timeoutMs = 5000,
  intervalMs = 20,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** Pids whose environment carries SANDGATE_EXEC_ID=<id> (or starting with a prefix), zombies excluded. */
export function taggedPids(execIdOrPrefix: string, prefix = false): number[] {
  const out: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const vars = fs.readFileSync(`/proc/${entry}/environ`, 'latin1').split('\0');
      const hit = vars.some((v) =>
        prefix ? v.startsWith(`SANDGATE_EXEC_ID=${execIdOrPrefix}`) : v === `SANDGATE_EXEC_ID=${execIdOrPrefix}`,
      );
      if (!hit) continue;
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
      if (state !== 'Z') out.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

export function killTagged(prefix: string): void {
  for (const pid of taggedPids(prefix, true)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
}

// One way to pick ports for every test (see its comment on why not listen(0)).
export { freePort } from '@sandgate/test-harness/ports';

export interface ControlConn {
  call: grpc.ServerDuplexStream<SupervisorMessage, GatewayMessage>;
  metadata: grpc.Metadata;
  messages: SupervisorMessage[];
  hello: SupervisorMessage['hello'];
  ended: boolean;
}

export class ExecConn {
  readonly call: grpc.ServerDuplexStream<ExecFrame, ExecFrame>;
  readonly frames: ExecFrame[] = [];
  readonly metadata: grpc.Metadata;
  attach: ExecFrame['attach'];
  ended = false;
  /** Bytes of stdout received, counted even when frames are not kept. */
  stdoutBytes = 0;
  keepFrames = true;

  constructor(call: grpc.ServerDuplexStream<ExecFrame, ExecFrame>) {
    this.call = call;
    this.metadata = call.metadata;
  }

  stdout(): string {
    return Buffer.concat(this.frames.filter((f) => f.stdout).map((f) => f.stdout!)).toString();
  }
  stderr(): string {
    return Buffer.concat(this.frames.filter((f) => f.stderr).map((f) => f.stderr!)).toString();
  }
  get exit(): ExecExit | undefined {
    return this.frames.find((f) => f.exit)?.exit;
  }
  waitExit(timeoutMs = 10_000): Promise<ExecExit> {
    return waitFor('exec exit', () => this.exit, timeoutMs);
  }
  waitStdout(re: RegExp, timeoutMs = 5000): Promise<string> {
    return waitFor(`stdout matching ${re}`, () => (re.test(this.stdout()) ? this.stdout() : undefined), timeoutMs);
  }
  send(frame: ExecFrame): void {
    this.call.write(frame);
  }
}

/** One TcpChannel call as the gateway sees it: what the supervisor sent, and a way to answer. */
export class TcpConn {
  readonly call: grpc.ServerDuplexStream<TcpFrame, TcpFrame>;
  attach: TcpFrame['attach'];
  readonly chunks: Buffer[] = [];
  eof = false;
  ended = false;

  constructor(call: grpc.ServerDuplexStream<TcpFrame, TcpFrame>) {
    this.call = call;
  }
  received(): string {
    return Buffer.concat(this.chunks).toString();
  }
  waitReceived(re: RegExp, timeoutMs = 5000): Promise<string> {
    return waitFor(`tcp data matching ${re}`, () => (re.test(this.received()) ? this.received() : undefined), timeoutMs);
  }
  write(data: Buffer | string): void {
    this.call.write({ data: Buffer.from(data) });
  }
  close(): void {
    this.call.end();
  }
}

export interface FakeGatewayOptions {
  port?: number;
  heartbeatIntervalMs?: number;
  /** Whether the gateway sends its own heartbeats (the supervisor treats silence as death). */
  sendHeartbeats?: boolean;
  /** Serve TLS with this certificate (PEM) instead of plaintext. */
  tls?: { key: string; cert: string };
}

/** A minimal gateway: acks hellos, optionally heartbeats, and records everything it receives. */
export class FakeGateway {
  readonly server = new grpc.Server();
  port = 0;
  readonly controls: ControlConn[] = [];
  readonly execs = new Map<string, ExecConn>();
  readonly tcps = new Map<string, TcpConn>();
  private readonly opts: FakeGatewayOptions;
  private readonly timers: NodeJS.Timeout[] = [];

  constructor(opts: FakeGatewayOptions = {}) {
    this.opts = opts;
    this.server.addService(serviceDefinition('sandgate.v1.SupervisorGateway'), {
      Control: (call: grpc.ServerDuplexStream<SupervisorMessage, GatewayMessage>) => this.onControl(call),
      ExecChannel: (call: grpc.ServerDuplexStream<ExecFrame, ExecFrame>) => this.onExec(call),
      TcpChannel: (call: grpc.ServerDuplexStream<TcpFrame, TcpFrame>) => this.onTcp(call),
    });
  }

  async start(): Promise<this> {
    this.port = await new Promise<number>((resolve, reject) =>
      this.server.bindAsync(`127.0.0.1:${this.opts.port ?? 0}`, this.credentials(), (err, port) =>
        err ? reject(err) : resolve(port),
      ),
    );
    return this;
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  private credentials(): grpc.ServerCredentials {
    const tls = this.opts.tls;
    return tls ? grpc.ServerCredentials.createSsl(null, [{ private_key: Buffer.from(tls.key), cert_chain: Buffer.from(tls.cert) }], false) : grpc.ServerCredentials.createInsecure();
  }

  private onControl(call: grpc.ServerDuplexStream<SupervisorMessage, GatewayMessage>): void {
    const conn: ControlConn = { call, metadata: call.metadata, messages: [], hello: undefined, ended: false };
    this.controls.push(conn);
    const interval = this.opts.heartbeatIntervalMs ?? 2000;
    call.on('data', (msg: SupervisorMessage) => {
      conn.messages.push(msg);
      if (msg.hello && !conn.hello) {
        conn.hello = msg.hello;
        call.write({ hello_ack: { session_id: `sess-${this.controls.length}`, heartbeat_interval_ms: interval, replica_id: 'fake', fence: 1 } });
        if (this.opts.sendHeartbeats ?? true) {
          const t = setInterval(() => {
            if (!conn.ended) call.write({ heartbeat: { sent_at_ms: Date.now() } });
          }, interval);
          this.timers.push(t);
        }
      }
    });
    const end = () => {
      conn.ended = true;
    };
    call.on('end', () => {
      end();
      call.end();
    });
    call.on('error', end);
    call.on('cancelled', end);
  }

  private onExec(call: grpc.ServerDuplexStream<ExecFrame, ExecFrame>): void {
    const conn = new ExecConn(call);
    call.on('data', (frame: ExecFrame) => {
      if (frame.attach && !conn.attach) {
        conn.attach = frame.attach;
        this.execs.set(frame.attach.exec_id ?? '', conn);
      }
      if (frame.stdout) conn.stdoutBytes += frame.stdout.length;
      if (conn.keepFrames || !frame.stdout) conn.frames.push(frame);
    });
    call.on('end', () => {
      conn.ended = true;
      call.end();
    });
    call.on('error', () => {
      conn.ended = true;
    });
  }

  private onTcp(call: grpc.ServerDuplexStream<TcpFrame, TcpFrame>): void {
    const conn = new TcpConn(call);
    call.on('data', (frame: TcpFrame) => {
      if (frame.attach && !conn.attach) {
        conn.attach = frame.attach;
        this.tcps.set(frame.attach.channel_id ?? '', conn);
      }
      if (frame.data) conn.chunks.push(frame.data);
      if (frame.eof) conn.eof = true;
    });
    const end = () => {
      conn.ended = true;
    };
    call.on('end', end);
    call.on('error', end);
    call.on('cancelled', end);
  }

  /**
   * Sends open_tcp and waits for the supervisor's answer: the TcpChannel it opened, or the
   * message of its tcp_open_failed.
   */
  async openTcp(open: TcpOpen & { channel_id: string }, timeoutMs = 15_000): Promise<TcpConn | string> {
    const control = await waitFor('a live control stream', () => this.liveControl());
    control.call.write({ open_tcp: open });
    return waitFor(
      `tcp channel ${open.channel_id}`,
      () =>
        this.tcps.get(open.channel_id) ??
        control.messages.find((m) => m.tcp_open_failed?.channel_id === open.channel_id)?.tcp_open_failed?.message,
      timeoutMs,
    );
  }

  /** The most recent control stream that said hello and is still open. */
  liveControl(): ControlConn | undefined {
    return [...this.controls].reverse().find((c) => c.hello && !c.ended);
  }

  waitHello(count = 1, timeoutMs = 10_000): Promise<ControlConn> {
    return waitFor(`hello #${count}`, () => this.controls.filter((c) => c.hello).length >= count && this.controls.filter((c) => c.hello)[count - 1], timeoutMs);
  }

  /** Sends open_exec on the live control stream and waits for the matching ExecChannel attach. */
  async openExec(start: Partial<ExecStart> & { exec_id: string; argv: string[] }, keepFrames = true): Promise<ExecConn> {
    const control = await waitFor('a live control stream', () => this.liveControl());
    control.call.write({ open_exec: { env: {}, ...start } as ExecStart });
    const conn = await waitFor(`attach of ${start.exec_id}`, () => this.execs.get(start.exec_id));
    conn.keepFrames = keepFrames;
    return conn;
  }

  stop(): void {
    for (const t of this.timers) clearInterval(t);
    this.server.forceShutdown();
  }
}

export interface SupervisorHandle {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  logs: () => Array<Record<string, unknown>>;
  exited: Promise<number | null>;
  stop(): Promise<void>;
}

export function startSupervisor(opts: {
  endpoints: string[];
  sandboxId: string;
  credential?: string;
  mainArgv?: string[];
  env?: Record<string, string>;
  /** Node flags before the entry point (the drivers' SUPERVISOR_NODE_FLAGS, say); none by default. */
  nodeFlags?: readonly string[];
}): SupervisorHandle {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-sup-'));
  const credFile = path.join(dir, 'credential');
  fs.writeFileSync(credFile, (opts.credential ?? 'test-secret') + '\n');
  const child = spawn(process.execPath, [...(opts.nodeFlags ?? []), MAIN_TS, '--', ...(opts.mainArgv ?? ['sleep', '1000'])], {
    cwd: REPO_ROOT,
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: process.env.HOME ?? '/root',
      SANDGATE_GATEWAY: opts.endpoints.join(','),
      SANDGATE_SANDBOX_ID: opts.sandboxId,
      SANDGATE_CREDENTIAL_FILE: credFile,
      SANDGATE_LOG_LEVEL: 'debug',
      ...opts.env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return {
    child,
    stdout: () => out,
    stderr: () => err,
    logs: () =>
      err
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => {
          try {
            return JSON.parse(l) as Record<string, unknown>;
          } catch {
            return {};
          }
        }),
    exited,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const done = await Promise.race([exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 8000))]);
        if (!done) child.kill('SIGKILL');
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Pids whose command line contains `needle` (the whole machine, like `ps`), this process left out. */
export function pidsOf(needle: string): number[] {
  const out: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').replace(/\0/g, ' ').includes(needle)) out.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return out.filter((p) => p !== process.pid);
}
