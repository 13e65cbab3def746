// The netns agent, both ways it can run: the native helper (native/sandgate-netns.c, built at
// `npm install`) and the Node agent (netns-agent.ts, the fallback without it). Each must give the
// supervisor a listening socket inside a namespace of its own, dial only loopback ports there,
// hand a connection over before reading a byte of it, and end with the supervisor.
import fs from 'node:fs';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '@sandgate/telemetry/log';
import { DialError, NATIVE_NETNS_AGENT, NetnsAgent } from '../src/workload/netns.ts';
import { waitFor } from './helpers.ts';

if (!fs.existsSync(NATIVE_NETNS_AGENT)) throw new Error(`the native netns agent was not built: ${NATIVE_NETNS_AGENT} (npm install runs apps/supervisor/native/build.sh)`);

const started: NetnsAgent[] = [];
afterEach(() => {
  for (const a of started.splice(0)) a.stop();
});

const log = createLogger({ sandbox_id: 'sb-netns-agent' }, 'error', { destination: { write: () => undefined } });

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe.for([
  { how: 'native helper', agentBinary: NATIVE_NETNS_AGENT as string | null },
  { how: 'Node agent', agentBinary: null },
])('the netns agent, as the $how', ({ agentBinary }) => {
  const start = async (onDeath: (reason: string) => void = () => undefined) => {
    const agent = await NetnsAgent.start({ proxyPort: 3128, log, onDeath, agentBinary });
    started.push(agent);
    return agent;
  };

  it('hands over a socket listening on 127.0.0.1:port in a network namespace that is not ours', async () => {
    const agent = await start();
    expect(fs.readlinkSync(agent.netnsPath)).not.toBe(fs.readlinkSync('/proc/self/ns/net'));
    expect(agent.proxyServer.address()).toMatchObject({ address: '127.0.0.1', port: 3128 });
    // Nothing of ours listens on the host's 127.0.0.1:3128 through it.
    const host = await new Promise<string>((resolve) => {
      const s = net.connect(3128, '127.0.0.1', () => resolve('connected'));
      s.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'));
    });
    expect(host).toBe('ECONNREFUSED');
  });

  it('dials loopback ports inside the namespace, and the first bytes of a server that speaks first arrive', async () => {
    const agent = await start();
    agent.proxyServer.on('connection', (c) => {
      c.on('error', () => undefined);
      c.end('banner first\n');
    });
    const socket = await agent.dial('127.0.0.1', 3128, 2_000);
    const got = await new Promise<string>((resolve) => {
      let text = '';
      socket.on('data', (d: Buffer) => (text += d.toString()));
      socket.on('end', () => resolve(text));
      socket.resume();
    });
    expect(got).toBe('banner first\n');
    // Many at once: each answer goes to its own dial.
    const many = await Promise.all(Array.from({ length: 20 }, () => agent.dial('127.0.0.1', 3128, 2_000)));
    for (const s of many) s.destroy();
    expect(many).toHaveLength(20);
  });

  it('refuses what is not a loopback address, and reports a closed port as ECONNREFUSED', async () => {
    const agent = await start();
    await expect(agent.dial('10.0.0.1', 80, 1_000)).rejects.toMatchObject({ code: 'EINVAL', message: expect.stringMatching(/only loopback/) });
    await expect(agent.dial('localhost', 80, 1_000)).rejects.toMatchObject({ code: 'EINVAL' });
    await expect(agent.dial('127.0.0.1', 1, 1_000)).rejects.toMatchObject({ code: 'ECONNREFUSED', message: 'connect ECONNREFUSED 127.0.0.1:1' });
    await expect(agent.dial('::1', 1, 1_000)).rejects.toBeInstanceOf(DialError);
  });

  it('ends when the supervisor lets go of it, and its death is reported', async () => {
    const agent = await start();
    agent.stop();
    await waitFor('the agent to exit after stop()', () => !alive(agent.pid), 5_000, 50);
    const deaths: string[] = [];
    const other = await start((reason) => deaths.push(reason));
    process.kill(other.pid, 'SIGKILL');
    await waitFor('onDeath', () => deaths.length > 0, 5_000, 50);
    expect(deaths[0]).toMatch(/netns agent exited \(code null, signal SIGKILL\)/);
    await expect(other.dial('127.0.0.1', 3128, 1_000)).rejects.toMatchObject({ code: 'EIO' });
  });

  it('refuses a bad port: says why on stderr and exits 1', async () => {
    await expect(NetnsAgent.start({ proxyPort: 0, log, onDeath: () => undefined, agentBinary })).rejects.toThrow(/netns agent exited \(code 1/);
  });
});
