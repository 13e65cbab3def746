// Forwarded TCP connections may only reach the sandbox's own loopback.
import { isIP } from 'node:net';

/** `localhost` becomes 127.0.0.1; loopback literals (127.0.0.0/8, ::1) pass; anything else is null. */
export function loopbackHost(raw: string): string | null {
  let host = raw.trim();
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1);
  if (host.toLowerCase() === 'localhost') return '127.0.0.1';
  const family = isIP(host);
  if (family === 4) return host.split('.')[0] === '127' ? host : null;
  if (family === 6) return host === '::1' || host === '0:0:0:0:0:0:0:1' ? '::1' : null;
  return null;
}

export function validPort(port: unknown): port is number {
  return typeof port === 'number' && Number.isInteger(port) && port >= 1 && port <= 65535;
}
