// Wires a bidi ExecSandboxInteractive call to this process's stdio: stdin → `stdin` messages
// (stdin EOF → client half-close), stdout/stderr events → our stdout/stderr, with back-pressure
// both ways; raw mode and SIGWINCH resizes for --tty; SIGINT cancels the call (exit 130).
import type { ClientDuplexStream, ServiceError, StatusObject } from '@grpc/grpc-js';
import type { ExecSandboxEvent, ExecSandboxInput, ExecSandboxRequest } from '@sandgate/protocols';
import { statusName } from './client.ts';
import { EXIT_FAILURE, EXIT_INTERRUPTED } from './errors.ts';

export type ExecCall = ClientDuplexStream<ExecSandboxInput, ExecSandboxEvent>;

export interface ExecStdio {
  stdin: NodeJS.ReadStream;
  stdout: NodeJS.WriteStream;
  stderr: NodeJS.WriteStream;
}

const DEFAULT_COLS = 80;
const DEFAULT_ROWS = 24;

/** The terminal size to announce: stdout's when it is a terminal, else 80x24. */
export function terminalSize(stdout: { isTTY?: boolean; columns?: number; rows?: number }): { cols: number; rows: number } {
  return {
    cols: stdout.isTTY && stdout.columns ? stdout.columns : DEFAULT_COLS,
    rows: stdout.isTTY && stdout.rows ? stdout.rows : DEFAULT_ROWS,
  };
}

/**
 * Starts the exec on `call` and pumps stdio until the call finishes. Resolves with the exit
 * status for the CLI: the command's exit code, 1 on a stream error (reported on stderr), or 130
 * after SIGINT.
 */
export function pumpExec(call: ExecCall, start: ExecSandboxRequest, io: ExecStdio): Promise<number> {
  return new Promise((resolve) => {
    const tty = Boolean(start.tty);
    let exitCode: number | undefined;
    let streamError: ServiceError | undefined;
    let ended = false;
    let gotStatus = false;
    let inputOpen = true;
    let settled = false;
    let pausedFor = 0; // outputs we are waiting to drain

    const rawMode = tty && io.stdin.isTTY === true;
    const restoreTerminal = () => {
      if (rawMode && io.stdin.isTTY) io.stdin.setRawMode(false);
    };
    if (rawMode) {
      io.stdin.setRawMode(true);
      process.once('exit', restoreTerminal);
    }

    const finish = (code: number) => {
      if (settled) return;
      settled = true;
      inputOpen = false;
      io.stdin.off('data', onStdin);
      io.stdin.off('end', onStdinEnd);
      io.stdin.off('error', onStdinEnd);
      io.stdin.pause();
      process.off('SIGINT', onSigint);
      process.off('SIGWINCH', onResize);
      restoreTerminal();
      resolve(code);
    };

    const settleIfDone = () => {
      // Already settled (e.g. Ctrl-C exits 130): the CANCELLED that follows is ours, not news.
      if (settled || !gotStatus || !ended) return;
      if (streamError) {
        io.stderr.write(`error: ${statusName(streamError.code)}: ${streamError.details || streamError.message}\n`);
        finish(EXIT_FAILURE);
      } else if (exitCode === undefined) {
        io.stderr.write('error: stream ended without an exit event\n');
        finish(EXIT_FAILURE);
      } else {
        finish(exitCode);
      }
    };

    // Output: pause the call while a destination is full.
    const forward = (dest: NodeJS.WriteStream, data: Buffer | undefined) => {
      if (!data || data.length === 0) return;
      if (!dest.write(data)) {
        pausedFor++;
        call.pause();
        dest.once('drain', () => {
          if (--pausedFor === 0) call.resume();
        });
      }
    };
    call.on('data', (event: ExecSandboxEvent) => {
      if (event.stdout) forward(io.stdout, event.stdout.data);
      else if (event.stderr) forward(io.stderr, event.stderr.data);
      else if (event.exit) exitCode = event.exit.exit_code ?? 0;
    });
    call.on('end', () => {
      ended = true;
      settleIfDone();
    });
    call.on('error', (err: ServiceError) => {
      streamError ??= err;
      // After an error grpc-js has already pushed the end of the stream; make sure it flows.
      call.resume();
    });
    call.on('status', (_status: StatusObject) => {
      gotStatus = true;
      // The end of the readable side follows once buffered events are consumed.
      setImmediate(settleIfDone);
    });

    // Input.
    const send = (message: ExecSandboxInput): boolean => (inputOpen ? call.write(message) : true);
    const onStdin = (chunk: Buffer | string) => {
      const data = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      if (!send({ stdin: data })) {
        io.stdin.pause();
        call.once('drain', () => {
          if (!settled) io.stdin.resume();
        });
      }
    };
    // The protocol has no stdin-EOF message: the client half-close is EOF.
    const onStdinEnd = () => {
      if (!inputOpen) return;
      inputOpen = false;
      call.end();
    };
    const onResize = () => {
      if (inputOpen && tty) send({ resize: terminalSize(io.stdout) });
    };
    const onSigint = () => {
      if (settled) return;
      streamError = undefined;
      call.cancel();
      finish(EXIT_INTERRUPTED);
    };

    process.on('SIGINT', onSigint);
    if (tty) process.on('SIGWINCH', onResize);

    call.write({ start });
    io.stdin.on('data', onStdin);
    io.stdin.once('end', onStdinEnd);
    io.stdin.once('error', onStdinEnd);
    io.stdin.resume();
  });
}
