// Free loopback ports for test servers.
//
// A port is picked here and bound later by another process (redis-server, haproxy, a replica).
// Ports from `listen(0)` come from the kernel's ephemeral range, the same range every outgoing
// connection takes its local port from: under load (the chaos runs go several at once, each with
// hundreds of connections) one of them took a picked port before haproxy bound it ("Address
// already in use"). So ports come from below that range, where no connection is given one, each
// drawn at random (not in a sequence: two processes whose sequences met would keep picking the
// same ports in step), reserved for a minute with a file only one process can create (test
// processes run side by side, and each binds its ports some time after picking them), and checked
// bindable before it is handed out.
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const LOWEST = 10_000;

function ephemeralLow(): number {
  try {
    const low = Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
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

const RESERVATIONS = path.join(os.tmpdir(), 'sandgate-test-ports');
/** Long enough for any test to bind what it picked; after it, a bound port fails canListen anyway. */
const RESERVATION_MS = 60_000;

function reserve(port: number): boolean {
  const file = path.join(RESERVATIONS, String(port));
  for (let i = 0; i < 2; i++) {
    try {
      fs.writeFileSync(file, `${process.pid}\n`, { flag: 'wx' });
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      let age = 0;
      try {
        age = Date.now() - fs.statSync(file).mtimeMs;
      } catch {
        continue; // expired and removed by someone else just now
      }
      if (age < RESERVATION_MS) return false;
      fs.rmSync(file, { force: true });
    }
  }
  return false;
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', () => resolve(false));
    srv.listen({ port, host: '127.0.0.1', exclusive: true }, () => srv.close(() => resolve(true)));
  });
}

export async function freePort(): Promise<number> {
  fs.mkdirSync(RESERVATIONS, { recursive: true, mode: 0o1777 });
  for (let tries = 0; tries < 2000; tries++) {
    const port = LOWEST + Math.floor(Math.random() * (HIGHEST - LOWEST + 1));
    if (reserve(port) && (await canListen(port))) return port;
  }
  throw new Error(`no free loopback port between ${LOWEST} and ${HIGHEST}`);
}

export async function freePorts(n: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < n) ports.add(await freePort());
  return [...ports];
}
