// Target `grpc`: every method of openshell.v1.OpenShell (implemented or not, iterated from the
// service definition) and sandgate.v1.SupervisorGateway on the public port, as raw HTTP/2:
// malformed bodies, lying length prefixes, the compressed flag, wrong content types and verbs,
// huge and many metadata entries, streams reset midway, many concurrent streams; anonymous,
// with a garbage token and with a valid admin token.
import { root } from '@sandgate/protocols';
import { connectH2, grpcFrame, rawCall, type RawCall } from './h2.ts';
import { body, type BodyKind, type PbType } from './messages.ts';
import { bytes, chance, int, junkString, pick, type Rng } from './rng.ts';
import { authHeaders, authorised, type FuzzContext, type FuzzTarget, type ReplicaAddresses, type TokenMode } from './target.ts';
import type { Tally } from './tally.ts';

export interface MethodInfo {
  service: string;
  name: string;
  path: string;
  requestType: PbType;
  requestStream: boolean;
  responseStream: boolean;
}

export function methodsOf(serviceName: string): MethodInfo[] {
  const service = root.lookupService(serviceName);
  return service.methodsArray.map((m) => {
    m.resolve();
    return {
      service: serviceName,
      name: m.name,
      path: `/${serviceName}/${m.name}`,
      requestType: m.resolvedRequestType!,
      requestStream: Boolean(m.requestStream),
      responseStream: Boolean(m.responseStream),
    };
  });
}

export const PUBLIC_METHODS = [...methodsOf('openshell.v1.OpenShell'), ...methodsOf('sandgate.v1.SupervisorGateway')];

const BODY_WEIGHTS: [BodyKind, number][] = [
  ['random-bytes', 30],
  ['random-wire', 20],
  ['wrong-type', 20],
  ['right-type-hostile', 20],
  ['deep-nesting', 2],
  ['truncated-wire', 6],
  ['empty', 4],
  ['big-field', 0.3],
];

function weighted<T>(rng: Rng, items: [T, number][]): T {
  const total = items.reduce((a, [, w]) => a + w, 0);
  let r = rng() * total;
  for (const [item, w] of items) if ((r -= w) < 0) return item;
  return items[items.length - 1]![0];
}

type Mutation =
  | 'body'
  | 'two-messages'
  | 'no-message'
  | 'length-truncated'
  | 'length-oversized'
  | 'compressed-flag'
  | 'bad-flag'
  | 'content-type'
  | 'verb-and-te'
  | 'metadata-huge'
  | 'metadata-many'
  | 'metadata-odd'
  | 'reset-midway'
  | 'hold'
  | 'split-frames'
  | 'bad-path'
  | 'burst';

const MUTATIONS: [Mutation, number][] = [
  ['body', 40],
  ['two-messages', 4],
  ['no-message', 4],
  ['length-truncated', 5],
  ['length-oversized', 5],
  ['compressed-flag', 4],
  ['bad-flag', 2],
  ['content-type', 4],
  ['verb-and-te', 3],
  ['metadata-huge', 3],
  ['metadata-many', 3],
  ['metadata-odd', 4],
  ['reset-midway', 6],
  ['hold', 3],
  ['split-frames', 4],
  ['bad-path', 4],
  ['burst', 0.4],
];

/** Mutations that may make the server end the whole HTTP/2 session: they get a session of their own. */
const SESSION_RISK = new Set<Mutation>(['metadata-huge', 'metadata-many', 'metadata-odd', 'verb-and-te', 'burst']);

/**
 * CreateSandbox starts real compute when it succeeds: an authorised, decodable request uses the
 * run's budget; past it the payload is replaced by one no decoder accepts (counted).
 */
export function guardCreate(method: MethodInfo, payload: Buffer, mode: TokenMode, ctx: FuzzContext, tally: Tally): Buffer {
  if (method.name !== 'CreateSandbox' || !authorised(mode, ctx)) return payload;
  try {
    method.requestType.decode(payload);
  } catch {
    return payload;
  }
  if (ctx.createBudget.left > 0) {
    ctx.createBudget.left--;
    ctx.createBudget.used++;
    tally.note('create-budget-used');
    return payload;
  }
  ctx.createBudget.guarded++;
  tally.note('create-guarded');
  return Buffer.from([0x0f]);
}

export function grpcTarget(tally: Tally): FuzzTarget {
  return {
    name: 'grpc',
    async send(rng, index, replica, ctx) {
      const method = pick(rng, PUBLIC_METHODS);
      const mode = pick<TokenMode>(rng, ['none', 'garbage', 'admin']);
      const mutation = weighted(rng, MUTATIONS);
      tally.note(`method:${method.name}`);
      tally.note(`mutation:${mutation}`);
      if (mutation === 'burst') return burst(rng, replica, ctx, tally);
      const call = buildCall(rng, method, mode, mutation, ctx, tally);
      const authority = `${replica.host}:${replica.grpcPort}`;
      let outcome: string;
      if (SESSION_RISK.has(mutation)) {
        const session = connectH2(authority);
        try {
          outcome = await rawCall(session, call);
        } finally {
          session.destroy();
        }
      } else outcome = await rawCall(ctx.sessions.get(`grpc:${replica.id}:${index % 8}`, authority), call);
      tally.noteTimeout(outcome, `${method.name}/${mutation}`);
      noteUnauthenticatedSuccess(method, mode, outcome, ctx, tally);
      return outcome;
    },
  };
}

function buildCall(rng: Rng, method: MethodInfo, mode: TokenMode, mutation: Mutation, ctx: FuzzContext, tally: Tally): RawCall {
  const headers: Record<string, string | string[] | null> = { ...authHeaders(rng, mode, ctx) };
  const payload = () => guardCreate(method, body(rng, weighted(rng, BODY_WEIGHTS), method.requestType), mode, ctx, tally);
  const call: RawCall = { path: method.path, headers, body: [], timeoutMs: ctx.timeoutMs };
  switch (mutation) {
    case 'body':
      call.body = [grpcFrame(payload())];
      break;
    case 'two-messages':
      call.body = [grpcFrame(payload()), grpcFrame(payload())];
      break;
    case 'no-message':
      break;
    case 'length-truncated': {
      const p = payload();
      call.body = [grpcFrame(p, { length: p.length + int(rng, 1, 100_000) })];
      break;
    }
    case 'length-oversized':
      call.body = [grpcFrame(bytes(rng, int(rng, 0, 64)), { length: pick(rng, [4 * 1024 * 1024 + 1, 64 * 1024 * 1024, 0x7fffffff, 0xffffffff]) })];
      break;
    case 'compressed-flag': {
      call.body = [grpcFrame(payload(), { compressed: true })];
      const enc = pick(rng, [null, 'gzip', 'deflate', 'br', 'identity', junkString(rng, 8).replace(/[^a-z]/g, 'z')]);
      if (enc) headers['grpc-encoding'] = enc;
      break;
    }
    case 'bad-flag': {
      const f = grpcFrame(payload());
      f[0] = pick(rng, [2, 0x80, 0xff]);
      call.body = [f];
      break;
    }
    case 'content-type':
      headers['content-type'] = pick(rng, [null, 'application/json', 'text/html', 'application/grpc+json', 'application/grpcx', 'application/grpc-web', '', 'multipart/form-data; boundary=x']);
      call.body = [grpcFrame(payload())];
      break;
    case 'verb-and-te':
      Object.assign(headers, pick(rng, [{ ':method': 'GET' }, { ':method': 'PUT' }, { ':method': 'OPTIONS' }, { te: null }, { ':scheme': 'ftp' }]));
      call.body = [grpcFrame(payload())];
      break;
    case 'metadata-huge':
      headers[pick(rng, ['x-fuzz', 'authorization', 'grpc-timeout', 'x-sandgate-credential', 'user-agent', 'x-fuzz-bin'])] = 'A'.repeat(pick(rng, [8 * 1024, 64 * 1024, 256 * 1024, 1024 * 1024]));
      call.body = [grpcFrame(payload())];
      break;
    case 'metadata-many': {
      const n = pick(rng, [100, 500, 2000, 10_000]);
      for (let i = 0; i < n; i++) headers[`x-fuzz-${i}`] = junkString(rng, int(rng, 0, 40)).replace(/[^\x20-\x7e]/g, 'x');
      call.body = [grpcFrame(payload())];
      break;
    }
    case 'metadata-odd':
      Object.assign(
        headers,
        pick(rng, [
          { 'grpc-timeout': pick(rng, ['0n', '-1S', '99999999999H', 'abc', '1', '1X', '']) },
          { 'x-meta-bin': pick(rng, ['!!!notbase64', '====', 'A'.repeat(10_001)]) },
          { 'grpc-status': '0', 'grpc-message': 'injected' },
          { 'x-sandgate-sandbox-id': ctx.sandbox.id, 'x-sandgate-credential': 'wrong' },
          { 'x-sandgate-peer-secret': 'guess', 'x-sandgate-from-replica': 'r0' },
          { 'grpc-accept-encoding': junkString(rng, 100).replace(/[^\x20-\x7e]/g, 'x') },
          { ':authority': junkString(rng, 300).replace(/[^\x21-\x7e]/g, 'x') },
        ]),
      );
      call.body = [grpcFrame(payload())];
      break;
    case 'reset-midway': {
      const full = grpcFrame(payload());
      call.body = [full.subarray(0, int(rng, 0, full.length))];
      call.after = 'reset';
      break;
    }
    case 'hold':
      call.body = [grpcFrame(payload())];
      call.after = 'hold';
      call.timeoutMs = Math.min(ctx.timeoutMs, 1500);
      break;
    case 'split-frames': {
      // One or more valid-looking frames cut at random points into many DATA frames.
      const all = Buffer.concat(Array.from({ length: int(rng, 1, 3) }, () => grpcFrame(payload())));
      let at = 0;
      while (at < all.length) {
        const n = int(rng, 1, 7);
        call.body.push(all.subarray(at, at + n));
        at += n;
      }
      break;
    }
    case 'bad-path':
      call.path = pick(rng, [
        `/${method.service}/NoSuchMethod`,
        `/${method.service}/${method.name.toLowerCase()}`,
        `/${method.service}/${method.name}/extra`,
        `/${method.service}/../sandgate.v1.Peer/KillExec`,
        '/sandgate.v1.Peer/KillExec',
        '/grpc.health.v1.Health/Check',
        '/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo',
        '/',
        '*',
        `/${'a'.repeat(10_000)}`,
        `/${method.service}/${method.name}?x=1`,
      ]);
      call.body = [grpcFrame(payload())];
      break;
    case 'burst':
      break;
  }
  return call;
}

/**
 * Where the replicas authenticate, an OpenShell call without a valid token that succeeds is a
 * hole: counted (fuzz.ts fails the run on any).
 */
function noteUnauthenticatedSuccess(method: MethodInfo, mode: TokenMode, outcome: string, ctx: FuzzContext, tally: Tally): void {
  if (!ctx.authEnforced || mode === 'admin' || method.service !== 'openshell.v1.OpenShell') return;
  // What calls without a valid token got (the report lists it): UNAUTHENTICATED, or an answer
  // grpc-js gives before any handler runs (undecodable body, oversized message, bad HTTP/2).
  tally.note(`unauth-outcome:${outcome}`);
  // Statuses only a handler that ran past authentication can give.
  if (/^grpc (OK|NOT_FOUND|ALREADY_EXISTS|FAILED_PRECONDITION|PERMISSION_DENIED|ABORTED|OUT_OF_RANGE)$/.test(outcome)) tally.note(`unauthenticated-ok:${method.name} (${outcome})`);
}

/** Many concurrent streams on one fresh session; about half are reset before they are answered. */
async function burst(rng: Rng, replica: ReplicaAddresses, ctx: FuzzContext, tally: Tally): Promise<string[]> {
  const session = connectH2(`${replica.host}:${replica.grpcPort}`);
  const n = pick(rng, [50, 200, 500]);
  const calls: Promise<string>[] = [];
  for (let i = 0; i < n; i++) {
    let method = pick(rng, PUBLIC_METHODS);
    if (method.name === 'CreateSandbox') method = PUBLIC_METHODS[0]!;
    const mode = pick<TokenMode>(rng, ['none', 'garbage', 'admin']);
    const p = guardCreate(method, body(rng, chance(rng, 0.5) ? 'random-bytes' : 'wrong-type', method.requestType), mode, ctx, tally);
    calls.push(
      rawCall(session, { path: method.path, headers: authHeaders(rng, mode, ctx), body: [grpcFrame(p)], after: chance(rng, 0.5) ? 'reset' : 'end', timeoutMs: ctx.timeoutMs }).then((o) => {
        noteUnauthenticatedSuccess(method, mode, o, ctx, tally);
        return o;
      }),
    );
  }
  try {
    const outcomes = (await Promise.all(calls)).map((o) => `burst: ${o}`);
    tally.noteTimeout(outcomes, `burst of ${n}`);
    return outcomes;
  } finally {
    session.destroy();
  }
}

