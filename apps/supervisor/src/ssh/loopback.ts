// Forwarded TCP connections may only reach the sandbox's own loopback: the rule is the wire
// contract's (the gateway checks the same one before a target ever reaches us).
export { loopbackHost } from '@sandgate/protocols/contract';

export function validPort(port: unknown): port is number {
  return typeof port === 'number' && Number.isInteger(port) && port >= 1 && port <= 65535;
}
