// What every fuzz target gets and gives: the cluster's addresses and credentials in, an outcome
// label per input out (see Tally).
import type { SessionCache } from './h2.ts';
import type { Rng } from './rng.ts';
import { junkString, pick } from './rng.ts';

export interface ReplicaAddresses {
  id: string;
  host: string;
  grpcPort: number;
  httpPort: number;
  peerPort: number;
}

export interface FuzzContext {
  replicas: ReplicaAddresses[];
  /** A valid admin API token (TokenStore) on the cluster's Redis. */
  adminToken: string;
  /**
   * The peer secret the replicas use (derived from the Redis password, as they derive it): the
   * peer target signs HELLOs that are right in all but one respect, and a control that must pass.
   */
  peerSecret: string;
  /** Whether the replicas refuse anonymous calls (probed at start; false before issue 13's auth lands). */
  authEnforced: boolean;
  /** A live sandbox the supervisor-protocol and ForwardTcp inputs aim at (never with its real credential). */
  sandbox: { id: string; name: string };
  timeoutMs: number;
  /**
   * How many inputs may still reach CreateSandbox as an authorised, decodable request (each
   * starts real compute); beyond it such bodies are made undecodable. Counted in the report.
   */
  createBudget: { left: number; used: number; guarded: number };
  sessions: SessionCache;
}

export interface FuzzTarget {
  name: string;
  /** Sends input `index` (drawing only from `rng`) to replica `replica`; returns its outcome label(s). */
  send(rng: Rng, index: number, replica: ReplicaAddresses, ctx: FuzzContext): Promise<string | string[]>;
}

export type TokenMode = 'none' | 'garbage' | 'admin';

/** The authorization headers of one token mode (garbage: many shapes of a wrong credential). */
export function authHeaders(rng: Rng, mode: TokenMode, ctx: FuzzContext): Record<string, string | string[]> {
  if (mode === 'none') return {};
  if (mode === 'admin') return { authorization: `Bearer ${ctx.adminToken}` };
  const forged = ctx.adminToken.slice(0, -1) + (ctx.adminToken.endsWith('A') ? 'B' : 'A');
  return {
    authorization: pick(rng, [
      'Bearer garbage',
      `Bearer sgt_${junkString(rng, 43).replace(/[^A-Za-z0-9_-]/g, 'x')}`,
      `Bearer ${forged}`,
      `bearer ${ctx.adminToken.toUpperCase()}`,
      'Bearer',
      'Bearer ',
      `Basic ${Buffer.from('admin:admin').toString('base64')}`,
      `Bearer ${'A'.repeat(8192)}`,
      'Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhZG1pbiIsInJvbGVzIjpbImFkbWluIl19.',
      `Bearer ${ctx.adminToken} extra`,
      ctx.adminToken,
    ]),
  };
}

/** Whether a call in this token mode acts with authority (admin token, or no authentication at all). */
export function authorised(mode: TokenMode, ctx: FuzzContext): boolean {
  return mode === 'admin' || !ctx.authEnforced;
}
