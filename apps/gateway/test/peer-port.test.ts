// The peer port, attacked: only a peer that proves it holds the peer secret (without sending it)
// gets a channel or a call served; a captured handshake replayed on a new connection, a wrong
// MAC, a client that skips the handshake (frames, an HTTP/2 preface) are closed before a frame is
// decoded, logged and counted; and a client sends nothing to a server that cannot prove itself.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { once } from 'node:events';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { connectLink, LINK_MAGIC, LinkFrame, type LinkChannel, type LinkError } from '@sandgate/relay';
import type { ExecFrame, TcpFrame } from '@sandgate/protocols';
import { createLogger, Metrics } from '@sandgate/telemetry';
import { execFrameCodec, PEER_CONNECTIONS_METRIC, PEER_REFUSED_METRIC, peerCallCodec, servePeerPort, tcpFrameCodec, type PeerPort } from '../src/relay/peer-port.ts';

const SECRET = 'right';
const OWNER = 'owner-replica';
const HELLO = { secret: SECRET, kind: 'exec', from: 'entry-replica' };

let port: PeerPort | undefined;
const servers: Server[] = [];
afterEach(() => {
  port?.close();
  port = undefined;
  for (const s of servers.splice(0)) s.close();
  vi.restoreAllMocks();
});

async function start() {
  const seen: { exec: LinkChannel<ExecFrame>[]; tcp: LinkChannel<TcpFrame>[]; kills: unknown[] } = { exec: [], tcp: [], kills: [] };
  const metrics = new Metrics();
  port = await servePeerPort({
    host: '127.0.0.1',
    port: 0,
    replicaId: OWNER,
    peerSecret: SECRET,
    onExec: (ch) => {
      seen.exec.push(ch);
      ch.sendMetadata();
      ch.once('data', (f: ExecFrame) => ch.end({ exit: { exit_code: f.start?.argv?.length ?? -1 } }));
    },
    onTcp: (ch) => seen.tcp.push(ch),
    calls: {
      KillExec: async (request) => {
        seen.kills.push(request);
        return { killed: 2 };
      },
      PushPolicy: async () => ({ connected: false, applied_revision: 0 }),
      StartMain: async () => ({ connected: false }),
    },
    log: createLogger({ component: 'test' }, 'error'),
    metrics,
  });
  return { address: `127.0.0.1:${port.port}`, port: port.port, seen, metrics };
}

async function listen(server: Server): Promise<number> {
  servers.push(server);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return (server.address() as { port: number }).port;
}

/** A TCP proxy to `target` that records every byte each way. */
async function recordingProxy(target: number) {
  const toServer: Buffer[] = [];
  const toClient: Buffer[] = [];
  const port = await listen(
    createServer((client) => {
      const server = connect(target, '127.0.0.1');
      client.on('data', (b: Buffer) => (toServer.push(b), server.write(b)));
      server.on('data', (b: Buffer) => (toClient.push(b), client.write(b)));
      client.on('close', () => server.destroy());
      server.on('close', () => client.destroy());
      client.on('error', () => undefined);
      server.on('error', () => undefined);
    }),
  );
  return { address: `127.0.0.1:${port}`, toServer: () => Buffer.concat(toServer), toClient: () => Buffer.concat(toClient) };
}

/** Runs one exec over a link; resolves with the frames it got back. */
async function execOver(address: string, hello = HELLO): Promise<ExecFrame[]> {
  const link = connectLink(address, execFrameCodec, hello);
  const frames: ExecFrame[] = [];
  link.on('data', (f: ExecFrame) => frames.push(f));
  link.write({ start: { exec_id: 'e', sandbox_id: 's', argv: ['a', 'b', 'c'] } });
  await once(link, 'end');
  return frames;
}

/** Sends `bytes` on a fresh connection; resolves with everything the server sent before it closed. */
async function rawExchange(port: number, bytes: Buffer): Promise<Buffer> {
  const socket = connect(port, '127.0.0.1', () => socket.write(bytes));
  const got: Buffer[] = [];
  socket.on('data', (b: Buffer) => got.push(b));
  socket.on('error', () => undefined); // a reset is one way of being refused
  await new Promise((resolve) => socket.once('close', resolve));
  return Buffer.concat(got);
}

function frame(type: number, payload: Buffer): Buffer {
  const header = Buffer.alloc(5);
  header.writeUInt32BE(1 + payload.length, 0);
  header[4] = type;
  return Buffer.concat([header, payload]);
}

/** The frames in `bytes` after the magic: [type, payload]. */
function frames(bytes: Buffer): Array<[number, Buffer]> {
  const out: Array<[number, Buffer]> = [];
  let at = LINK_MAGIC.length;
  while (at + 5 <= bytes.length) {
    const length = bytes.readUInt32BE(at);
    out.push([bytes[at + 4]!, bytes.subarray(at + 5, at + 4 + length)]);
    at += 4 + length;
  }
  return out;
}

describe('peer port', () => {
  it('serves an exec link to a peer that proved it holds the secret, which never crossed the wire', async () => {
    const { port: target, seen } = await start();
    const proxy = await recordingProxy(target);
    expect(await execOver(proxy.address)).toEqual([{ exit: { exit_code: 3 } }]);
    expect(seen.exec).toHaveLength(1);
    expect(seen.exec[0]!.hello).toEqual({ kind: 'exec', from: 'entry-replica', to: OWNER });
    expect(seen.tcp).toHaveLength(0);
    for (const bytes of [proxy.toServer(), proxy.toClient()]) {
      expect(bytes.subarray(0, 4).equals(LINK_MAGIC)).toBe(true);
      expect(bytes.includes(Buffer.from(SECRET))).toBe(false);
    }
    // The server spoke first: a challenge, then (after the HELLO) its proof.
    expect(frames(proxy.toClient()).map(([t]) => t).slice(0, 2)).toEqual([LinkFrame.CHALLENGE, LinkFrame.PROOF]);
    expect(frames(proxy.toServer())[0]![0]).toBe(LinkFrame.HELLO);
  });

  it('serves exec after exec on one kept connection, and a kept channel is still the authenticated peer', async () => {
    const { address, seen, metrics } = await start();
    let link = connectLink(address, execFrameCodec, { ...HELLO, reuse: true });
    for (let i = 1; i <= 10; i++) {
      let next: LinkChannel<ExecFrame> | null = null;
      link.once('successor', (s: LinkChannel<ExecFrame>) => (next = s));
      const frames: ExecFrame[] = [];
      link.on('data', (f: ExecFrame) => frames.push(f));
      link.write({ start: { exec_id: `e${i}`, sandbox_id: 's', argv: Array.from({ length: i }, () => 'x') } });
      link.end();
      await once(link, 'close');
      expect(frames).toEqual([{ exit: { exit_code: i } }]);
      expect(next, `exec ${i} handed its connection on`).not.toBeNull();
      link = next!;
    }
    expect(metrics.get(PEER_CONNECTIONS_METRIC)).toBe(1);
    // Ten served, the eleventh waits for its first frame; each knows the peer that proved itself.
    expect(seen.exec).toHaveLength(11);
    expect(seen.exec.every((ch) => ch.hello?.from === 'entry-replica' && ch.hello.kind === 'exec')).toBe(true);
    // Without asking (an older entry replica), every exec takes a connection of its own.
    await execOver(address);
    await execOver(address);
    expect(metrics.get(PEER_CONNECTIONS_METRIC)).toBe(3);
    link.cancel();
  });

  it('refuses a wrong secret (MAC) and an unknown kind, counts and serves nothing', async () => {
    const { address, seen, metrics } = await start();
    for (const hello of [
      { secret: 'wrong', kind: 'exec', from: 't' },
      { secret: `${SECRET}x`, kind: 'call', from: 't' },
      { secret: SECRET, kind: 'other', from: 't' },
    ]) {
      const link = connectLink(address, tcpFrameCodec, hello);
      link.write({ data: Buffer.from('x') });
      const [err] = (await once(link, 'error')) as [LinkError];
      expect(err.code).toBe(14);
    }
    expect(seen.exec).toHaveLength(0);
    expect(seen.tcp).toHaveLength(0);
    expect(seen.kills).toHaveLength(0);
    expect(metrics.get(PEER_REFUSED_METRIC)).toBe(3);
  });

  it('refuses a captured HELLO (and what followed it) replayed on a new connection, without decoding a frame', async () => {
    const { port: target, seen, metrics } = await start();
    const proxy = await recordingProxy(target);
    expect(await execOver(proxy.address)).toEqual([{ exit: { exit_code: 3 } }]);
    expect(seen.exec).toHaveLength(1);
    const captured = proxy.toServer();
    const decode = vi.spyOn(execFrameCodec, 'decode');

    // Replayed whole (magic, HELLO, the start frame, END), and the HELLO alone.
    const helloOnly = Buffer.concat([LINK_MAGIC, frame(LinkFrame.HELLO, frames(captured)[0]![1])]);
    for (const replay of [captured, helloOnly]) {
      const answer = await rawExchange(target, replay);
      // The server's answer is a fresh challenge and nothing else: no proof, no OPENED, no STATUS.
      expect(frames(answer).map(([t]) => t)).toEqual([LinkFrame.CHALLENGE]);
    }
    expect(seen.exec).toHaveLength(1);
    expect(decode).not.toHaveBeenCalled();
    expect(metrics.get(PEER_REFUSED_METRIC)).toBe(2);
  });

  it('closes a client that skips the handshake (frames, an HTTP/2 preface, garbage) without decoding a frame', async () => {
    const { port: target, seen, metrics } = await start();
    const decode = vi.spyOn(execFrameCodec, 'decode');
    const startFrame = Buffer.from(execFrameCodec.encode({ start: { exec_id: 'e', sandbox_id: 's', argv: ['x'] } } as ExecFrame));
    const attempts = [
      // The old protocol's opening: magic, then frames straight away.
      Buffer.concat([Buffer.from('SGL1'), frame(LinkFrame.HELLO, Buffer.from(JSON.stringify({ secret: SECRET, kind: 'exec', from: 't' }))), frame(LinkFrame.MSG, startFrame)]),
      // This protocol's magic, then a MSG instead of a HELLO.
      Buffer.concat([LINK_MAGIC, frame(LinkFrame.MSG, startFrame)]),
      // A HELLO too large to be one (never buffered).
      Buffer.concat([LINK_MAGIC, frame(LinkFrame.HELLO, Buffer.alloc(100_000, 0x7b))]),
      Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'),
      Buffer.from('GET / HTTP/1.1\r\nhost: x\r\n\r\n'),
    ];
    for (const bytes of attempts) {
      const answer = await rawExchange(target, bytes);
      expect(frames(answer).map(([t]) => t)).toEqual([LinkFrame.CHALLENGE]);
    }
    expect(decode).not.toHaveBeenCalled();
    expect(seen.exec).toHaveLength(0);
    expect(metrics.get(PEER_REFUSED_METRIC)).toBe(attempts.length);
  });

  it("a client sends nothing to a server that cannot prove itself (a random proof, or a real server's replayed)", async () => {
    // A real exchange, recorded: the fake server replays the real server's bytes.
    const { port: target } = await start();
    const proxy = await recordingProxy(target);
    await execOver(proxy.address);
    const realServerBytes = proxy.toClient();
    const [, challenge] = frames(realServerBytes)[0]!;
    const [, proof] = frames(realServerBytes)[1]!;

    for (const fakeProof of [Buffer.from(JSON.stringify({ mac: Buffer.alloc(32, 1).toString('base64') })), proof]) {
      const received: Buffer[] = [];
      const fakePort = await listen(
        createServer((socket: Socket) => {
          socket.on('data', (b: Buffer) => received.push(b));
          socket.on('error', () => undefined);
          socket.write(Buffer.concat([LINK_MAGIC, frame(LinkFrame.CHALLENGE, challenge)]));
          socket.once('data', () => socket.write(frame(LinkFrame.PROOF, fakeProof)));
        }),
      );
      const link = connectLink(`127.0.0.1:${fakePort}`, execFrameCodec, { ...HELLO, to: OWNER });
      const refused: string[] = [];
      link.on('refused', (why: string) => refused.push(why));
      link.write({ start: { exec_id: 'e', sandbox_id: 's', argv: ['secret-argv'] } });
      link.end();
      const [err] = (await once(link, 'error')) as [LinkError];
      expect(err.code).toBe(14);
      expect(refused).toEqual(['the peer could not prove it holds the peer secret']);
      // All the fake server got: the magic and a HELLO. No MSG, no END, no argv.
      const got = Buffer.concat(received);
      expect(frames(got).map(([t]) => t)).toEqual([LinkFrame.HELLO]);
      expect(got.includes(Buffer.from('secret-argv'))).toBe(false);
      expect(got.includes(Buffer.from(SECRET))).toBe(false);
    }
  });

  it('carries the unary peer calls (KillExec) on an authenticated link, and no call without it', async () => {
    const { address, seen } = await start();
    const call = (secret: string, method: string) =>
      new Promise<{ res?: Record<string, unknown>; err?: LinkError }>((resolve) => {
        const link = connectLink(address, peerCallCodec, { secret, kind: 'call', from: 'worker' });
        link.on('error', (err: LinkError) => resolve({ err }));
        link.once('data', (res: Record<string, unknown>) => resolve({ res }));
        link.end({ method, request: { sandbox_id: 's', exec_id: 'e' } });
      });
    expect(await call(SECRET, 'KillExec')).toEqual({ res: { killed: 2 } });
    expect(seen.kills).toEqual([{ sandbox_id: 's', exec_id: 'e' }]);
    expect((await call('wrong', 'KillExec')).err?.code).toBe(14);
    expect(seen.kills).toHaveLength(1);
    const unknown = await call(SECRET, 'DropEverything');
    expect(unknown.err).toMatchObject({ code: 12, answered: true });
  });
});
