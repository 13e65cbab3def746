// Files in and out of a sandbox, for every front door (HTTP routes in api/rest/files.ts, the gRPC
// calls sandgate.v1.Sandgate/UploadFile and DownloadFile in files/file-grpc.ts). The entry
// replica checks the request and the access rule (the same `requireAccess` as exec), then opens a
// TCP channel with a `file` target (ExecRouter.openTcp: locally, or relayed through the owner
// replica's peer port) and moves the bytes between the caller's stream and the channel's frames
// with back-pressure on both sides: no replica ever holds more than a few chunks of a file. The
// supervisor does the file work, as the workload, with the path rules (ARCHITECTURE.md "Files").
import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import type { Principal } from '@sandgate/core';
import { GatewayError, Code } from '@sandgate/core';
import type { FileInfo, TcpFrame, TcpOpen } from '@sandgate/protocols';
import type { SandboxStore } from '@sandgate/store';
import { injectContext, type Logger } from '@sandgate/telemetry';
import type { ExecRouter, TcpPath } from '../relay/exec-router.ts';
import { requireAccess, type AccessDeps, type WorkspaceAccess } from '../api/access.ts';
import { relayFailure } from '../api/grpc-errors.ts';

export interface FileServiceDeps {
  store: SandboxStore;
  router: ExecRouter;
  workspaces: WorkspaceAccess;
  log: Logger;
}

/** What to transfer: the sandbox (by id), the path inside it, file or tar of a directory. */
export interface FileRequestInput {
  sandboxId: string;
  path: string;
  /** A directory as a tar. Download: a directory gives a tar without it too (see FileInfo.archive). */
  archive: boolean;
}

export interface FileTransferOutcome {
  /** The absolute path inside the sandbox. */
  path: string;
  /** Bytes received (the tar's size for an archive). */
  bytes: number;
  archive: boolean;
}

export interface Download {
  /** What was opened: its absolute path, whether the bytes are a tar, the size of a file. */
  info: FileInfo;
  /**
   * The bytes. Ends when everything was received; fails (destroyed with a GatewayError) if the
   * transfer breaks. Destroying it abandons the transfer (the supervisor's worker stops).
   */
  body: Readable;
}

function pathError(frame: TcpFrame): GatewayError {
  return new GatewayError((frame.error?.code ?? Code.UNAVAILABLE) as Code, frame.error?.message || 'file transfer failed');
}

const broken = (err?: unknown) => relayFailure(err, 'file transfer failed: the path to the sandbox broke');

/** The bytes of a download, read from the channel as they are consumed. */
class ChannelReader extends Readable {
  private readonly tcp: TcpPath;
  private completed = false;

  constructor(tcp: TcpPath) {
    super({ highWaterMark: 256 * 1024 });
    this.tcp = tcp;
  }

  /** One frame after `file_info`. */
  frame(f: TcpFrame): void {
    if (this.destroyed || this.completed) return;
    if (f.data) {
      if (f.data.length > 0 && !this.push(f.data)) this.tcp.stream.pause();
    } else if (f.eof) {
      this.completed = true;
      this.push(null);
      // Everything arrived: close our side, which ends the channel on every hop.
      if (!this.tcp.stream.writableEnded) this.tcp.stream.end();
    } else if (f.error) {
      this.destroy(pathError(f));
    }
  }

  /** The channel ended or failed before `eof`. */
  lost(err: GatewayError): void {
    if (!this.completed) this.destroy(err);
  }

  override _read(): void {
    this.tcp.stream.resume();
  }

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    if (!this.completed) this.tcp.abort(err ? err.message : 'the download was abandoned');
    callback(err);
  }
}

export class FileService {
  private readonly deps: FileServiceDeps;
  private readonly access: AccessDeps;

  constructor(deps: FileServiceDeps) {
    this.deps = deps;
    this.access = { store: deps.store, sessionLive: (sandboxId) => deps.router.sessionLive(sandboxId) };
  }

  /** Shape checks and the access rule; the path rules themselves are the supervisor's (one home). */
  private async prepare(req: FileRequestInput, caller: Principal, write: boolean): Promise<TcpOpen> {
    if (!req.sandboxId) throw new GatewayError(Code.INVALID_ARGUMENT, 'sandbox_id is required');
    if (typeof req.path !== 'string' || req.path === '') throw new GatewayError(Code.INVALID_ARGUMENT, 'path is required: the file (or directory) inside the sandbox');
    await requireAccess(this.access, req.sandboxId, { caller, workspaces: this.deps.workspaces });
    const open: TcpOpen = {
      channel_id: randomUUID(),
      sandbox_id: req.sandboxId,
      file: { path: req.path, write, archive: req.archive },
    };
    const trace = injectContext();
    if (trace.traceparent) open.trace_context = trace;
    return open;
  }

  /**
   * Opens a download. Resolves once the supervisor opened the path (its `file_info`), so every
   * refusal (NOT_FOUND, PERMISSION_DENIED, …) rejects here, before the caller sends anything.
   */
  async download(req: FileRequestInput, caller: Principal): Promise<Download> {
    const open = await this.prepare(req, caller, false);
    const tcp = await this.deps.router.openTcp(req.sandboxId, open);
    const up = tcp.stream;
    return new Promise<Download>((resolve, reject) => {
      let reader: ChannelReader | undefined;
      let refused = false;
      const fail = (err: GatewayError) => {
        if (reader) return reader.lost(err);
        if (refused) return;
        // Settled before the abort: aborting emits the channel's own error, which must not win.
        refused = true;
        reject(err);
        tcp.abort(err.message);
      };
      up.on('data', (f: TcpFrame) => {
        if (reader) return reader.frame(f);
        if (f.file_info) {
          reader = new ChannelReader(tcp);
          resolve({ info: f.file_info, body: reader });
        } else if (f.error) {
          fail(pathError(f));
        } else {
          fail(new GatewayError(Code.INTERNAL, 'file transfer failed: the supervisor sent data before saying what it opened'));
        }
      });
      up.on('end', () => fail(broken()));
      up.on('error', (err: unknown) => fail(broken(err)));
      up.on('cancelled', () => fail(broken()));
      const early = tcp.failure();
      if (early) fail(broken(early));
      up.resume();
    });
  }

  /**
   * Streams `body` into a file (or, with `archive`, a tar into a directory). `body` ending is the
   * commit; `body` failing or closing before its end (the client went away) aborts the transfer,
   * and the supervisor then leaves nothing at the path. Resolves with what was written.
   */
  async upload(req: FileRequestInput, caller: Principal, body: Readable): Promise<FileTransferOutcome> {
    // Until the channel is open the body waits (it is never buffered here).
    body.pause();
    const open = await this.prepare(req, caller, true);
    if (body.destroyed && !body.readableEnded) throw new GatewayError(Code.CANCELLED, 'the client went away before the upload started');
    const tcp = await this.deps.router.openTcp(req.sandboxId, open);
    if (body.destroyed && !body.readableEnded) {
      tcp.abort('the client went away');
      throw new GatewayError(Code.CANCELLED, 'the client went away before the upload started');
    }
    const up = tcp.stream;
    return new Promise<FileTransferOutcome>((resolve, reject) => {
      let settled = false;
      let eofSent = false;
      let sent = 0;
      let info: FileInfo | undefined;
      const settle = (err: GatewayError | null) => {
        if (settled) return;
        settled = true;
        body.off('data', onData);
        if (err) {
          tcp.abort(err.message);
          // Whatever the client still sends is not wanted any more.
          body.resume();
          return reject(err);
        }
        if (!up.writableEnded) up.end();
        resolve({ path: info?.path ?? req.path, bytes: info?.size ?? sent, archive: req.archive });
      };
      const onData = (chunk: Buffer) => {
        if (settled || chunk.length === 0) return;
        sent += chunk.length;
        if (!up.write({ data: chunk })) {
          body.pause();
          up.once('drain', () => {
            if (!settled) body.resume();
          });
        }
      };
      up.on('data', (f: TcpFrame) => {
        if (f.error) settle(pathError(f));
        else if (f.file_info) info = f.file_info;
        else if (f.eof) settle(eofSent && info ? null : new GatewayError(Code.INTERNAL, 'file transfer failed: the supervisor ended the upload before it was committed'));
      });
      up.on('end', () => settle(broken()));
      up.on('error', (err: unknown) => settle(broken(err)));
      up.on('cancelled', () => settle(broken()));
      const early = tcp.failure();
      if (early) return settle(broken(early));
      up.resume();
      body.on('data', onData);
      body.once('end', () => {
        if (settled) return;
        eofSent = true;
        up.write({ eof: {} });
      });
      body.once('error', () => settle(new GatewayError(Code.CANCELLED, 'the upload was aborted by the client: nothing was written')));
      body.once('close', () => {
        if (!body.readableEnded) settle(new GatewayError(Code.CANCELLED, 'the upload was aborted by the client: nothing was written'));
      });
      body.resume();
    });
  }
}
