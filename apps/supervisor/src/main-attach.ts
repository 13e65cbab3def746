// A client attached to the main process over one ExecChannel: it gets the journal's replay, then
// live output, then — once the gateway has durably recorded the exit — the exit itself. Going
// away only detaches: the main process is never killed by an attach channel ending.
import type { GatewayCall } from './gateway-client.ts';
import type { ExecFrame, ExecStart } from '@sandgate/protocols';
import type { GatewayConnection } from './control-session.ts';
import { JournalFollower } from './journal-follower.ts';
import type { Logger } from '@sandgate/telemetry/log';
import type { MainExit, MainProcess } from './main-process.ts';

export interface MainAttachOptions {
  start: ExecStart;
  conn: GatewayConnection;
  main: MainProcess;
  /** Resolves when the main process's exit may be shown to clients (the gateway acknowledged it). */
  exitReleased: Promise<MainExit>;
  /** Only one attached client at a time feeds the main process's stdin. */
  stdinLease: { holder: MainAttach | null };
  log: Logger;
}

export class MainAttach {
  readonly execId: string;
  /** Resolves once the exit reached the client's channel, or the channel went away. */
  readonly delivered: Promise<void>;
  private resolveDelivered!: () => void;
  private readonly opts: MainAttachOptions;
  private call: GatewayCall<ExecFrame, ExecFrame> | undefined;
  private follower: JournalFollower | undefined;
  private closed = false;

  constructor(opts: MainAttachOptions) {
    this.opts = opts;
    this.execId = opts.start.exec_id ?? '';
    this.delivered = new Promise((resolve) => (this.resolveDelivered = resolve));
  }

  run(): void {
    const { conn, main, exitReleased, stdinLease } = this.opts;
    const call = conn.client.ExecChannel(conn.metadata());
    this.call = call;
    const gone = () => this.detach();
    call.on('error', gone);
    call.on('end', gone);
    call.on('status', gone);
    call.on('data', (frame: ExecFrame) => this.onFrame(frame));
    call.write({ attach: { exec_id: this.execId, session_id: conn.sessionId } });
    if (!stdinLease.holder) stdinLease.holder = this;
    this.follower = new JournalFollower(main, exitReleased, {
      write: (entry, resume) => {
        const ok = call.write(entry.stream === 'stdout' ? { stdout: entry.data } : { stderr: entry.data });
        if (!ok) call.once('drain', resume);
        return ok;
      },
      exit: (exit) => {
        call.write({ exit: { exit_code: exit.exitCode, timed_out: false, signal: exit.signal } });
        call.end();
        // Delivered once the gateway closes the call (it does after passing the exit on).
      },
    });
    this.follower.start();
  }

  private onFrame(frame: ExecFrame): void {
    if (this.closed) return;
    if (frame.stdin && this.opts.stdinLease.holder === this) this.opts.main.writeInput(frame.stdin);
    else if (frame.resize) this.opts.main.resize(frame.resize.cols ?? 0, frame.resize.rows ?? 0);
  }

  private detach(): void {
    if (this.closed) return;
    this.closed = true;
    this.follower?.stop();
    if (this.opts.stdinLease.holder === this) this.opts.stdinLease.holder = null;
    this.resolveDelivered();
  }

  /** Shutdown: drop the channel without an exit. */
  abort(): void {
    try {
      this.call?.cancel();
    } catch {
      // already finished
    }
    this.detach();
  }
}
