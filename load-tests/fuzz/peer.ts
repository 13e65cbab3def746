// Target `peer`: the replica-to-replica port, which speaks only the authenticated peer link
// (magic `SGL2`; the server sends a CHALLENGE on accept, the client answers with a HELLO carrying
// an HMAC, the server answers PROOF; link-frames.ts). There is no gRPC on this port any more.
// Inputs: random bytes, fewer than four bytes, the wrong magic (the old `SGL1` link with its old
// HELLO, near misses), bad, lying, oversized and truncated frame lengths before the handshake,
// frames of every type before (or instead of) the HELLO, malformed HELLO JSON of every JSON type
// and every field type, HELLOs with a wrong MAC, a replayed HELLO, a HELLO for another replica,
// a correctly signed HELLO of an unknown kind, traffic after a refused HELLO, HTTP/2 prefaces
// with hostile frame sequences and gRPC calls to the old sandgate.v1.Peer service (all must be
// refused as not the link protocol), and other protocols' first bytes. A PROOF to any forged
// HELLO is a hole (noted `peer-hole:`, a failed check); a control handshake with a correct HELLO
// must get its PROOF, or the refusals prove nothing.
import { grpcFrame } from './h2.ts';
import { hostileSequence } from './h2-frames.ts';
import { framesIn, handshakeExchange, helloFrame, LINK_MAGIC, LinkFrame, linkFrame, MAX_FRAME_BYTES, MAX_HANDSHAKE_FRAME_BYTES, OLD_LINK_MAGIC, validHello, type Challenge } from './link-frames.ts';
import { body } from './messages.ts';
import { methodsOf } from './grpc-methods.ts';
import { exchange, type Exchange } from './raw.ts';
import { bytes, chance, int, junkString, pick, skewedLength, type Rng } from './rng.ts';
import type { FuzzContext, FuzzTarget, ReplicaAddresses } from './target.ts';
import type { Tally } from './tally.ts';

/** The old gRPC peer service's methods (KillExec, PushPolicy): now `call` links; gRPC bytes must be refused. */
const PEER_METHODS = methodsOf('sandgate.v1.Peer');
const FRAME_TYPES = Object.values(LinkFrame) as number[];
const NOT_HELLO = FRAME_TYPES.filter((t) => t !== LinkFrame.HELLO);

/** HELLO bodies that are not `{kind, from, to, nonce, mac}` strings: every JSON type, every field of every type. */
function malformedHello(rng: Rng): { kind: string; frame: Buffer } {
  const anyJson = (): unknown => pick(rng, [null, true, false, 0, -1, 1e308, '', 'x', [], ['a'], {}, { $ne: null }, junkString(rng, 40)]);
  const good = { kind: 'exec', from: 'r9', to: 'r0', nonce: Buffer.alloc(32, 1).toString('base64'), mac: Buffer.alloc(32, 2).toString('base64') };
  switch (int(rng, 0, 5)) {
    case 0:
      return { kind: 'hello-json-not-object', frame: helloFrame(pick(rng, [null, true, 0, 'hello', [], [good], 1.5])) };
    case 1: {
      const field = pick(rng, Object.keys(good));
      return { kind: `hello-${field}-wrong-type`, frame: helloFrame({ ...good, [field]: anyJson() }) };
    }
    case 2: {
      const field = pick(rng, Object.keys(good));
      const { [field as keyof typeof good]: _, ...rest } = good;
      return { kind: `hello-${field}-missing`, frame: helloFrame(rest) };
    }
    case 3:
      return { kind: 'hello-not-json', frame: linkFrame(LinkFrame.HELLO, pick(rng, [Buffer.from('{not json'), Buffer.from(''), bytes(rng, int(rng, 1, 200)), Buffer.from('{"kind":'), Buffer.from('\ufeff{}')])) };
    case 4:
      return { kind: 'hello-nonce-bad', frame: helloFrame({ ...good, nonce: pick(rng, ['', '!!!', Buffer.alloc(int(rng, 0, 64)).toString('base64'), 'A'.repeat(3000)]) }) };
    default:
      // Over the handshake limit: refused on the header, never buffered.
      return { kind: 'hello-oversized', frame: helloFrame({ ...good, from: 'x'.repeat(MAX_HANDSHAKE_FRAME_BYTES + int(rng, 1, 1 << 16)) }) };
  }
}

function linkInput(rng: Rng): { kind: string; chunks: Buffer[] } {
  const anyType = () => (chance(rng, 0.8) ? pick(rng, FRAME_TYPES) : int(rng, 0, 255));
  switch (int(rng, 0, 10)) {
    case 0:
      return { kind: 'magic+random-bytes', chunks: [LINK_MAGIC, bytes(rng, int(rng, 1, skewedLength(rng, 4096) + 1))] };
    case 1:
      return { kind: 'zero-length-frame', chunks: [LINK_MAGIC, linkFrame(anyType(), Buffer.alloc(0), 0)] };
    case 2:
      return { kind: 'oversized-length', chunks: [LINK_MAGIC, linkFrame(anyType(), bytes(rng, 16), pick(rng, [MAX_HANDSHAKE_FRAME_BYTES + 1, MAX_FRAME_BYTES + 1, 0x7fffffff, 0xffffffff]))] };
    case 3:
      // Claims a big HELLO, sends part of it: refused on the header, nothing buffered.
      return { kind: 'truncated-frame', chunks: [LINK_MAGIC, linkFrame(LinkFrame.HELLO, bytes(rng, int(rng, 0, 2048)), pick(rng, [3000, 4096, 1 << 20, MAX_FRAME_BYTES]))] };
    case 4: {
      // Well-formed frames of types other than HELLO, before any handshake.
      const frames = Array.from({ length: int(rng, 1, 6) }, () => linkFrame(pick(rng, NOT_HELLO), chance(rng, 0.5) ? bytes(rng, int(rng, 0, 256)) : Buffer.from(JSON.stringify({ code: 0, details: junkString(rng, 20) }))));
      return { kind: 'frames-before-handshake', chunks: [LINK_MAGIC, ...frames] };
    }
    case 5: {
      const m = malformedHello(rng);
      return { kind: m.kind, chunks: [LINK_MAGIC, m.frame] };
    }
    case 6: {
      // A malformed HELLO followed by traffic that would only be valid after a good one.
      const m = malformedHello(rng);
      return { kind: 'traffic-after-bad-hello', chunks: [LINK_MAGIC, m.frame, linkFrame(LinkFrame.MSG, bytes(rng, 32)), linkFrame(LinkFrame.END)] };
    }
    case 7:
      return { kind: 'header-split', chunks: [LINK_MAGIC, ...[...linkFrame(anyType(), bytes(rng, 8))].map((b) => Buffer.from([b]))] };
    case 8:
      return { kind: 'magic-twice', chunks: [LINK_MAGIC, LINK_MAGIC, linkFrame(LinkFrame.PING)] };
    case 9:
      // The first link protocol: magic SGL1 and a HELLO that carries the secret itself.
      return { kind: 'old-sgl1-link', chunks: [OLD_LINK_MAGIC, helloFrame({ secret: pick(rng, ['wrong', '', junkString(rng, 64)]), kind: pick(rng, ['exec', 'tcp', 'call']), from: 'r9' })] };
    default:
      return { kind: 'hello-without-magic', chunks: [helloFrame({ kind: 'exec', from: 'r9', to: 'r0', nonce: 'AA==', mac: 'AA==' })] };
  }
}
function otherInput(rng: Rng): { kind: string; chunks: Buffer[] } {
  switch (int(rng, 0, 4)) {
    case 0:
      return { kind: 'random-bytes', chunks: [bytes(rng, int(rng, 1, skewedLength(rng, 4096) + 1))] };
    case 1:
      return { kind: 'under-four-bytes', chunks: [pick(rng, [Buffer.from('S'), Buffer.from('SG'), Buffer.from('SGL'), bytes(rng, int(rng, 1, 3))])] };
    case 2:
      return { kind: 'near-magic', chunks: [pick(rng, [Buffer.from('SGL3'), Buffer.from('sgl2'), Buffer.from('SGL'), Buffer.from('PRI '), Buffer.from('SGL0')]), bytes(rng, 64)] };
    case 3:
      return { kind: 'http1', chunks: [Buffer.from('GET / HTTP/1.1\r\nHost: peer\r\n\r\n')] };
    default:
      return { kind: 'tls-hello', chunks: [Buffer.from([0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03]), bytes(rng, 160)] };
  }
}

/** Link frames the server sent back (its magic and CHALLENGE come first, unasked; then maybe STATUS). */
function linkReply(ex: Exchange, tally: Tally, kind: string): string {
  const { magic, frames } = framesIn(ex.received);
  const types = new Set(frames.map((f) => Object.entries(LinkFrame).find(([, v]) => v === f.type)?.[0] ?? `type${f.type}`));
  if (types.has('PROOF')) tally.note(`peer-hole:${kind} got a PROOF`);
  if (ex.received.length && !magic) types.add(`${ex.received.length} bytes without the magic`);
  const heard = types.size ? [...types].sort().join('+') : 'nothing';
  if (ex.closed) return `closed (${ex.ms < 100 ? '<100 ms' : ex.ms < 1000 ? '<1 s' : '≥1 s'}, heard ${heard}${ex.error ? `, ${ex.error}` : ''})`;
  return `timeout (open at the deadline, heard ${heard})`;
}

function handshakeOutcome(ex: { challenge: Challenge | null; after: number[]; closed: boolean; ms: number }): string {
  if (!ex.challenge) return ex.closed ? 'closed before a CHALLENGE' : 'timeout (no CHALLENGE)';
  if (ex.after.includes(LinkFrame.PROOF)) return 'PROOF (HELLO accepted)';
  const heard = ex.after.length ? ` after ${ex.after.map((t) => Object.entries(LinkFrame).find(([, v]) => v === t)?.[0] ?? `type${t}`).join('+')}` : '';
  return ex.closed ? `refused: closed${heard} (${ex.ms < 100 ? '<100 ms' : ex.ms < 1000 ? '<1 s' : '≥1 s'})` : `timeout (open at the deadline${heard})`;
}

/** HELLOs that are well-formed and signed, but wrong in one respect; and the control. */
async function handshakeInput(rng: Rng, replica: ReplicaAddresses, ctx: FuzzContext, tally: Tally, timeoutMs: number): Promise<string[]> {
  const secret = ctx.peerSecret;
  const go = (answer: (c: Challenge) => Buffer[]) => handshakeExchange(replica.host, replica.peerPort, answer, timeoutMs);
  const forged = async (kind: string, answer: (c: Challenge) => Buffer[]): Promise<string> => {
    tally.note(`hs:${kind}`);
    const out = handshakeOutcome(await go(answer));
    if (out.startsWith('PROOF')) tally.note(`peer-hole:${kind} got a PROOF`);
    tally.noteTimeout(out, `hs:${kind}`);
    return out;
  };
  const otherReplica = ctx.replicas.find((r) => r.id !== replica.id)?.id ?? 'r9';
  switch (int(rng, 0, 6)) {
    case 0:
      return [await forged('hello-wrong-secret', (c) => [LINK_MAGIC, validHello(`${secret}x`, c, { kind: pick(rng, ['exec', 'tcp', 'call']) }).frame])];
    case 1:
      return [await forged('hello-random-mac', (c) => [LINK_MAGIC, helloFrame({ ...validHello(secret, c).body, mac: bytes(rng, pick(rng, [0, 16, 31, 32, 33, 64])).toString('base64') })])];
    case 2:
      return [await forged('hello-mac-truncated', (c) => { const b = validHello(secret, c).body; return [LINK_MAGIC, helloFrame({ ...b, mac: Buffer.from(b.mac, 'base64').subarray(0, 31).toString('base64') })]; })];
    case 3:
      // Signed for another replica's name: the transcript binds `to`.
      return [await forged('hello-for-another-replica', (c) => [LINK_MAGIC, validHello(secret, c, { to: otherReplica }).frame])];
    case 4:
      return [await forged('hello-unknown-kind', (c) => [LINK_MAGIC, validHello(secret, c, { kind: pick(rng, ['nonsense', '', 'EXEC', 'exec ']) }).frame])];
    case 5:
      // A correct HELLO, then frames no client may send (a CHALLENGE, a PROOF, a second HELLO): the
      // handshake succeeds (the control), what follows must end the link, not crash the replica.
      tally.note('hs:control+garbage');
      return [handshakeOutcome(await go((c) => [LINK_MAGIC, validHello(secret, c).frame, linkFrame(pick(rng, [LinkFrame.CHALLENGE, LinkFrame.PROOF, LinkFrame.HELLO, LinkFrame.OPENED, LinkFrame.STATUS]), bytes(rng, 16))]))].map((o) => `control+garbage: ${o}`);
    default: {
      // Replay: a HELLO the server accepted (the control: it must get its PROOF), sent again on a
      // new connection, whose CHALLENGE has a fresh nonce.
      let captured: Buffer | null = null;
      const control = handshakeOutcome(await go((c) => { const h = validHello(secret, c, { kind: 'call' }); captured = h.frame; return [LINK_MAGIC, h.frame]; }));
      // A control the server closed on is a failure (a correct HELLO refused); one that got no
      // answer by the deadline under load is only inconclusive (counted, not failed).
      tally.note(`replay-control:${control.startsWith('PROOF') ? 'PROOF' : control.startsWith('refused') || control.startsWith('closed') ? 'NOT ACCEPTED' : 'no answer in time'}`);
      if (!control.startsWith('PROOF')) return [`replay control: ${control}`];
      return [`replay control: ${control}`, `replayed: ${await forged('hello-replayed', () => [LINK_MAGIC, captured!])}`];
    }
  }
}

export function peerTarget(tally: Tally): FuzzTarget {
  return {
    name: 'peer',
    async send(rng, _index, replica, ctx) {
      const timeoutMs = Math.min(ctx.timeoutMs, 1500);
      const r = rng();
      if (r < 0.45) {
        const input = linkInput(rng);
        tally.note(`link:${input.kind}`);
        const outcome = linkReply(await exchange({ host: replica.host, port: replica.peerPort, chunks: input.chunks, halfClose: chance(rng, 0.3), timeoutMs }), tally, input.kind);
        tally.noteTimeout(outcome, `link:${input.kind}`);
        return outcome;
      }
      if (r < 0.65) return handshakeInput(rng, replica, ctx, tally, timeoutMs);
      if (r < 0.78) {
        const input = otherInput(rng);
        tally.note(`raw:${input.kind}`);
        const outcome = linkReply(await exchange({ host: replica.host, port: replica.peerPort, chunks: input.chunks, halfClose: chance(rng, 0.3), timeoutMs }), tally, input.kind);
        tally.noteTimeout(outcome, `raw:${input.kind}`);
        return outcome;
      }
      // gRPC bytes to the peer port (HTTP/2 prefaces with hostile frame sequences, or a Peer call
      // with the old secret header): the port has no gRPC any more; it must refuse them as not
      // the link protocol, never answer in HTTP/2.
      const method = pick(rng, PEER_METHODS);
      const preface = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
      const settings = Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]);
      let label: string;
      let frames: Buffer[];
      if (chance(rng, 0.5)) {
        const seq = hostileSequence(rng, method.path);
        label = `h2:${seq.kind}`;
        frames = seq.frames;
      } else {
        label = `grpc:${method.name}`;
        frames = [grpcFrame(body(rng, pick(rng, ['random-bytes', 'random-wire', 'right-type-hostile'] as const), method.requestType))];
      }
      tally.note(label);
      const ex = await exchange({ host: replica.host, port: replica.peerPort, chunks: [preface, settings, ...frames], halfClose: false, timeoutMs });
      // Anything but the link's own magic and CHALLENGE back would be the server speaking HTTP/2.
      if (ex.received.length && !framesIn(ex.received).magic) tally.note('peer-hole:gRPC bytes answered without the link magic');
      const outcome = `gRPC bytes: ${linkReply(ex, tally, label)}`;
      tally.noteTimeout(outcome, label);
      return outcome;
    },
  };
}
