// The supervisor's side of the netns agent (see netns-agent.ts for why it exists): starts it in a
// new network namespace, takes the egress proxy's listening socket from it, and asks it for
// connections to loopback ports inside the sandbox.
//
// The agent's death is fatal for the supervisor (the caller's onDeath): workload processes join
// the namespace through /proc/<agent pid>/ns/net, so no new workload could be started, and a new
// agent could not rejoin the old namespace by that path. Every running workload process shares
// that namespace, so starting over in a new one would split the sandbox's loopback in two.
// Exiting lets the driver see a dead sandbox instead of one that silently lost its network.
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants } from 'node:fs';
import { createInterface } from 'node:readline';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Logger } from '@sandgate/telemetry/log';

const AGENT_SCRIPT = path.join(path.dirname(fileURLToPath(import.meta.url)), 'netns-agent.ts');
/**
 * The same agent in C (native/sandgate-netns.c, built at `npm install`): enters the namespace
 * itself and speaks the same protocol, in a few hundred KiB instead of a second Node process.
 * Without it (a checkout installed with --ignore-scripts) the Node agent runs, and the log says so.
 */
export const NATIVE_NETNS_AGENT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../native/build/sandgate-netns');
// Generous: the Node agent is a second Node process, and on a loaded host (the chaos suite, 20
// sandboxes starting at once on 2 cores) its start-up alone took over 15 s.
const READY_TIMEOUT_MS = 60_000;
/** Beyond the connect timeout the agent applies: only guards against a lost answer. */
const DIAL_ANSWER_MARGIN_MS = 2_000;
/** What the agent is started with: enough to find `ip`, nothing of the supervisor's. */
const AGENT_ENV = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' };

function executable(file: string): boolean {
  try {
    accessSync(file, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** A failed dial, with the errno-style code the agent saw (ECONNREFUSED…). */
export class DialError extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.code = code;
  }
}

interface PendingDial {
  resolve(socket: net.Socket): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

export class NetnsAgent {
  readonly pid: number;
  /** What workload processes join (`nsenter --net=`). */
  readonly netnsPath: string;
  /** The egress proxy's listening socket, inside the namespace on 127.0.0.1:port. */
  readonly proxyServer: net.Server;
  readonly proxyPort: number;
  private readonly child: ChildProcess;
  private readonly pending = new Map<number, PendingDial>();
  private nextId = 1;
  private stopping = false;
  private dead = false;

  private constructor(child: ChildProcess, server: net.Server, port: number) {
    this.child = child;
    this.pid = child.pid!;
    this.netnsPath = `/proc/${child.pid}/ns/net`;
    this.proxyServer = server;
    this.proxyPort = port;
  }

  /**
   * Starts the agent in a new network namespace; resolves once it handed over the proxy socket.
   * `agentBinary`: the native agent to run, null for the Node one; default: the native one if built.
   */
  static start(opts: { proxyPort: number; log: Logger; onDeath(reason: string): void; compileCacheDir?: string; agentBinary?: string | null }): Promise<NetnsAgent> {
    const { log } = opts;
    const binary = opts.agentBinary !== undefined ? opts.agentBinary : executable(NATIVE_NETNS_AGENT) ? NATIVE_NETNS_AGENT : null;
    return new Promise((resolve, reject) => {
      let agent: NetnsAgent | undefined;
      let settled = false;
      const fail = (reason: string) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        try {
          child.kill('SIGKILL');
        } catch {
          // gone
        }
        reject(new Error(reason));
      };
      const native = binary !== null;
      const [command, args] = native
        ? [binary, [String(opts.proxyPort)]]
        : ['unshare', ['--net', '--', process.execPath, AGENT_SCRIPT, String(opts.proxyPort)]];
      const child = spawn(command, args, {
        // Through the compile cache (filled with the agent too, main.ts): a TypeScript file
        // otherwise costs Node its type-stripping compiler's start, most of the agent's.
        env: opts.compileCacheDir && !native ? { ...AGENT_ENV, NODE_COMPILE_CACHE: opts.compileCacheDir } : AGENT_ENV,
        // Whatever it says (a fatal reason, a crash's stack) goes through our logger into the
        // sandbox log, as a JSON line naming the sandbox like every other line there.
        stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      });
      if (child.stderr) createInterface({ input: child.stderr }).on('line', (line) => log.error('netns agent stderr', { agent_pid: child.pid, line }));
      const timer = setTimeout(() => fail(`netns agent not ready after ${READY_TIMEOUT_MS} ms`), READY_TIMEOUT_MS);
      child.once('error', (err) => fail(`cannot start the netns agent (${command}): ${err.message}`));
      child.on('message', (msg: { op?: string; id?: number; code?: string; message?: string; port?: number }, handle?: net.Server | net.Socket) => {
        if (msg?.op === 'ready' && !settled) {
          if (!(handle instanceof net.Server)) return fail('netns agent sent no listening socket');
          settled = true;
          clearTimeout(timer);
          agent = new NetnsAgent(child, handle, opts.proxyPort);
          log.info('workload network namespace ready', { agent_pid: child.pid, proxy_port: opts.proxyPort, agent: native ? 'native' : 'node' });
          resolve(agent);
          return;
        }
        agent?.onMessage(msg, handle);
      });
      child.once('exit', (code, signal) => {
        const reason = `netns agent exited (code ${code}, signal ${signal})`;
        if (!settled) return fail(reason);
        if (agent) agent.onExit(reason, opts.onDeath);
      });
    });
  }

  private onMessage(msg: { op?: string; id?: number; code?: string; message?: string }, handle?: net.Server | net.Socket): void {
    const p = typeof msg?.id === 'number' ? this.pending.get(msg.id) : undefined;
    if (!p) {
      // A late answer to a dial we gave up on: the connection is nobody's.
      if (handle instanceof net.Socket) handle.destroy();
      return;
    }
    this.pending.delete(msg.id!);
    clearTimeout(p.timer);
    if (msg.op === 'dialed' && handle instanceof net.Socket) p.resolve(handle);
    else p.reject(new DialError(msg.code ?? 'EIO', msg.message ?? 'dial failed'));
  }

  private onExit(reason: string, onDeath: (reason: string) => void): void {
    this.dead = true;
    for (const [, p] of this.pending) {
      clearTimeout(p.timer);
      p.reject(new DialError('EIO', reason));
    }
    this.pending.clear();
    if (!this.stopping) onDeath(reason);
  }

  /** A TCP connection to a loopback `host:port` inside the sandbox's namespace. */
  dial(host: string, port: number, timeoutMs: number): Promise<net.Socket> {
    if (this.dead || !this.child.connected) return Promise.reject(new DialError('EIO', 'netns agent is gone'));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new DialError('ETIMEDOUT', 'connect timed out'));
      }, timeoutMs + DIAL_ANSWER_MARGIN_MS);
      this.pending.set(id, { resolve, reject, timer });
      this.child.send({ op: 'dial', id, host, port, timeoutMs }, (err) => {
        if (!err) return;
        this.pending.delete(id);
        clearTimeout(timer);
        reject(new DialError('EIO', `netns agent unreachable: ${err.message}`));
      });
    });
  }

  /** Supervisor shutdown: the agent goes (the namespace lives on while workload processes do). */
  stop(): void {
    this.stopping = true;
    this.proxyServer.close();
    try {
      this.child.disconnect();
    } catch {
      // already disconnected
    }
  }
}
