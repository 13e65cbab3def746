// The SSH server's host key: a fresh Ed25519 key per supervisor start. Clients reach the server
// only through the gateway (which authorises the connection), and the generated ssh-config turns
// host key checking off, so a stable key would buy nothing and would be one more secret to keep.
import ssh2 from 'ssh2';

/**
 * ssh2 occasionally emits an OpenSSH-format private key its own parser rejects ("Malformed
 * OpenSSH private key"; seen about once in a hundred supervisor starts under chaos). Validate
 * each key with the same parser the server will use, and generate another if it fails.
 */
export function generateHostKey(attempts = 20): string {
  for (let i = 0; i < attempts; i++) {
    const key = ssh2.utils.generateKeyPairSync('ed25519').private;
    if (!(ssh2.utils.parseKey(key) instanceof Error)) return key;
  }
  throw new Error(`could not generate a parseable ed25519 host key in ${attempts} attempts`);
}
