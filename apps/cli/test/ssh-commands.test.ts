// sandgate sandbox ssh-config: the Host block, and quoting for the ProxyCommand line.
import { describe, expect, it } from 'vitest';
import { hostAlias, proxyWord, sshConfigBlock } from '../src/commands/sandbox-ssh-config.ts';

describe('sandbox ssh-config', () => {
  it('prints a Host block whose ProxyCommand runs ssh-proxy in name mode', () => {
    const text = sshConfigBlock('demo', '127.0.0.1:8080', '/usr/bin/node', '/repo/apps/cli/bin/sandgate.js');
    expect(text).toBe(
      [
        'Host sandgate-demo',
        '  User sandbox',
        '  ProxyCommand /usr/bin/node /repo/apps/cli/bin/sandgate.js --gateway 127.0.0.1:8080 ssh-proxy --name demo',
        '  StrictHostKeyChecking no',
        '  UserKnownHostsFile /dev/null',
        '  GlobalKnownHostsFile /dev/null',
        '  LogLevel ERROR',
        '  ServerAliveInterval 15',
        '',
      ].join('\n'),
    );
    expect(hostAlias('x')).toBe('sandgate-x');
  });

  it('quotes words for sh and escapes % for ssh_config', () => {
    expect(proxyWord('/plain/path')).toBe('/plain/path');
    expect(proxyWord('/with space/node')).toBe(`'/with space/node'`);
    expect(proxyWord(`it's`)).toBe(`'it'\\''s'`);
    expect(proxyWord('50%')).toBe('50%%');
  });
});
