// sandgate sandbox ssh-config NAME: prints an OpenSSH `Host` block whose ProxyCommand is this
// CLI's `ssh-proxy` in name mode (a fresh SSH session per connection), so plain `ssh`, `scp`,
// `sftp` and editors reach the sandbox through the gateway:
//   sandgate sandbox ssh-config demo >> ~/.ssh/config && ssh sandgate-demo
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { UsageError, parseCommand } from '../args.ts';
import { resolveEndpoint } from '../client-config.ts';
import type { CommandContext } from '../context.ts';
import { GATEWAY_OPTION, withClient, write } from './common.ts';

/** The flags it accepts (the usage test checks each is documented). */
export const OPTIONS = { ...GATEWAY_OPTION } as const;

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

export function sshConfigBlock(name: string, endpoint: string, nodePath = process.execPath, entry = CLI_ENTRY): string {
  const proxy = [nodePath, entry, '--gateway', endpoint, 'ssh-proxy', '--name', name].map(proxyWord).join(' ');
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
  const endpoint = resolveEndpoint(values.gateway ?? ctx.gateway, ctx.env);
  return withClient(ctx, values.gateway, async (client) => {
    // Only for a sandbox that exists: a typo should fail here, not at the first ssh.
    await client.getSandbox(name);
    write(sshConfigBlock(name, endpoint));
    return 0;
  });
}
