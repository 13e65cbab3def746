// The peer link over real loopback sockets: framing, END/STATUS/cancel semantics, liveness,
// back-pressure, and the handshake's refusals of anything that is not a peer holding the secret
// (the attacks themselves: apps/gateway/test/peer-port.test.ts).
import { afterEach, describe, expect, it } from 'vitest';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { once } from 'node:events';
import { acceptLink, connectLink, LinkChannel, LINK_MAGIC, type LinkCodec, type LinkError } from '../src/link.ts';

interface Msg {
  n?: number;
  data?: string;
}
const json: LinkCodec<Msg> = {
  encode: (m) => Buffer.from(JSON.stringify(m)),
  decode: (b) => JSON.parse(Buffer.from(b).toString()) as Msg,
};
const HELLO = { secret: 's', kind: 'exec', from: 'test' };
const SERVER = { secret: 's', self: 'owner' };

const servers: Server[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
});

/** A link server whose channels are handed to `onChannel` once they said hello. */
async function linkServer(onChannel: (ch: LinkChannel<Msg>) => void, timing = {}): Promise<string> {
  const server = createServer((socket) => {
    const ch = acceptLink(socket, () => json, SERVER, timing);
    ch.once('hello', () => onChannel(ch));
  });
  servers.push(server);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const addr = server.address() as { port: number };
  return `127.0.0.1:${addr.port}`;
}

function collect(ch: LinkChannel<Msg>): Promise<Msg[]> {
  const out: Msg[] = [];
  ch.on('data', (m: Msg) => out.push(m));
  return new Promise((resolve) => ch.on('end', () => resolve(out)));
}

describe('peer link', () => {
  it('carries frames both ways, says OPENED, and ends cleanly when both sides sent END', async () => {
    let serverSide: LinkChannel<Msg> | null = null;
    const address = await linkServer((ch) => {
      serverSide = ch;
      expect(ch.hello).toEqual({ kind: 'exec', from: 'test', to: 'owner' });
      ch.sendMetadata();
      ch.on('data', (m: Msg) => ch.write({ n: (m.n ?? 0) * 2 }));
      ch.on('end', () => ch.end());
    });
    const client = connectLink(address, json, HELLO);
    const opened = once(client, 'metadata');
    const closed = once(client, 'close');
    const received = collect(client);
    for (let i = 1; i <= 5; i++) client.write({ n: i });
    client.end();
    await opened;
    expect(await received).toEqual([{ n: 2 }, { n: 4 }, { n: 6 }, { n: 8 }, { n: 10 }]);
    await closed;
    expect(serverSide!.cancelled).toBe(false);
  });

  it('delivers a STATUS as an error with code, details and the not-here flag', async () => {
    const address = await linkServer((ch) => {
      ch.emit('error', { code: 8, details: 'too many execs', notHere: false });
    });
    const client = connectLink(address, json, HELLO);
    const [err] = (await once(client, 'error')) as [LinkError];
    expect(err).toMatchObject({ code: 8, details: 'too many execs', notHere: false, answered: true });

    const address2 = await linkServer((ch) => ch.emit('error', { code: 14, details: 'not here', notHere: true }));
    const [err2] = (await once(connectLink(address2, json, HELLO), 'error')) as [LinkError];
    expect(err2.notHere).toBe(true);
  });

  it('a client cancel is a cancel at the server, and a vanished server is UNAVAILABLE at the client', async () => {
    let serverSide!: LinkChannel<Msg>;
    const gotChannel = new Promise<void>((resolve) => {
      void linkServer((ch) => {
        serverSide = ch;
        ch.sendMetadata();
        resolve();
      }).then((address) => {
        const client = connectLink(address, json, HELLO);
        client.on('error', () => undefined);
        void once(client, 'metadata').then(() => client.cancel());
      });
    });
    await gotChannel;
    await once(serverSide, 'cancelled');
    expect(serverSide.cancelled).toBe(true);

    let serverSocket!: Socket;
    const address = await linkServer((ch) => {
      ch.sendMetadata();
      serverSocket = (ch as unknown as { socket: Socket }).socket;
      setTimeout(() => serverSocket.destroy(), 20);
    });
    const client = connectLink(address, json, HELLO);
    const [err] = (await once(client, 'error')) as [LinkError];
    expect(err.code).toBe(14);
    expect(err.details).toMatch(/peer link closed/);
    expect(err.answered).toBe(false);
    // After the handshake the channel's frames may have reached the server: not unsent.
    expect(err.unsent).toBe(false);
  });

  it('a link that never completed its handshake says so (unsent): a refused connection, a silent peer', async () => {
    // A port nothing listens on: refused before any frame could leave.
    const closed = createServer();
    closed.listen(0, '127.0.0.1');
    await once(closed, 'listening');
    const port = (closed.address() as { port: number }).port;
    await new Promise((resolve) => closed.close(resolve));
    const refused = connectLink(`127.0.0.1:${port}`, json, HELLO);
    refused.write({ n: 1 });
    const [err] = (await once(refused, 'error')) as [LinkError];
    expect(err).toMatchObject({ code: 14, answered: false, unsent: true });

    // A server that accepts and never answers the handshake: the frame written meanwhile stays held.
    let received = 0;
    const mute = createServer((socket) => socket.on('data', (c: Buffer) => (received += c.length)));
    servers.push(mute);
    mute.listen(0, '127.0.0.1');
    await once(mute, 'listening');
    const silent = connectLink(`127.0.0.1:${(mute.address() as { port: number }).port}`, json, HELLO, { pingIntervalMs: 50, silenceLimitMs: 300 });
    silent.write({ n: 2 });
    const [err2] = (await once(silent, 'error')) as [LinkError];
    expect(err2).toMatchObject({ code: 14, unsent: true });
    expect(received, 'bytes the server received before its challenge (the client sends nothing first)').toBe(0);
  });

  it('a peer that stops talking (frozen) is dropped after the silence limit', async () => {
    // A server that accepts and then never sends a byte: no pings, no frames.
    const mute = createServer(() => undefined);
    servers.push(mute);
    mute.listen(0, '127.0.0.1');
    await once(mute, 'listening');
    const address = `127.0.0.1:${(mute.address() as { port: number }).port}`;
    const started = Date.now();
    const client = connectLink(address, json, HELLO, { pingIntervalMs: 50, silenceLimitMs: 300 });
    const [err] = (await once(client, 'error')) as [LinkError];
    expect(err.code).toBe(14);
    expect(err.details).toMatch(/silent/);
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it('keeps flow control: a slow reader holds the writer back instead of growing buffers', async () => {
    let maxBuffered = 0;
    let writerDone!: () => void;
    const finished = new Promise<void>((r) => (writerDone = r));
    const chunk = 'x'.repeat(64 * 1024);
    const total = 400; // 25 MiB
    const address = await linkServer((ch) => {
      ch.sendMetadata();
      const socket = (ch as unknown as { socket: Socket }).socket;
      let i = 0;
      const writeMore = () => {
        while (i < total) {
          i++;
          maxBuffered = Math.max(maxBuffered, socket.writableLength + ch.writableLength * chunk.length);
          if (!ch.write({ data: chunk })) return void ch.once('drain', writeMore);
        }
        ch.end();
        writerDone();
      };
      writeMore();
    });
    const client = connectLink(address, json, HELLO);
    let got = 0;
    client.on('data', () => {
      got++;
      client.pause();
      setTimeout(() => client.resume(), 1);
    });
    await finished;
    await once(client, 'end');
    expect(got).toBe(total);
    // 25 MiB went through; the writer never had more than a few MiB queued.
    expect(maxBuffered).toBeLessThan(8 * 1024 * 1024);
  });

  it('a reader that holds back longer than the silence limit keeps its channel (the pings wait behind the data)', async () => {
    // Found by exec-ws.test.ts: a WebSocket client that stopped reading for ~4 s lost its
    // relayed exec, because the entry replica stopped reading the link and so heard no pings.
    const timing = { pingIntervalMs: 50, silenceLimitMs: 300 };
    const chunk = 'x'.repeat(64 * 1024);
    const total = 200; // 12.5 MiB: far past every buffer, so the server's writes wait too
    const address = await linkServer((ch) => {
      ch.sendMetadata();
      let i = 0;
      const writeMore = () => {
        while (i < total) {
          i++;
          if (!ch.write({ data: chunk })) return void ch.once('drain', writeMore);
        }
        ch.end();
      };
      writeMore();
    }, timing);
    const client = connectLink(address, json, HELLO, timing);
    const errors: LinkError[] = [];
    client.on('error', (err: LinkError) => errors.push(err));
    await once(client, 'metadata');
    // Not reading for 5 silence limits.
    await new Promise((r) => setTimeout(r, 1_500));
    expect(errors).toEqual([]);
    let got = 0;
    client.on('data', () => got++);
    await once(client, 'end');
    expect(errors).toEqual([]);
    expect(got).toBe(total);
  });

  it('a peer that freezes while the reader holds back is still dropped once the reader reads again', async () => {
    const timing = { pingIntervalMs: 50, silenceLimitMs: 300 };
    let serverSocket!: Socket;
    const address = await linkServer((ch) => {
      ch.sendMetadata();
      serverSocket = (ch as unknown as { socket: Socket }).socket;
      const chunk = 'x'.repeat(64 * 1024);
      // Fill every buffer, then go mute: no more frames, no pings (a frozen process).
      while (ch.write({ data: chunk }));
      setTimeout(() => {
        (ch as unknown as { timer: NodeJS.Timeout }).timer.close();
        ch.removeAllListeners('drain');
        serverSocket.pause();
      }, 100);
    }, timing);
    const client = connectLink(address, json, HELLO, timing);
    await once(client, 'metadata');
    await new Promise((r) => setTimeout(r, 800));
    const failed = once(client, 'error') as Promise<[LinkError]>;
    client.on('data', () => undefined);
    const [err] = await failed;
    expect(err.details).toMatch(/silent/);
  });

  it('drops a connection that speaks another protocol, or sends frames before the handshake', async () => {
    const refusals: string[] = [];
    const server = createServer((socket) => {
      const ch = acceptLink(socket, () => json, SERVER);
      ch.on('refused', (why: string) => refusals.push(why));
      ch.on('hello', () => refusals.push('accepted'));
    });
    servers.push(server);
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const port = (server.address() as { port: number }).port;
    const other = connect(port, '127.0.0.1', () => other.write('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'));
    other.resume();
    await once(other, 'close');
    // The magic, then an oversized MSG header straight away: refused on the header alone.
    const raw = connect(port, '127.0.0.1', () => raw.write(Buffer.concat([LINK_MAGIC, Buffer.from([0xff, 0xff, 0xff, 0xff, 2])])));
    raw.resume();
    await once(raw, 'close');
    expect(refusals).toEqual(['not the peer link protocol', 'frame type 2 before the handshake completed']);
  });

  it('a client with another secret is refused, and a server with another secret gets no message', async () => {
    let served = 0;
    const address = await linkServer(() => served++);
    const client = connectLink(address, json, { ...HELLO, secret: 'wrong' });
    client.write({ n: 1 });
    const [err] = (await once(client, 'error')) as [LinkError];
    expect(err.code).toBe(14);
    expect(served).toBe(0);

    const refused: string[] = [];
    const client2 = connectLink(address, json, { ...HELLO, to: 'someone-else' });
    client2.on('refused', (why: string) => refused.push(why));
    await once(client2, 'error');
    expect(refused).toEqual(["the peer port is replica 'owner', not 'someone-else'"]);
  });

  it('drops a HELLO that is JSON of the wrong shape, without throwing in the server', async () => {
    // Found by `npm run fuzz` (against the link before the handshake): a HELLO of `null`, or
    // fields of the wrong type, made the server read properties of what was not an object, outside
    // any catch, and one unauthenticated connection ended the replica.
    const refusals: string[] = [];
    const server = createServer((socket) => {
      const ch = acceptLink(socket, () => json, SERVER);
      ch.on('refused', (why: string) => refusals.push(why));
      ch.on('hello', () => refusals.push('accepted'));
    });
    servers.push(server);
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const port = (server.address() as { port: number }).port;
    const payloads = ['null', '[]', '"exec"', '7', '{"kind":5,"from":"x","to":"owner","nonce":"AA==","mac":"AA=="}', '{"kind":"exec","from":{},"to":"owner","nonce":7,"mac":null}'];
    for (const payload of payloads) {
      const body = Buffer.from(payload);
      const header = Buffer.alloc(5);
      header.writeUInt32BE(1 + body.length, 0);
      header[4] = 1; // HELLO
      const raw = connect(port, '127.0.0.1', () => raw.write(Buffer.concat([LINK_MAGIC, header, body])));
      raw.on('error', () => undefined);
      raw.resume();
      await once(raw, 'close');
    }
    expect(refusals).toHaveLength(payloads.length);
    expect(refusals).not.toContain('accepted');
  });

  describe('a kept connection (reuse)', () => {
    /**
     * A server that offers reuse (or not) and answers each channel by doubling its numbers, then
     * ends; it counts the TCP connections it accepted and the channels it served.
     */
    async function keepingServer(opts: { offer: boolean; onChannel?: (ch: LinkChannel<Msg>) => void }) {
      const seen = { connections: 0, channels: 0, froms: [] as string[] };
      const serve = (ch: LinkChannel<Msg>) => {
        seen.channels++;
        seen.froms.push(ch.hello?.from ?? '?');
        ch.once('successor', serve);
        if (opts.onChannel) return opts.onChannel(ch);
        ch.on('data', (m: Msg) => ch.write({ n: (m.n ?? 0) * 2 }));
        ch.on('end', () => ch.end());
      };
      const server = createServer((socket) => {
        seen.connections++;
        const ch = acceptLink(socket, () => json, { ...SERVER, reuse: opts.offer });
        ch.once('hello', () => serve(ch));
      });
      servers.push(server);
      server.listen(0, '127.0.0.1');
      await once(server, 'listening');
      return { address: `127.0.0.1:${(server.address() as { port: number }).port}`, seen };
    }

    /** One exchange on `ch`: writes n, ends, resolves with what came back and the successor, if any. */
    function exchange(ch: LinkChannel<Msg>, n: number): Promise<{ got: Msg[]; next: LinkChannel<Msg> | null }> {
      let next: LinkChannel<Msg> | null = null;
      ch.once('successor', (s: LinkChannel<Msg>) => (next = s));
      const got = collect(ch);
      ch.write({ n });
      ch.end();
      return once(ch, 'close').then(async () => ({ got: await got, next }));
    }

    it('carries channel after channel on one connection when both sides agree, each served afresh', async () => {
      const { address, seen } = await keepingServer({ offer: true });
      let ch = connectLink(address, json, { ...HELLO, reuse: true });
      for (let i = 1; i <= 5; i++) {
        const { got, next } = await exchange(ch, i);
        expect(got).toEqual([{ n: 2 * i }]);
        expect(next, `channel ${i} handed its connection on`).not.toBeNull();
        ch = next!;
      }
      expect(seen.connections).toBe(1);
      expect(seen.channels).toBe(6); // five served, the sixth waits for its first frame
      expect(new Set(seen.froms)).toEqual(new Set(['test'])); // every channel keeps the authenticated hello
      ch.cancel();
    });

    it('closes after one channel unless both sides agreed: an older server, or a client that did not ask', async () => {
      for (const [offer, ask] of [
        [false, true],
        [true, false],
      ] as const) {
        const { address, seen } = await keepingServer({ offer });
        const { got, next } = await exchange(connectLink(address, json, { ...HELLO, reuse: ask }), 3);
        expect(got).toEqual([{ n: 6 }]);
        expect(next, `offer=${offer} ask=${ask}`).toBeNull();
        expect(seen.connections).toBe(1);
      }
    });

    it('keeps nothing of a channel that failed or was cancelled: the connection closes with it', async () => {
      // A STATUS (the owner refused the exec): the client's channel fails, no successor.
      const failing = await keepingServer({ offer: true, onChannel: (ch) => ch.once('data', () => ch.emit('error', { code: 8, details: 'busy' })) });
      const client = connectLink(failing.address, json, { ...HELLO, reuse: true });
      const successors: unknown[] = [];
      client.on('successor', (s: unknown) => successors.push(s));
      client.write({ n: 1 });
      const [err] = (await once(client, 'error')) as [LinkError];
      expect(err.code).toBe(8);
      if (!client.closed) await once(client, 'close');
      expect(successors).toEqual([]);

      // A cancel at the client: the server sees the cancel, and no second channel.
      let serverSide!: LinkChannel<Msg>;
      const cancelled = await keepingServer({
        offer: true,
        onChannel: (ch) => {
          serverSide = ch;
          ch.sendMetadata();
        },
      });
      const c2 = connectLink(cancelled.address, json, { ...HELLO, reuse: true });
      c2.on('error', () => undefined);
      c2.write({ n: 1 });
      await once(c2, 'metadata');
      c2.cancel();
      await once(serverSide, 'cancelled');
      expect(cancelled.seen.channels).toBe(1);
    });

    it('a failure the server reports after its END closes the connection instead of reaching the next channel', async () => {
      // The server ends its side, then fails: a STATUS now could be read as the next channel's.
      const { address, seen } = await keepingServer({
        offer: true,
        onChannel: (ch) => {
          ch.once('data', () => {
            ch.end({ n: 42 });
            setImmediate(() => ch.emit('error', { code: 13, details: 'late failure' }));
          });
        },
      });
      const client = connectLink(address, json, { ...HELLO, reuse: true });
      const got = collect(client);
      client.write({ n: 1 });
      expect(await got).toEqual([{ n: 42 }]);
      // The client has not ended yet, so the channel is not over: the late failure closes the connection.
      const errors: LinkError[] = [];
      client.on('error', (e: LinkError) => errors.push(e));
      const successors: unknown[] = [];
      client.on('successor', (s: unknown) => successors.push(s));
      await new Promise((r) => setTimeout(r, 50));
      client.end();
      await once(client, 'close');
      expect(errors.map((e) => e.details)).not.toContain('late failure');
      expect(successors).toEqual([]);
      expect(seen.channels).toBe(1);
    });

    it('a kept connection is still watched: a server that goes away fails the idle channel waiting on it', async () => {
      let serverSocket!: Socket;
      const { address } = await keepingServer({
        offer: true,
        onChannel: (ch) => {
          serverSocket = (ch as unknown as { socket: Socket }).socket;
          ch.on('data', (m: Msg) => ch.write(m));
          ch.on('end', () => ch.end());
        },
      });
      const { next } = await exchange(connectLink(address, json, { ...HELLO, reuse: true }), 1);
      expect(next).not.toBeNull();
      serverSocket.destroy();
      const [err] = (await once(next!, 'error')) as [LinkError];
      expect(err.code).toBe(14);
    });
  });
});
