// sandgate.v1.Sandgate/UploadFile and DownloadFile: the gRPC face of FileService, for the CLI
// (`sandgate sandbox upload|download`), so every client configuration (TLS, token, --workspace)
// works as for any other call. Adapters only: the frames of the calls <-> FileService's streams.
import { Readable } from 'node:stream';
import type { sendUnaryData, ServerReadableStream, ServerWritableStream } from '@grpc/grpc-js';
import { GatewayError, Code, type Principal } from '@sandgate/core';
import type { DownloadFileFrame, FileRequest, FileTransferResult, UploadFileFrame } from '@sandgate/protocols';
import type { Logger } from '@sandgate/telemetry';
import { limitReadAhead } from '@sandgate/relay';
import { toServiceError } from '../api/grpc-errors.ts';
import type { FileService } from './file-service.ts';

/** The `data` frames of an UploadFile call as a byte stream: the half-close ends it, a cancel destroys it. */
class UploadBody extends Readable {
  private readonly call: ServerReadableStream<UploadFileFrame, FileTransferResult>;
  constructor(call: ServerReadableStream<UploadFileFrame, FileTransferResult>) {
    super({ highWaterMark: 256 * 1024 });
    this.call = call;
    call.on('data', (f: UploadFileFrame) => {
      if (f.start) return this.destroy(new GatewayError(Code.INVALID_ARGUMENT, 'start may only be the first UploadFile frame'));
      if (f.data && f.data.length > 0 && !this.push(f.data)) call.pause();
    });
    call.on('end', () => this.push(null));
    call.on('cancelled', () => this.destroy());
    call.on('error', () => this.destroy());
  }
  override _read(): void {
    this.call.resume();
  }
}

export function uploadFileHandler(files: FileService, log: Logger) {
  return (call: ServerReadableStream<UploadFileFrame, FileTransferResult>, callback: sendUnaryData<FileTransferResult>, caller: Principal): void => {
    let answered = false;
    const answer = (err: unknown, res?: FileTransferResult) => {
      if (answered) return;
      answered = true;
      if (err) callback(toServiceError(err, log));
      else callback(null, res);
    };
    // Read one message ahead, not 16 of up to 4 MiB each (libs/relay's limitReadAhead).
    limitReadAhead(call);
    const onEmpty = () => answer(new GatewayError(Code.INVALID_ARGUMENT, 'UploadFile needs a start frame (sandbox_id, path) first'));
    call.once('end', onEmpty);
    call.once('data', (first: UploadFileFrame) => {
      call.off('end', onEmpty);
      call.pause();
      if (!first.start) return answer(new GatewayError(Code.INVALID_ARGUMENT, 'the first UploadFile frame must be start (sandbox_id, path)'));
      const req = first.start;
      files
        .upload({ sandboxId: req.sandbox_id ?? '', path: req.path ?? '', archive: req.archive ?? false }, caller, new UploadBody(call))
        .then((r) => answer(null, { path: r.path, bytes: r.bytes, archive: r.archive }), (err: unknown) => answer(err));
    });
  };
}

export function downloadFileHandler(files: FileService, log: Logger) {
  return (call: ServerWritableStream<FileRequest, DownloadFileFrame>, _callback: unknown, caller: Principal): void => {
    const req = call.request;
    files.download({ sandboxId: req.sandbox_id ?? '', path: req.path ?? '', archive: req.archive ?? false }, caller).then(
      ({ info, body }) => {
        if (call.cancelled) return body.destroy();
        call.on('cancelled', () => body.destroy());
        call.write({ info });
        body.on('data', (chunk: Buffer) => {
          if (!call.write({ data: chunk })) {
            body.pause();
            call.once('drain', () => body.resume());
          }
        });
        body.once('end', () => call.end());
        body.once('error', (err: unknown) => call.emit('error', toServiceError(err, log)));
      },
      (err: unknown) => call.emit('error', toServiceError(err, log)),
    );
  };
}
