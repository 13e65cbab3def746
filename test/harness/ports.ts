// Free loopback ports for test servers.
//
// A port is picked here and bound later by another process (redis-server, haproxy, a replica).
// Ports from `listen(0)` come from the kernel's ephemeral range, the same range every outgoing
// connection takes its local port from: under load (the chaos runs go several at once, each with
// hundreds of connections) one of them took a picked port before haproxy bound it ("Address
// already in use"). So ports come from below that range, where no connection is given one, in a
// sequence that starts at a random place per process (two processes picking at once start far
// apart), and each is checked bindable before it is handed out.
import { readFileSync } from 'node:fs';
import net from 'node:net';

const LOWEST = 10_000;

function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    if (Number.isInteger(low) && low > 0) return low;
  } catch {
    // not Linux: assume the IANA default
  }
  return 49_152;
}

const HIGHEST = ephemeralLow() - 1;
if (HIGHEST - LOWEST < 1000) {
  throw new Error(
    `test/harness/ports.ts: the ephemeral port range starts at ${HIGHEST + 1}, leaving no room below it for test servers (need ports ${LOWEST}+)`,
  );
}
let next = LOWEST + Math.floor(Math.random() * (HIGHEST - LOWEST));

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', () => resolve(false));
    srv.listen({ port, host: '127.0.0.1', exclusive: true }, () => srv.close(() => resolve(true)));
  });
}

export async function freePort(): Promise<number> {
  for (let tries = 0; tries < 2000; tries++) {
    const port = next;
    next = next >= HIGHEST ? LOWEST : next + 1;
    if (await canListen(port)) return port;
  }
  throw new Error(`no free loopback port between ${LOWEST} and ${HIGHEST}`);
}

export async function freePorts(n: number): Promise<number[]> {
  const ports: number[] = [];
  while (ports.length < n) ports.push(await freePort());
  return ports;
}
