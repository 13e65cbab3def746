// One SSH "session" channel: collects its setup requests (pty-req, env), then becomes exactly one
// of: a shell, an exec, the sftp subsystem (each a ChannelProcess), or the openshell-main
// subsystem (a MainChannel). Later requests (window-change, signal) go to whichever it became.
import fs from 'node:fs';
import os from 'node:os';
import { randomUUID } from 'node:crypto';
import type { PseudoTtyInfo, ServerChannel, Session } from 'ssh2';
import { ENV_PREFIX } from '../config.ts';
import type { Logger } from '@sandgate/telemetry/log';
import { ChannelProcess, type PtyRequest } from './channel-process.ts';
import { MainChannel, type MainChannelDeps } from './main-channel.ts';
import type { WorkloadLauncher } from '../workload/launcher.ts';

export const SFTP_SERVER = '/usr/lib/openssh/sftp-server';
export const MAIN_SUBSYSTEM = 'openshell-main';
/** Env request that makes an openshell-main attachment read-only (upstream's name). */
export const MAIN_READ_ONLY_ENV = 'OPENSHELL_MAIN_READ_ONLY';

const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** What a channel turned into; the connection closes it when it goes away. */
export interface ChannelUnit {
  close(reason: string): void;
}

export interface SessionContext {
  sandboxEnv: Record<string, string>;
  main: MainChannelDeps;
  log: Logger;
  /** Tracks the unit with the connection (closed with it); returns false if the connection is gone. */
  track(unit: ChannelUnit): boolean;
  untrack(unit: ChannelUnit): void;
  /** Takes one process slot (per sandbox); false when the sandbox is at its limit. */
  takeProcessSlot(): boolean;
  releaseProcessSlot(): void;
  /** Attachments to the main process (terminal delivery waits for them). */
  mainChannels: Set<MainChannel>;
  /** Confines the processes channels start; absent: started as is. */
  launcher?: WorkloadLauncher;
}

function loginShell(): string {
  for (const shell of ['/bin/bash', '/bin/sh']) {
    try {
      fs.accessSync(shell, fs.constants.X_OK);
      return shell;
    } catch {
      // try the next
    }
  }
  return '/bin/sh';
}

function currentUser(): string {
  try {
    return os.userInfo().username;
  } catch {
    return 'root';
  }
}

export function handleSession(session: Session, ctx: SessionContext): void {
  let pty: PtyRequest | undefined;
  const env: Record<string, string> = {};
  let proc: ChannelProcess | undefined;
  let mainChannel: MainChannel | undefined;
  let started = false;

  session.on('pty', (accept, reject, info: PseudoTtyInfo) => {
    if (started) return reject?.();
    pty = { cols: info.cols, rows: info.rows, term: info.term || 'xterm-256color' };
    accept?.();
  });
  session.on('window-change', (accept, _reject, info: { cols: number; rows: number }) => {
    if (pty) pty = { ...pty, cols: info.cols, rows: info.rows };
    proc?.resize(info.cols, info.rows);
    mainChannel?.resize(info.cols, info.rows);
    accept?.();
  });
  session.on('env', (accept, reject, info: { key: string; val: string }) => {
    // SANDGATE_* belongs to the supervisor (the exec tag above all): never from a client.
    if (started || !ENV_KEY.test(info.key) || info.key.startsWith(ENV_PREFIX)) return reject?.();
    env[info.key] = info.val;
    accept?.();
  });
  session.on('signal', (accept, _reject, info: { name: string }) => {
    const name = String(info.name ?? '').replace(/^SIG/, '');
    proc?.signal(name);
    mainChannel?.signal(name);
    accept?.();
  });
  session.on('auth-agent', (_accept, reject) => reject?.());
  session.on('x11', (_accept, reject) => reject?.());

  const startProcess = (channel: ServerChannel, argv: string[], withPty: PtyRequest | undefined) => {
    const shell = argv[0]!;
    const user = ctx.launcher?.userName ?? currentUser();
    const fullEnv: Record<string, string> = {
      ...ctx.sandboxEnv,
      USER: ctx.sandboxEnv.USER ?? user,
      LOGNAME: ctx.sandboxEnv.LOGNAME ?? user,
      SHELL: ctx.sandboxEnv.SHELL ?? shell,
      ...env,
      TERM: withPty ? withPty.term : (env.TERM ?? 'dumb'),
    };
    if (!ctx.takeProcessSlot()) {
      channel.stderr.write('sandgate: too many processes started over SSH in this sandbox; close some sessions and retry\n');
      channel.exit(1);
      channel.end();
      return;
    }
    const p = new ChannelProcess({
      channel,
      execId: `ssh-${randomUUID()}`,
      argv,
      cwd: process.cwd(),
      env: fullEnv,
      pty: withPty,
      log: ctx.log,
      launcher: ctx.launcher,
    });
    proc = p;
    if (!ctx.track(p)) {
      ctx.releaseProcessSlot();
      return;
    }
    void p.done.then(() => {
      ctx.untrack(p);
      ctx.releaseProcessSlot();
    });
    p.start();
  };

  session.on('shell', (accept) => {
    started = true;
    const channel = accept();
    if (!channel) return;
    const shell = loginShell();
    // A login shell, as sshd starts one (interactive when it has a terminal).
    startProcess(channel, [shell, '-l'], pty);
  });

  session.on('exec', (accept, _reject, info: { command: string }) => {
    started = true;
    const channel = accept();
    if (!channel) return;
    startProcess(channel, [loginShell(), '-c', info.command], pty);
  });

  session.on('subsystem', (accept, reject, info: { name: string }) => {
    if (info.name === 'sftp') {
      started = true;
      const channel = accept();
      if (!channel) return;
      try {
        fs.accessSync(SFTP_SERVER, fs.constants.X_OK);
      } catch {
        channel.stderr.write(`sandgate: sftp is not available in this sandbox: ${SFTP_SERVER} is not installed (Debian package openssh-sftp-server)\n`);
        channel.exit(127);
        channel.end();
        return;
      }
      // sftp speaks binary on pipes, never on a terminal.
      startProcess(channel, [SFTP_SERVER], undefined);
      return;
    }
    if (info.name === MAIN_SUBSYSTEM) {
      started = true;
      const channel = accept();
      if (!channel) return;
      const m = new MainChannel(channel, ctx.main);
      mainChannel = m;
      if (!ctx.track(m)) return m.detach('connection gone');
      ctx.mainChannels.add(m);
      void m.delivered.then(() => {
        ctx.mainChannels.delete(m);
        ctx.untrack(m);
      });
      m.start({ readOnly: env[MAIN_READ_ONLY_ENV] === '1', cols: pty?.cols, rows: pty?.rows });
      return;
    }
    reject?.();
  });

  // The session channel closing ends whatever it became (a process is killed, an attachment detached).
  session.on('close', () => {
    void proc?.close('channel closed by the client');
    mainChannel?.detach('channel closed by the client');
  });
}
