// Target `supervisor`: the supervisor protocol (Control, ExecChannel, TcpChannel) on the public
// port, without credentials, with wrong ones (for the live sandbox and for ids that do not
// exist), and with frames that are garbage, of the wrong type, or well-typed in the wrong order.
// The live sandbox's real supervisor must keep its session through all of it.
import { randomUUID } from 'node:crypto';
import { messageType, encodeMessage } from '@sandgate/protocols';
import { grpcFrame, rawCall } from './h2.ts';
import { body, type BodyKind } from './messages.ts';
import { bytes, chance, int, junkString, pick, type Rng } from './rng.ts';
import type { FuzzContext, FuzzTarget } from './target.ts';
import type { Tally } from './tally.ts';

const SupervisorMessage = messageType('sandgate.v1.SupervisorMessage');
const ExecFrame = messageType('sandgate.v1.ExecFrame');
const TcpFrame = messageType('sandgate.v1.TcpFrame');

const enc = (type: typeof SupervisorMessage, value: object) => grpcFrame(encodeMessage(type, value));

type Creds = { label: string; headers: Record<string, string | string[]>; sandboxId: string };

function credentials(rng: Rng, ctx: FuzzContext): Creds {
  const live = ctx.sandbox.id;
  const other = randomUUID();
  return pick<Creds>(rng, [
    { label: 'none', headers: {}, sandboxId: live },
    { label: 'id-only', headers: { 'x-sandgate-sandbox-id': live }, sandboxId: live },
    { label: 'wrong-credential', headers: { 'x-sandgate-sandbox-id': live, 'x-sandgate-credential': junkString(rng, 43).replace(/[^A-Za-z0-9_-]/g, 'x') }, sandboxId: live },
    { label: 'empty-credential', headers: { 'x-sandgate-sandbox-id': live, 'x-sandgate-credential': '' }, sandboxId: live },
    { label: 'huge-credential', headers: { 'x-sandgate-sandbox-id': live, 'x-sandgate-credential': 'x'.repeat(64 * 1024) }, sandboxId: live },
    { label: 'two-credentials', headers: { 'x-sandgate-sandbox-id': live, 'x-sandgate-credential': ['a', 'b'] }, sandboxId: live },
    { label: 'unknown-sandbox', headers: { 'x-sandgate-sandbox-id': other, 'x-sandgate-credential': 'whatever' }, sandboxId: other },
    { label: 'mismatched-ids', headers: { 'x-sandgate-sandbox-id': other, 'x-sandgate-credential': 'whatever' }, sandboxId: live },
  ]);
}

/** Control streams: what the first (and later) messages are. */
function controlFrames(rng: Rng, sandboxId: string): Buffer[] {
  const hello = { hello: { sandbox_id: sandboxId, instance_id: randomUUID(), main_pid: int(rng, -1, 100_000) } };
  switch (int(rng, 0, 11)) {
    case 0:
      return [enc(SupervisorMessage, hello)];
    case 1:
      return [enc(SupervisorMessage, { heartbeat: { sent_at_ms: Date.now() } })];
    case 2:
      return [enc(SupervisorMessage, { main_exit: { instance_id: 'x', exit_code: 137 } }), enc(SupervisorMessage, hello)];
    case 3:
      return [enc(SupervisorMessage, hello), enc(SupervisorMessage, hello)];
    case 4:
      return [enc(SupervisorMessage, { hello: { sandbox_id: '', instance_id: '' } })];
    case 5:
      return [enc(SupervisorMessage, { exec_kill_result: { exec_id: 'x', request_id: 'y', killed: 5 } })];
    case 6:
      return [enc(SupervisorMessage, { policy_applied: { revision: 99, error: 'x' } }), enc(SupervisorMessage, hello)];
    case 7:
      return [grpcFrame(bytes(rng, int(rng, 0, 512)))];
    case 8:
      return [enc(SupervisorMessage, hello).subarray(0, int(rng, 1, 8))];
    case 9:
      return [grpcFrame(body(rng, pick<BodyKind>(rng, ['wrong-type', 'random-wire', 'truncated-wire']), SupervisorMessage))];
    case 10:
      return [enc(SupervisorMessage, { hello: { sandbox_id: 'x'.repeat(100_000), instance_id: 'y'.repeat(100_000) } })];
    default:
      return [];
  }
}

/** ExecChannel / TcpChannel: attach frames that name nothing, or data before any attach. */
function channelFrames(rng: Rng, kind: 'exec' | 'tcp'): Buffer[] {
  const type = kind === 'exec' ? ExecFrame : TcpFrame;
  const attach = kind === 'exec' ? { attach: { exec_id: randomUUID(), session_id: randomUUID() } } : { attach: { channel_id: randomUUID(), session_id: randomUUID() } };
  const data = kind === 'exec' ? { stdout: bytes(rng, 64) } : { data: bytes(rng, 64) };
  switch (int(rng, 0, 6)) {
    case 0:
      return [enc(type, attach)];
    case 1:
      return [enc(type, data), enc(type, attach)];
    case 2:
      return [enc(type, attach), enc(type, data), enc(type, data)];
    case 3:
      return [grpcFrame(bytes(rng, int(rng, 0, 512)))];
    case 4:
      return [grpcFrame(body(rng, pick<BodyKind>(rng, ['wrong-type', 'random-wire', 'truncated-wire']), type))];
    case 5:
      return [enc(type, kind === 'exec' ? { attach: { exec_id: '', session_id: '' } } : { attach: {} })];
    default:
      return [];
  }
}

export function supervisorTarget(tally: Tally): FuzzTarget {
  return {
    name: 'supervisor',
    async send(rng, index, replica, ctx) {
      const method = pick(rng, ['Control', 'ExecChannel', 'TcpChannel'] as const);
      const creds = credentials(rng, ctx);
      tally.note(`${method}:${creds.label}`);
      const frames = method === 'Control' ? controlFrames(rng, creds.sandboxId) : channelFrames(rng, method === 'ExecChannel' ? 'exec' : 'tcp');
      // Half the streams stay open after their frames (as a real supervisor's would): the server
      // must still answer a refused one, not leave it waiting.
      const after = chance(rng, 0.5) ? 'end' : chance(rng, 0.8) ? 'hold' : 'reset';
      const authority = `${replica.host}:${replica.grpcPort}`;
      const outcome = await rawCall(ctx.sessions.get(`sup:${replica.id}:${index % 8}`, authority), {
        path: `/sandgate.v1.SupervisorGateway/${method}`,
        headers: creds.headers,
        body: frames,
        after,
        timeoutMs: after === 'hold' ? Math.min(ctx.timeoutMs, 2000) : ctx.timeoutMs,
      });
      tally.noteTimeout(outcome, `${method}:${frames.length} frames:${after}`);
      return outcome;
    },
  };
}
