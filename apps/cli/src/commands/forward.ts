// sandgate forward start NAME LOCAL_PORT[:REMOTE_PORT]: a local TCP listener whose every
// connection rides one ForwardTcp call to a port on the sandbox's loopback (upstream CLI's
// `forward`). ForwardTcp wants an SSH session token (CreateSshSession), as ssh-proxy does: the
// command mints them, reuses each for up to the gateway's default number of concurrent
// connections per token, and revokes them all when it stops (Ctrl-C / SIGTERM: stop listening,
// close live connections, revoke, exit 0).
import net from 'node:net';
import { status as Status } from '@grpc/grpc-js';
import { UsageError, parseCommand } from '../args.ts';
import { statusName, type SandgateClient } from '../client.ts';
import type { CommandContext } from '../context.ts';
import { describeGrpcError } from '../errors.ts';
import { pipeOverForward } from '../forward-stream.ts';
import { waitForShutdownSignal } from '../signals.ts';
import { connectionFlags, GATEWAY_OPTION, withClient } from './common.ts';

/** The flags it accepts (the usage test checks each is documented). */
export const OPTIONS = {
  ...GATEWAY_OPTION,
  workspace: { type: 'string' },
  bind: { type: 'string' },
} as const;

/**
 * Connections per SSH session token: the gateway's default cap
 * (SANDGATE_SSH_MAX_CONNECTIONS_PER_TOKEN). More concurrent connections get more tokens.
 */
export const CONNECTIONS_PER_TOKEN = 3;

/** `LOCAL_PORT[:REMOTE_PORT]`: the remote port defaults to the local one; local 0 = any free port. */
export function parsePortSpec(spec: string): { local: number; remote: number } {
  const m = /^(\d{1,5})(?::(\d{1,5}))?$/.exec(spec);
  const local = m ? Number(m[1]) : NaN;
  const remote = m ? Number(m[2] ?? m[1]) : NaN;
  if (!m || local > 65535) throw new UsageError(`invalid port spec '${spec}': expected LOCAL_PORT[:REMOTE_PORT], ports from 1 to 65535`, 'forward start');
  if (remote < 1 || remote > 65535) throw new UsageError(`invalid port spec '${spec}': the remote port must be from 1 to 65535`, 'forward start');
  return { local, remote };
}

interface Lease {
  token: string;
  active: number;
}

/** The SSH session tokens of one forward: minted on demand, shared up to CONNECTIONS_PER_TOKEN, revoked at the end. */
class TokenPool {
  private readonly leases: Lease[] = [];
  private minting: Promise<Lease> | undefined;
  private readonly client: SandgateClient;
  private readonly sandboxId: string;

  constructor(client: SandgateClient, sandboxId: string) {
    this.client = client;
    this.sandboxId = sandboxId;
  }

  async take(): Promise<Lease> {
    for (;;) {
      const free = this.leases.find((l) => l.active < CONNECTIONS_PER_TOKEN);
      if (free) {
        free.active++;
        return free;
      }
      // One mint at a time; whoever waited looks again (the new token has room for several).
      this.minting ??= this.client
        .createSshSession(this.sandboxId)
        .then((res) => {
          const lease = { token: res.token, active: 0 };
          this.leases.push(lease);
          return lease;
        })
        .finally(() => (this.minting = undefined));
      await this.minting;
    }
  }

  /** Voids every token (best effort, a second at most): nobody can reuse them after we stop. */
  async revokeAll(): Promise<void> {
    await Promise.all(this.leases.map((l) => this.client.revokeSshSession(l.token, { deadline: Date.now() + 1000 }).catch(() => false)));
  }
}

/**
 * One accepted connection ↔ one ForwardTcp call (forward-stream.ts, as ssh-proxy). A socket that
 * goes away (reset, destroyed) cancels the call, and so the connection inside the sandbox.
 */
function relay(sock: net.Socket, client: SandgateClient, lease: Lease, init: { sandbox_id: string; port: number }, onError: (line: string) => void): { close(): void } {
  const call = client.forwardTcp();
  let finished = false;
  let closing = false;
  call.on('status', () => {
    if (!finished) lease.active--;
    finished = true;
  });
  sock.on('error', () => undefined);
  sock.on('close', () => {
    if (!finished) call.cancel();
  });
  const target = { host: '127.0.0.1', port: init.port };
  void pipeOverForward(call, { sandbox_id: init.sandbox_id, authorization_token: lease.token, service_id: `forward:${init.sandbox_id}:${init.port}`, tcp: target }, { input: sock, output: sock, endOutput: true }).then((err) => {
    if (!err) return;
    if (!closing && err.code !== Status.CANCELLED) onError(`${statusName(err.code)}: ${describeGrpcError(err, client.endpoint)}`);
    sock.destroy();
  });
  return {
    close: () => {
      closing = true;
      sock.destroy();
      if (!finished) call.cancel();
    },
  };
}

export async function run(argv: string[], ctx: CommandContext): Promise<number> {
  const { values, positionals } = parseCommand(argv, OPTIONS, 'forward start');
  if (positionals.length !== 2) throw new UsageError('expected NAME and LOCAL_PORT[:REMOTE_PORT]', 'forward start');
  const [name, spec] = positionals as [string, string];
  const ports = parsePortSpec(spec);
  const bind = values.bind ?? '127.0.0.1';
  if (bind !== 'localhost' && net.isIP(bind) === 0) throw new UsageError(`--bind must be an IP address (or localhost), got '${bind}'`, 'forward start');
  return withClient(ctx, connectionFlags(values), async (client) => {
    const sandbox = await client.getSandbox(name, values.workspace);
    const sandboxId = sandbox.metadata?.id ?? '';
    const pool = new TokenPool(client, sandboxId);
    // The first token before listening: a sandbox that cannot be reached fails here, not per connection.
    const first = await pool.take();
    first.active--;
    const live = new Set<{ close(): void }>();
    const server = net.createServer({ allowHalfOpen: true, pauseOnConnect: true }, (sock) => {
      pool.take().then(
        (lease) => {
          const conn = relay(sock, client, lease, { sandbox_id: sandboxId, port: ports.remote }, (line) => process.stderr.write(`sandgate forward: connection failed: ${line}\n`));
          live.add(conn);
          sock.on('close', () => live.delete(conn));
        },
        (err: unknown) => {
          process.stderr.write(`sandgate forward: connection refused: ${describeGrpcError(err, client.endpoint)}\n`);
          sock.destroy();
        },
      );
    });
    const listening = await new Promise<net.AddressInfo | Error>((resolve) => {
      server.once('error', resolve);
      server.listen(ports.local, bind, () => resolve(server.address() as net.AddressInfo));
    });
    if (listening instanceof Error) {
      await pool.revokeAll();
      process.stderr.write(`error: cannot listen on ${bind}:${ports.local}: ${listening.message}\n`);
      return 1;
    }
    const host = listening.family === 'IPv6' ? `[${listening.address}]` : listening.address;
    process.stdout.write(`forwarding ${host}:${listening.port} -> sandbox ${name} port ${ports.remote} (Ctrl-C to stop)\n`);
    await waitForShutdownSignal();
    // Stop: no new connections, the live ones closed (their ForwardTcp calls cancelled), tokens void.
    server.close();
    for (const conn of live) conn.close();
    await pool.revokeAll();
    process.stderr.write('sandgate forward: stopped\n');
    return 0;
  });
}
