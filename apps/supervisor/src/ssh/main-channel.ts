// The `openshell-main` subsystem: an SSH channel attached to the sandbox's main process, like
// MainAttach is for an exec channel. It replays the output journal (≥ 1 MiB), follows it live,
// and — once the gateway has durably recorded the main process's exit — ends with that exit
// status. One attachment at a time owns the main process's stdin (the lease); the others are
// read-only and told so. Ctrl-P Ctrl-Q detaches. Nothing an attachment does or suffers (detach,
// channel close, connection drop) ever kills the main process.
import type { ServerChannel } from 'ssh2';
import type { Logger } from '@sandgate/telemetry/log';
import type { MainExit, MainProcess } from '../main-process.ts';
import { DetachFilter } from './detach-filter.ts';
import { JournalFollower } from '../journal-follower.ts';

export interface MainChannelDeps {
  main: MainProcess;
  /** Resolves when the main process's exit may be shown to clients (the gateway acknowledged it). */
  exitReleased: Promise<MainExit>;
  /** Shared with exec attachments: one holder feeds the main process's stdin. */
  stdinLease: { holder: object | null };
  log: Logger;
}

export const READ_ONLY_MESSAGE = 'sandgate: the main process already has an input owner; attached read-only\r\n';

/** Signals an attached client may send to the main process group (as upstream allows). */
const MAIN_SIGNALS = new Set(['HUP', 'INT', 'KILL', 'QUIT', 'TERM', 'USR1', 'USR2']);

export class MainChannel {
  /** Resolves once the exit reached the channel, or the attachment ended without it. */
  readonly delivered: Promise<void>;
  private resolveDelivered!: () => void;
  private readonly channel: ServerChannel;
  private readonly deps: MainChannelDeps;
  private readonly filter = new DetachFilter();
  private follower: JournalFollower | undefined;
  private finishing = false;
  private closed = false;

  constructor(channel: ServerChannel, deps: MainChannelDeps) {
    this.channel = channel;
    this.deps = deps;
    this.delivered = new Promise((resolve) => (this.resolveDelivered = resolve));
  }

  get ownsInput(): boolean {
    return this.deps.stdinLease.holder === this;
  }

  start(opts: { readOnly: boolean; cols?: number; rows?: number }): void {
    const { main, exitReleased, stdinLease } = this.deps;
    if (!opts.readOnly && !stdinLease.holder) stdinLease.holder = this;
    else if (!opts.readOnly) this.channel.stderr.write(READ_ONLY_MESSAGE);
    if (this.ownsInput && opts.cols && opts.rows) main.resize(opts.cols, opts.rows);
    this.channel.on('data', (data: Buffer) => this.onInput(data));
    this.channel.on('close', () => this.detach('channel closed'));
    this.follower = new JournalFollower(main, exitReleased, {
      write: (entry, resume) => {
        const stream = entry.stream === 'stdout' ? this.channel : this.channel.stderr;
        try {
          if (stream.write(entry.data)) return true;
        } catch {
          this.detach('channel write failed');
          return false;
        }
        stream.once('drain', resume);
        return false;
      },
      exit: (exit) => {
        this.deps.log.info('main process exit delivered to an ssh attachment', { exit_code: exit.exitCode });
        this.endChannel(exit.exitCode);
      },
    });
    this.follower.start();
  }

  private onInput(data: Buffer): void {
    if (this.closed) return;
    const { forward, detach } = this.filter.push(data);
    if (forward.length > 0 && this.ownsInput) this.deps.main.writeInput(forward);
    if (detach) {
      this.deps.log.info('client detached from the main process');
      this.release();
      this.endChannel(0);
    }
  }

  resize(cols: number, rows: number): void {
    if (this.ownsInput && !this.closed) this.deps.main.resize(cols, rows);
  }

  signal(name: string): void {
    const pid = this.deps.main.pid;
    if (!this.ownsInput || this.closed || pid <= 1 || this.deps.main.exit || !MAIN_SIGNALS.has(name)) return;
    try {
      process.kill(-pid, `SIG${name}` as NodeJS.Signals);
    } catch {
      // gone already
    }
  }

  /** Flushes what was written, then exit-status, EOF, close. Delivered once handed on. */
  private endChannel(exitCode: number): void {
    if (this.finishing || this.closed) return;
    this.finishing = true;
    this.follower?.stop();
    const channel = this.channel;
    channel.write(Buffer.alloc(0), () => {
      try {
        channel.exit(exitCode);
        channel.end();
      } catch {
        // the client is gone
      }
      this.detach('exit delivered');
    });
  }

  private release(): void {
    if (this.deps.stdinLease.holder === this) this.deps.stdinLease.holder = null;
  }

  /** The connection or channel went away: detach (the main process keeps running). */
  close(reason: string): void {
    this.detach(reason);
  }

  /** Ends the attachment (never the main process). Idempotent. */
  detach(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.follower?.stop();
    this.release();
    this.deps.log.debug('ssh main attachment ended', { reason });
    this.resolveDelivered();
  }
}
