// Target `forward-tcp`: OpenShell ForwardTcp with bad init frames, unknown SSH-session tokens
// (for the live sandbox too), data before init, init twice, and garbage; in every token mode.
import { randomUUID } from 'node:crypto';
import { messageType, encodeMessage } from '@sandgate/protocols';
import { grpcFrame, rawCall } from './h2.ts';
import { bytes, chance, int, junkString, pick, type Rng } from './rng.ts';
import { authHeaders, type FuzzContext, type FuzzTarget, type TokenMode } from './target.ts';
import type { Tally } from './tally.ts';

const Frame = messageType('openshell.v1.TcpForwardFrame');
const enc = (value: object) => grpcFrame(encodeMessage(Frame, value));

function init(rng: Rng, ctx: FuzzContext): { label: string; init: Record<string, unknown> } {
  const token = pick(rng, ['', 'unknown', `sgs_${junkString(rng, 40).replace(/[^A-Za-z0-9]/g, 'x')}`, 'x'.repeat(100_000), ctx.adminToken]);
  const target = pick<Record<string, unknown>>(rng, [
    { ssh: {} },
    { tcp: { host: '127.0.0.1', port: 22 } },
    { tcp: { host: 'example.com', port: 80 } },
    { tcp: { host: '169.254.169.254', port: 80 } },
    { tcp: { host: '', port: 0 } },
    { tcp: { host: '127.0.0.1', port: 70_000 } },
    { tcp: { host: 'x'.repeat(5000), port: 1 } },
    {},
  ]);
  const sandbox = pick(rng, [
    { label: 'live', id: ctx.sandbox.id },
    { label: 'unknown', id: randomUUID() },
    { label: 'empty', id: '' },
    { label: 'junk', id: junkString(rng, int(rng, 1, 300)) },
  ]);
  return { label: sandbox.label, init: { sandbox_id: sandbox.id, service_id: chance(rng, 0.2) ? junkString(rng, 20) : '', authorization_token: token, ...target } };
}

export function forwardTcpTarget(tally: Tally): FuzzTarget {
  return {
    name: 'forward-tcp',
    async send(rng, index, replica, ctx) {
      const mode = pick<TokenMode>(rng, ['none', 'garbage', 'admin']);
      const first = init(rng, ctx);
      const data = () => enc({ data: bytes(rng, int(rng, 0, 4096)) });
      let frames: Buffer[];
      let shape: string;
      switch (int(rng, 0, 7)) {
        case 0:
          shape = 'init';
          frames = [enc({ init: first.init })];
          break;
        case 1:
          shape = 'data-before-init';
          frames = [data(), enc({ init: first.init })];
          break;
        case 2:
          shape = 'init-then-data';
          frames = [enc({ init: first.init }), data(), data()];
          break;
        case 3:
          shape = 'init-twice';
          frames = [enc({ init: first.init }), enc({ init: first.init })];
          break;
        case 4:
          shape = 'garbage';
          frames = [grpcFrame(bytes(rng, int(rng, 0, 1024)))];
          break;
        case 5:
          shape = 'empty-init';
          frames = [enc({ init: {} })];
          break;
        case 6:
          shape = 'truncated-init';
          frames = [enc({ init: first.init }).subarray(0, int(rng, 1, 20))];
          break;
        default:
          shape = 'no-frames';
          frames = [];
      }
      tally.note(`${shape}:${first.label}`);
      const after = chance(rng, 0.6) ? 'end' : chance(rng, 0.7) ? 'hold' : 'reset';
      const outcome = await rawCall(ctx.sessions.get(`fwd:${replica.id}:${index % 8}`, `${replica.host}:${replica.grpcPort}`), {
        path: '/openshell.v1.OpenShell/ForwardTcp',
        headers: authHeaders(rng, mode, ctx),
        body: frames,
        after,
        timeoutMs: after === 'hold' ? Math.min(ctx.timeoutMs, 2000) : ctx.timeoutMs,
      });
      tally.noteTimeout(outcome, `${shape}:${after}`);
      return outcome;
    },
  };
}
