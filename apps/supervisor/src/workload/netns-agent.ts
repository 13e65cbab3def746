// The netns agent: a tiny root process living in the workload's network namespace, started by
// the supervisor as `unshare --net -- node netns-agent.ts <proxyPort>` with an IPC channel.
//
// Why it exists: the supervisor must stay in the host's (or container's) namespace to reach the
// gateway through the load balancer, yet it has to own two kinds of sockets *inside* the
// workload's namespace: the egress proxy's listening socket (the one address workloads can reach
// besides their own loopback) and connections to loopback ports in the sandbox (ForwardTcp, ssh
// -L). A Node process cannot switch namespaces per socket, so this agent opens those sockets in
// here and hands the file descriptors over (Node IPC handle passing); the supervisor then serves
// them as if it had opened them. It also keeps the namespace alive: workload processes join it
// through /proc/<agent pid>/ns/net.
//
// Protocol (JSON over the IPC channel):
//   agent → supervisor  {op:'ready', port} + the listening net.Server
//   supervisor → agent  {op:'dial', id, host, port, timeoutMs}   (host is a loopback address)
//   agent → supervisor  {op:'dialed', id} + the connected net.Socket | {op:'dial-failed', id, code, message}
// The agent dies with the supervisor: the IPC channel closing ends it.
import { execFileSync } from 'node:child_process';
import net from 'node:net';

const DIAL_TIMEOUT_MS = 10_000;

function send(msg: object, handle?: net.Server | net.Socket, done?: () => void): void {
  if (!process.send || !process.connected) return;
  process.send(msg, handle, {}, () => done?.());
}

function fatal(message: string): never {
  process.stderr.write(`sandgate netns agent: ${message}\n`);
  process.exit(1);
}

function runAgent(): void {
  const proxyPort = Number(process.argv[2]);
  if (!process.send) fatal('no IPC channel: this script is started by the supervisor');
  if (!Number.isInteger(proxyPort) || proxyPort < 1 || proxyPort > 65535) fatal(`bad proxy port ${process.argv[2]}`);

  process.on('disconnect', () => process.exit(0));

  // A fresh namespace's loopback is down: without it nothing in the sandbox can even talk to itself.
  try {
    execFileSync('ip', ['link', 'set', 'lo', 'up'], { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (err) {
    fatal(`cannot bring the loopback interface up (is iproute2's \`ip\` installed?): ${(err as Error).message}`);
  }

  const server = net.createServer();
  server.once('error', (err) => fatal(`cannot listen on 127.0.0.1:${proxyPort}: ${err.message}`));
  // Connections must be accepted by the supervisor only: once the handle is handed over, ours closes.
  server.on('connection', (c) => c.destroy());
  server.listen(proxyPort, '127.0.0.1', () => send({ op: 'ready', port: proxyPort }, server, () => server.close()));

  const LOOPBACK = new Set(['127.0.0.1', '::1']);

  process.on('message', (msg: { op?: string; id?: unknown; host?: unknown; port?: unknown; timeoutMs?: unknown }) => {
    if (msg?.op !== 'dial') return;
    const { id, host, port } = msg;
    const timeoutMs = typeof msg.timeoutMs === 'number' && msg.timeoutMs > 0 ? Math.min(msg.timeoutMs, DIAL_TIMEOUT_MS) : DIAL_TIMEOUT_MS;
    if (typeof host !== 'string' || !LOOPBACK.has(host) || typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) {
      send({ op: 'dial-failed', id, code: 'EINVAL', message: 'only loopback targets can be dialled inside the sandbox' });
      return;
    }
    const socket = net.connect({ host, port });
    // Never read here: a server that speaks first (an SSH daemon's banner) would have its first
    // bytes land in this process's buffer and be lost when the descriptor moves.
    socket.pause();
    const timer = setTimeout(() => socket.destroy(Object.assign(new Error('connect timed out'), { code: 'ETIMEDOUT' })), timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.removeAllListeners('error');
      socket.on('error', () => socket.destroy());
      // Sending a socket closes our copy once it is on its way (keepOpen defaults to false).
      send({ op: 'dialed', id }, socket);
    });
    socket.once('error', (err: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      send({ op: 'dial-failed', id, code: err.code ?? 'EIO', message: err.message });
    });
  });
}

// Only as the supervisor starts it: main.ts --fill-compile-cache imports this file to compile it.
if (import.meta.main) runAgent();
