// sandgate sandbox upload NAME LOCAL [REMOTE] / sandgate sandbox download NAME REMOTE [LOCAL]:
// files in and out of a sandbox over sandgate.v1.Sandgate/UploadFile and DownloadFile (gRPC, so
// every connection setting — TLS, token, --workspace — works as for exec). Directories travel as
// tar automatically: a local directory is packed on upload, a remote one arrives as a tar and is
// extracted with the same rules the sandbox applies (a sandbox is untrusted: its tar may not
// write outside LOCAL, through a symlink, or with `..`). Streams both ways, never a whole file in
// memory. `-` as LOCAL is stdin (upload) or stdout (download of a file).
import fs from 'node:fs';
import path from 'node:path';
import { once } from 'node:events';
import { PassThrough, Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Metadata, status as Status, type ClientReadableStream, type ClientWritableStream, type ServiceError } from '@grpc/grpc-js';
import type { DownloadFileFrame, FileTransferResult, UploadFileFrame } from '@sandgate/protocols';
import { extractTar, packDirectory } from '@sandgate/supervisor/file-tar';
import { UsageError, parseCommand } from '../args.ts';
import { isServiceError, type SandgateClient } from '../client.ts';
import type { CommandContext } from '../context.ts';
import { connectionFlags, GATEWAY_OPTION, withClient } from './common.ts';

/** The flags each accepts (the usage test checks each is documented). */
export const OPTIONS = { ...GATEWAY_OPTION, workspace: { type: 'string' } } as const;

type UploadCall = ClientWritableStream<UploadFileFrame>;
type UploadMethod = (md: Metadata, cb: (err: ServiceError | null, res?: FileTransferResult) => void) => UploadCall;
type DownloadMethod = (req: object, md: Metadata) => ClientReadableStream<DownloadFileFrame>;

/** The sandbox's id (file calls take it, like exec), or null after saying it does not exist. */
async function sandboxId(client: SandgateClient, name: string, workspace: string | undefined): Promise<string | null> {
  try {
    const id = (await client.getSandbox(name, workspace)).metadata?.id;
    if (!id) throw new Error(`sandbox ${name} has no id`);
    return id;
  } catch (err) {
    if (isServiceError(err) && err.code === Status.NOT_FOUND) {
      process.stderr.write(`error: sandbox ${name} not found\n`);
      return null;
    }
    throw err;
  }
}

export async function runUpload(argv: string[], ctx: CommandContext): Promise<number> {
  const { values, positionals } = parseCommand(argv, OPTIONS, 'sandbox upload');
  const [name, local, remoteArg, extra] = positionals;
  if (name === undefined || local === undefined) throw new UsageError('NAME and LOCAL are required: sandgate sandbox upload NAME LOCAL [REMOTE]', 'sandbox upload');
  if (extra !== undefined) throw new UsageError(`unexpected argument '${extra}'`, 'sandbox upload');
  if (local === '-' && remoteArg === undefined) throw new UsageError('uploading stdin (-) needs a REMOTE path', 'sandbox upload');
  let archive = false;
  if (local !== '-') {
    let st: fs.Stats;
    try {
      st = fs.statSync(local);
    } catch (err) {
      throw new UsageError(`cannot read ${local}: ${(err as Error).message}`, 'sandbox upload');
    }
    archive = st.isDirectory();
  }
  // Default: the same name in the sandbox's working directory.
  const remote = remoteArg ?? path.basename(path.resolve(local));
  return withClient(ctx, connectionFlags(values), async (client) => {
    const id = await sandboxId(client, name, values.workspace);
    if (!id) return 1;
    let source: Readable;
    let packed: Promise<void> | undefined;
    if (local === '-') source = process.stdin;
    else if (archive) {
      const out = new PassThrough({ highWaterMark: 256 * 1024 });
      packed = packDirectory(local, out, local);
      source = out;
    } else source = fs.createReadStream(local, { highWaterMark: 256 * 1024 });

    let settle!: (r: { err: ServiceError | null; res?: FileTransferResult }) => void;
    const answered = new Promise<{ err: ServiceError | null; res?: FileTransferResult }>((resolve) => (settle = resolve));
    const call = (client.raw as unknown as { UploadFile: UploadMethod }).UploadFile(new Metadata(), (err, res) => settle({ err, res }));
    let refused = false;
    void answered.then(() => (refused = true));
    call.write({ start: { sandbox_id: id, path: remote, archive } });
    for await (const chunk of source) {
      // A refusal (path rules, access) arrives while we still send: stop reading at once.
      if (refused) break;
      if (!call.write({ data: chunk as Buffer })) await Promise.race([once(call, 'drain'), answered]);
    }
    if (!refused) call.end();
    if (packed) await packed.catch(() => undefined);
    const { err, res } = await answered;
    if (err) throw err;
    process.stdout.write(`uploaded ${res?.bytes ?? 0} bytes to ${res?.path ?? remote}${res?.archive ? ' (directory, as tar)' : ''}\n`);
    return 0;
  });
}

export async function runDownload(argv: string[], ctx: CommandContext): Promise<number> {
  const { values, positionals } = parseCommand(argv, OPTIONS, 'sandbox download');
  const [name, remote, localArg, extra] = positionals;
  if (name === undefined || remote === undefined) throw new UsageError('NAME and REMOTE are required: sandgate sandbox download NAME REMOTE [LOCAL]', 'sandbox download');
  if (extra !== undefined) throw new UsageError(`unexpected argument '${extra}'`, 'sandbox download');
  return withClient(ctx, connectionFlags(values), async (client) => {
    const id = await sandboxId(client, name, values.workspace);
    if (!id) return 1;
    const call = (client.raw as unknown as { DownloadFile: DownloadMethod }).DownloadFile({ sandbox_id: id, path: remote, archive: false }, new Metadata());
    const failed = new Promise<never>((_, reject) => call.once('error', reject));
    failed.catch(() => undefined);
    const [first] = (await Promise.race([once(call, 'data'), failed])) as [DownloadFileFrame];
    const info = first.info;
    if (!info) throw new Error('the gateway sent data before saying what it opened');
    // The rest of the call's data frames as bytes, with back-pressure.
    const bytes = new Readable({
      highWaterMark: 256 * 1024,
      read: () => void call.resume(),
    });
    call.on('data', (f: DownloadFileFrame) => {
      if (f.data && f.data.length > 0 && !bytes.push(f.data)) call.pause();
    });
    call.on('end', () => bytes.push(null));
    call.on('error', (err) => bytes.destroy(err));
    const base = path.posix.basename(info.path ?? remote) || 'download';
    if (info.archive) {
      const dir = localArg ?? base;
      if (dir === '-') throw new UsageError(`${remote} is a directory: give a LOCAL directory to extract it into`, 'sandbox download');
      fs.mkdirSync(dir, { recursive: true });
      const n = await extractTar(bytes, fs.realpathSync(dir));
      process.stderr.write(`downloaded ${info.path} (directory, ${n} bytes of tar) into ${dir}\n`);
      return 0;
    }
    if (localArg === '-') {
      await pipeline(bytes, process.stdout, { end: false });
      return 0;
    }
    let target = localArg ?? base;
    if (fs.existsSync(target) && fs.statSync(target).isDirectory()) target = path.join(target, base);
    // Written beside the target and renamed: an interrupted download leaves no half file.
    const tmp = `${target}.sandgate-download`;
    try {
      await pipeline(bytes, fs.createWriteStream(tmp));
      fs.renameSync(tmp, target);
    } catch (err) {
      fs.rmSync(tmp, { force: true });
      throw err;
    }
    process.stderr.write(`downloaded ${info.path} (${info.size ?? 0} bytes) to ${target}\n`);
    return 0;
  });
}
