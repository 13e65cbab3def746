// sandgate sandbox ssh-config NAME: prints an OpenSSH `Host` block whose ProxyCommand is this
// CLI's `ssh-proxy` in name mode (a fresh SSH session per connection), so plain `ssh`, `scp`,
// `sftp` and editors reach the sandbox through the gateway:
//   sandgate sandbox ssh-config demo >> ~/.ssh/config && ssh sandgate-demo
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { UsageError, parseCommand } from '../args.ts';
import type { Connection } from '../client-config.ts';
import type { CommandContext } from '../context.ts';
import { GATEWAY_OPTION, withClient, write } from './common.ts';

/** The flags it accepts (the usage test checks each is documented). */
export const OPTIONS = { ...GATEWAY_OPTION, workspace: { type: 'string' } } as const;

/** The CLI's entry script (what the ProxyCommand runs with this node). */
export const CLI_ENTRY = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../bin/sandgate.js');

/** One word for `sh -c` (ProxyCommand runs through the shell), with `%` escaped for ssh_config. */
export function proxyWord(word: string): string {
  const quoted = /^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
  return quoted.replace(/%/g, '%%');
}

export function hostAlias(name: string): string {
  return `sandgate-${name}`;
}

/**
 * `connection`: the gateway as the ProxyCommand must reach it: a URL (https://… for TLS) or a
 * Connection, whose CA, client certificate and key files and server name are passed on. The
 * bearer token never is (it would be printed): ssh-proxy reads it from SANDGATE_TOKEN or the client
 * config file, like any client command.
 */
export function sshConfigBlock(name: string, connection: string | Pick<Connection, 'url' | 'tls'>, nodePath = process.execPath, entry = CLI_ENTRY, workspace?: string): string {
  const c = typeof connection === 'string' ? { url: connection, tls: null } : connection;
  const tlsFlags = c.tls
    ? [
        ...(c.tls.caFile ? ['--ca', c.tls.caFile] : []),
        ...(c.tls.certFile ? ['--client-cert', c.tls.certFile] : []),
        ...(c.tls.keyFile ? ['--client-key', c.tls.keyFile] : []),
        ...(c.tls.servername ? ['--tls-server-name', c.tls.servername] : []),
      ]
    : [];
  const proxy = [nodePath, entry, '--gateway', c.url, ...tlsFlags, 'ssh-proxy', '--name', name, ...(workspace !== undefined ? ['--workspace', workspace] : [])].map(proxyWord).join(' ');
  return [
    `Host ${hostAlias(name)}`,
    `  User sandbox`,
    `  ProxyCommand ${proxy}`,
    // The host key is per supervisor start and the gateway authenticates the connection.
    `  StrictHostKeyChecking no`,
    `  UserKnownHostsFile /dev/null`,
    `  GlobalKnownHostsFile /dev/null`,
    `  LogLevel ERROR`,
    `  ServerAliveInterval 15`,
    '',
  ].join('\n');
}

export async function run(argv: string[], ctx: CommandContext): Promise<number> {
  const { values, positionals } = parseCommand(argv, OPTIONS, 'sandbox ssh-config');
  if (positionals.length !== 1) {
    throw new UsageError(positionals.length === 0 ? 'a sandbox NAME is required' : `unexpected argument '${positionals[1]}'`, 'sandbox ssh-config');
  }
  const name = positionals[0]!;
  return withClient(ctx, values, async (client, connection) => {
    // Only for a sandbox that exists: a typo should fail here, not at the first ssh.
    await client.getSandbox(name, values.workspace);
    write(sshConfigBlock(name, connection, process.execPath, CLI_ENTRY, values.workspace));
    return 0;
  });
}
