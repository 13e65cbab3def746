// The supervisor's side of a file transfer: an `open_tcp` whose target is a file (FileTarget in
// sandgate.proto). Instead of dialling anything, the TcpChannel call is bridged to a file worker
// (file-worker.ts) started exactly like an exec — through the workload launcher, so the file is
// read or written as the workload's uid/gid, in its root and mount view, with no capability the
// workload lacks (file-worker.ts says why this is the one correct identity). The channel keeps its
// usual back-pressure: a full call pauses the worker's stdout (the worker then blocks), a full
// worker stdin pauses the call (HTTP/2 flow control then slows every hop back to the client).
//
//   read:  worker `ok` report -> `file_info`; stdout -> `data` frames; exit 0 -> `eof`.
//   write: `data` frames -> worker stdin (framed); the gateway's `eof` -> the commit frame; the
//          worker's `ok` report -> `file_info`, `eof`. The call ending before the gateway's `eof`
//          aborts: stdin closes without the commit frame and the worker removes its temporary file.
//   Any failure -> one `error` frame (the worker's gRPC code and message), then the call ends.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { GatewayCall } from './gateway-client.ts';
import type { FileInfo, PathError, TcpFrame, TcpOpen } from '@sandgate/protocols';
import { Code } from '@sandgate/core/status';
import type { Logger } from '@sandgate/telemetry/log';
import type { GatewayConnection } from './control-session.ts';
import { launchCommand } from './exec-process.ts';
import { SAFE_PATH, type WorkloadLauncher } from './workload/launcher.ts';
import { REPORT_PREFIX, type WorkerReport, type WorkerSpec } from './file-paths.ts';
import type { PipedChild } from './workload/native-spawn.ts';

type TcpChannelCall = GatewayCall<TcpFrame, TcpFrame>;

function once(fn: () => void): () => void {
  let called = false;
  return () => {
    if (!called) {
      called = true;
      fn();
    }
  };
}

const WORKER_ENTRY = fileURLToPath(new URL('./file-worker.ts', import.meta.url));

/** After an abort, how long the worker has to clean up and exit before it is killed. */
const ABORT_GRACE_MS = 5_000;

/**
 * File workers running at once in this sandbox: each is a node process charged to the workload's
 * cgroups, so a flood of transfers must not become a flood of processes.
 */
export const MAX_CONCURRENT_FILE_TRANSFERS = 16;
let running = 0;

/** /tmp is a root too: scratch space every sandbox has (bwrap: a private tmpfs; docker: the container's). */
export const EXTRA_FILE_ROOTS = ['/tmp'];

export interface FileTransferDeps {
  /** Starts the worker confined as the workload; absent (no confinement asked): as is, like an exec. */
  launcher?: WorkloadLauncher;
  /** The sandbox's default working directory (relative paths resolve against it; a file root). */
  workdir: string;
  log: Logger;
}

/** Handles one `open_tcp` with a `file` target. Never throws. */
export function openFileChannel(open: TcpOpen, conn: GatewayConnection, deps: FileTransferDeps): void {
  const channelId = open.channel_id ?? '';
  const target = open.file ?? {};
  const call = conn.client.TcpChannel(conn.metadata());
  call.write({ attach: { channel_id: channelId, session_id: conn.sessionId } });
  const spec: WorkerSpec = {
    op: target.write ? 'write' : 'read',
    path: target.path ?? '',
    archive: target.archive ?? false,
    workdir: deps.workdir,
    roots: [deps.workdir, ...EXTRA_FILE_ROOTS.filter((r) => r !== deps.workdir)],
  };
  if (running >= MAX_CONCURRENT_FILE_TRANSFERS) {
    call.write({ error: { code: Code.RESOURCE_EXHAUSTED, message: `the sandbox has ${MAX_CONCURRENT_FILE_TRANSFERS} file transfers running, the limit; retry when one has finished` } });
    call.end();
    return;
  }
  running++;
  new FileChannel(call, spec, conn, deps, () => running--).run();
}

class FileChannel {
  private readonly call: TcpChannelCall;
  private readonly spec: WorkerSpec;
  private readonly deps: FileTransferDeps;
  private readonly conn: GatewayConnection;
  private worker: PipedChild | undefined;
  private report: WorkerReport | undefined;
  private stderrText = '';
  /** The call is over (answered, or the gateway went away). */
  private over = false;
  /** The gateway sent `eof` (write: commit). */
  private gatewayEof = false;

  /** Called once, when the worker is gone (or never started). */
  private readonly done: () => void;

  constructor(call: TcpChannelCall, spec: WorkerSpec, conn: GatewayConnection, deps: FileTransferDeps, done: () => void) {
    this.done = once(done);
    this.call = call;
    this.spec = spec;
    this.conn = conn;
    this.deps = deps;
  }

  run(): void {
    const { call } = this;
    // The gateway ending its side before answering (write: before its `eof`) or failing is an abort.
    const gone = () => this.abort('the gateway closed the channel');
    call.on('error', gone);
    call.on('status', gone);
    call.on('end', () => {
      if (!this.gatewayEof || this.spec.op === 'read') gone();
    });
    const onConnAbort = () => this.abort('the supervisor connection closed');
    if (this.conn.signal.aborted) {
      this.done();
      return onConnAbort();
    }
    this.conn.signal.addEventListener('abort', onConnAbort, { once: true });

    // PATH: the launcher's fixed one, not the supervisor's environment (node runs by absolute path).
    const argv = [process.execPath, '--no-warnings', WORKER_ENTRY, JSON.stringify(this.spec)];
    const env = { PATH: SAFE_PATH };
    let worker: PipedChild;
    try {
      // A waiting spare wrapper when the launcher keeps one (no fork of the supervisor), as an exec on pipes.
      worker = this.deps.launcher?.startInSpare?.(argv, env, this.spec.workdir) ?? spawnWorker(argv, env, this.spec.workdir, this.deps.launcher);
    } catch (err) {
      this.done();
      this.fail({ code: Code.INTERNAL, message: `file transfer could not start: ${(err as Error).message}` });
      return;
    }
    this.worker = worker;
    worker.on('error', (err) => {
      if (worker.pid === undefined) this.done();
      this.fail({ code: Code.INTERNAL, message: `file transfer could not start: ${err.message}` });
    });
    worker.stdin!.on('error', () => undefined);
    worker.stdout!.on('error', () => undefined);
    worker.stderr!.on('data', (chunk: Buffer) => this.onStderr(chunk));
    // A failed read never resumed stdout: drain it so the pipe closes and 'close' can come.
    worker.on('exit', () => {
      if (!this.reading) worker.stdout!.resume();
    });
    worker.on('close', (code, signal) => {
      this.done();
      this.conn.signal.removeEventListener('abort', onConnAbort);
      this.onWorkerClosed(code, signal);
    });
    if (this.spec.op === 'read') {
      // Nothing is read from stdout before the `ok` report went out as `file_info`: the bytes
      // wait in the pipe (the worker blocks on it).
      worker.stdout!.pause();
    } else {
      this.feedWorker(worker);
    }
  }

  /** Write: the gateway's `data` frames into the worker's stdin (length-framed), with back-pressure. */
  private feedWorker(worker: PipedChild): void {
    const stdin = worker.stdin!;
    const header = (n: number) => {
      const b = Buffer.alloc(4);
      b.writeUInt32BE(n, 0);
      return b;
    };
    this.call.on('data', (frame: TcpFrame) => {
      if (this.over || stdin.writableEnded) return;
      if (frame.data && frame.data.length > 0) {
        stdin.write(header(frame.data.length));
        if (!stdin.write(frame.data)) {
          this.call.pause();
          stdin.once('drain', () => this.call.resume());
        }
      } else if (frame.eof) {
        this.gatewayEof = true;
        stdin.end(header(0));
      }
    });
  }

  private onStderr(chunk: Buffer): void {
    this.stderrText += chunk.toString('utf8');
    let nl: number;
    while ((nl = this.stderrText.indexOf('\n')) >= 0) {
      const line = this.stderrText.slice(0, nl);
      this.stderrText = this.stderrText.slice(nl + 1);
      if (!line.startsWith(REPORT_PREFIX)) {
        // Something the worker's runtime said (it could not start?): kept for the error message.
        if (line.trim()) this.deps.log.debug('file worker stderr', { line: line.slice(0, 500) });
        this.noise = (this.noise + line + '\n').slice(-2000);
        continue;
      }
      let r: WorkerReport;
      try {
        r = JSON.parse(line.slice(REPORT_PREFIX.length)) as WorkerReport;
      } catch {
        continue;
      }
      this.report = r;
      if (r.ok && this.spec.op === 'read') this.startReading(r);
    }
  }

  private noise = '';
  /** Read: stdout is being streamed to the gateway. */
  private reading = false;

  private fileInfo(r: WorkerReport): FileInfo {
    const info: FileInfo = { path: r.path ?? '', archive: r.archive ?? false };
    if (typeof r.size === 'number') info.size = r.size;
    return info;
  }

  /** Read: the path is open; tell the gateway, then stream stdout with back-pressure. */
  private startReading(r: WorkerReport): void {
    if (this.over || !this.worker) return;
    this.reading = true;
    this.call.write({ file_info: this.fileInfo(r) });
    const stdout = this.worker.stdout!;
    stdout.on('data', (chunk: Buffer) => {
      if (this.over) return;
      if (!this.call.write({ data: chunk })) {
        stdout.pause();
        this.call.once('drain', () => stdout.resume());
      }
    });
    stdout.resume();
  }

  private onWorkerClosed(code: number | null, signal: NodeJS.Signals | null): void {
    if (this.over) return;
    const r = this.report;
    if (code === 0 && r?.ok) {
      if (this.spec.op === 'write') this.call.write({ file_info: this.fileInfo(r) });
      this.finish({ eof: {} });
      return;
    }
    if (r && !r.ok) return this.fail({ code: r.code ?? Code.INTERNAL, message: r.message ?? 'file transfer failed' });
    const how = signal ? `signal ${signal}` : `status ${code}`;
    const said = this.noise.trim().split('\n').slice(-3).join(' | ');
    this.fail({ code: Code.INTERNAL, message: `the file worker ended with ${how}${said ? `: ${said}` : ''}` });
  }

  private fail(error: PathError): void {
    this.finish({ error });
  }

  /** Sends the last frame and ends our side; the gateway closes the call. */
  private finish(last: TcpFrame): void {
    if (this.over) return;
    this.over = true;
    try {
      this.call.write(last);
      this.call.end();
    } catch {
      // the call is over already
    }
    this.stopWorker();
  }

  private abort(reason: string): void {
    if (this.over) return;
    this.over = true;
    this.deps.log.debug('file transfer aborted', { reason, path: this.spec.path, op: this.spec.op });
    try {
      this.call.cancel();
    } catch {
      // over already
    }
    this.stopWorker();
  }

  /**
   * Write: stdin closes without the commit frame (unless it was sent), so the worker removes its
   * temporary file and exits; read: its stdout is dropped. A worker still there after the grace
   * period gets SIGTERM (it cleans up on that too), then SIGKILL.
   */
  private stopWorker(): void {
    const worker = this.worker;
    if (!worker || worker.exitCode !== null || worker.signalCode !== null) return;
    if (!worker.stdin!.writableEnded) worker.stdin!.end();
    worker.stdout!.destroy();
    const term = setTimeout(() => signalWorker(worker, 'SIGTERM'), this.gatewayEof ? ABORT_GRACE_MS * 6 : ABORT_GRACE_MS);
    const kill = setTimeout(() => signalWorker(worker, 'SIGKILL'), ABORT_GRACE_MS * 8);
    term.unref();
    kill.unref();
    worker.once('exit', () => {
      clearTimeout(term);
      clearTimeout(kill);
    });
  }
}

/** The worker through Node's spawn (a fork of the supervisor): no spare wrapper to take. */
function spawnWorker(argv: string[], env: Record<string, string>, cwd: string, launcher: WorkloadLauncher | undefined): PipedChild {
  const cmd = launchCommand({ argv, env, launcher });
  return spawn(cmd.file, cmd.args, { cwd, env: cmd.env, stdio: 'pipe', detached: true });
}

/** A signal for a worker still running (never for a pid already reaped, which could be reused by now). */
function signalWorker(worker: PipedChild, signal: NodeJS.Signals): void {
  if (worker.pid === undefined || worker.exitCode !== null || worker.signalCode !== null) return;
  try {
    process.kill(worker.pid, signal);
  } catch {
    // gone meanwhile
  }
}
