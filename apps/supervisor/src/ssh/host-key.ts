// The SSH server's host key: a fresh Ed25519 key per supervisor start. Clients reach the server
// only through the gateway (which authorises the connection), and the generated ssh-config turns
// host key checking off, so a stable key would buy nothing and would be one more secret to keep.
import ssh2 from 'ssh2';

export function generateHostKey(): string {
  return ssh2.utils.generateKeyPairSync('ed25519').private;
}
