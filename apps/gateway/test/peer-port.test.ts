// The peer port: links are told apart from gRPC, checked against the peer secret, and handed to
// the relay their HELLO names.
import { afterEach, describe, expect, it } from 'vitest';
import { once } from 'node:events';
import { Server } from '@grpc/grpc-js';
import { connectLink, type LinkChannel, type LinkError } from '@sandgate/relay';
import type { ExecFrame, TcpFrame } from '@sandgate/protocols';
import { createLogger } from '@sandgate/telemetry';
import { execFrameCodec, servePeerPort, tcpFrameCodec, type PeerPort } from '../src/relay/peer-port.ts';

let port: PeerPort | undefined;
afterEach(() => port?.close());

async function start() {
  const seen: { exec: LinkChannel<ExecFrame>[]; tcp: LinkChannel<TcpFrame>[] } = { exec: [], tcp: [] };
  port = await servePeerPort({
    host: '127.0.0.1',
    port: 0,
    peerSecret: 'right',
    grpc: new Server(),
    onExec: (ch) => {
      seen.exec.push(ch);
      ch.sendMetadata();
      ch.once('data', (f: ExecFrame) => ch.end({ exit: { exit_code: f.start?.argv?.length ?? -1 } }));
    },
    onTcp: (ch) => seen.tcp.push(ch),
    log: createLogger({ component: 'test' }, 'error'),
  });
  return { address: `127.0.0.1:${port.port}`, seen };
}

describe('peer port', () => {
  it('hands an exec link with the right secret to the exec relay, decoding ExecFrames', async () => {
    const { address, seen } = await start();
    const link = connectLink(address, execFrameCodec, { secret: 'right', kind: 'exec', from: 't' });
    const frames: ExecFrame[] = [];
    link.on('data', (f: ExecFrame) => frames.push(f));
    link.write({ start: { exec_id: 'e', sandbox_id: 's', argv: ['a', 'b', 'c'] } });
    await once(link, 'end');
    expect(frames).toEqual([{ exit: { exit_code: 3 } }]);
    expect(seen.exec).toHaveLength(1);
    expect(seen.tcp).toHaveLength(0);
  });

  it('refuses a wrong secret and an unknown kind before anything is served', async () => {
    const { address, seen } = await start();
    for (const hello of [
      { secret: 'wrong', kind: 'exec', from: 't' },
      { secret: 'right', kind: 'other', from: 't' },
    ]) {
      const link = connectLink(address, tcpFrameCodec, hello);
      link.write({ data: Buffer.from('x') });
      const [err] = (await once(link, 'error')) as [LinkError];
      expect(err.code).toBe(14);
    }
    expect(seen.exec).toHaveLength(0);
    expect(seen.tcp).toHaveLength(0);
  });
});
