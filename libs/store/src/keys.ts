// The Redis key schema. Every key sandgate writes is named here, and only here (ARCHITECTURE.md
// lists the same keys; libs/store/test/key-schema.test.ts holds the two together).
//
// Two layouts of the same keys: `keys` for one Redis (plain or behind Sentinels), whose names
// every deployment has today, and `clusterKeys` for Redis Cluster, where each key carries a hash
// tag naming the slot it must share with the keys a script touches beside it (ARCHITECTURE.md,
// "Redis Cluster"). keysFor() picks by the connection.
import { createHash } from 'node:crypto';
import { Cluster } from 'ioredis';
import { poolWorkspace } from '@sandgate/core';

/** Cluster-wide counters (`sg:metrics:{name}`), read by tests and operators. */
export const ClusterCounter = {
  /** Processes the exec backstop job had to kill (zero in a healthy system). */
  execBackstopKills: 'exec_backstop_kills',
  /** Ephemeral sandboxes deleted while their supervisor was still connected. */
  ephemeralDeletedWhileConnected: 'ephemeral_deleted_while_connected',
} as const;
export type ClusterCounterName = (typeof ClusterCounter)[keyof typeof ClusterCounter];

/** The durable job queue: BullMQ keeps its own keys under `{prefix}:{name}:*`. */
export const jobQueue = { prefix: 'bull', name: 'sandgate' } as const;
/**
 * The queue on a Redis Cluster: BullMQ's scripts touch a whole queue at once, so its prefix is a
 * hash tag and the queue lives in one slot (as BullMQ's documentation asks).
 */
export const clusterJobQueue = { prefix: `{${jobQueue.prefix}}`, name: jobQueue.name } as const;

/** SSH tokens are bearer secrets: keys carry their SHA-256, so a key listing never shows one. */
export function tokenDigest(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

export const keys = {
  /** Hash: the sandbox record (`pb` = encoded openshell.v1.Sandbox, `rv`, `ws`, `name`, `cred`, `compute`, `ownfence`, `termfinal`, `runstart`, `pol`, `polrev`; a warm-pool member's `pool`, `poolgen`; a claimed one's `mainpending`, `claimed`; `sshsealed` once a delete closed it to new SSH sessions). */
  sandbox: (id: string) => `sg:sbx:${id}`,
  /** String: sandbox id, by workspace and name (uniqueness of names). */
  sandboxName: (workspace: string, name: string) => `sg:sbxname:${workspace}:${name}`,
  /** Set: every sandbox id (listing). */
  sandboxIndex: () => 'sg:sbxs',
  /** Sorted set: compute the reconcile sweep found without a record (member = sandbox id, score = first seen ms), deleted after a grace period. */
  orphans: () => 'sg:orphans',
  /** Hash, expiring: the replica holding the sandbox's supervisor session (`replica`, `session`, `fence`, `instance`). */
  owner: (id: string) => `sg:own:${id}`,
  /** Stream: every snapshot of the sandbox (`rv`, `pb`), then `deleted`; trimmed, expires after delete. */
  events: (id: string) => `sg:events:${id}`,
  /** Stream: the sandbox's log lines (gateway and sandbox sources), trimmed to the tail. */
  logs: (id: string) => `sg:logs:${id}`,
  /** Hash, expiring: the sandbox's CPU and memory as its owner replica last read them (`cpu`, `mem`, `at`, `replica`). */
  usage: (id: string) => `sg:usage:${id}`,
  /** Counter: fencing tokens for `owner`; only ever grows while the sandbox exists. */
  fence: (id: string) => `sg:fence:${id}`,
  /** String, expiring: a live replica and its addresses (JSON). */
  replica: (replicaId: string) => `sg:replica:${replicaId}`,
  /** String, never written: where older versions kept the peer secret in clear; deleted at start. */
  legacyPeerSecret: () => 'sg:peer-secret',
  /** Counter: one cluster-wide counter. */
  counter: (name: ClusterCounterName) => `sg:metrics:${name}`,
  /** Hash, expiring: the fleet's records by phase as the reconcile sweep last counted them (field = phase number, `at` = when), read by every replica's sandgate_sandboxes gauge. */
  phaseCounts: () => 'sg:metrics:phases',
  /** Hash, expiring: one SSH session (`sbx`, `run`, `exp`, `rev`, `created`), by the token's digest. */
  sshSession: (digest: string) => `sg:ssh:${digest}`,
  /** Sorted set, expiring with its last session: a sandbox's SSH sessions (member = token digest, score = the session key's expiry ms, +inf = none), removed with the record. */
  sandboxSshSessions: (sandboxId: string) => `sg:sshsbx:${sandboxId}`,
  /** Sorted set, expiring: live forwards on one token (member = forward id, score = heartbeat ms). */
  forwardsByToken: (digest: string) => `sg:sshfwd:tok:${digest}`,
  /** Sorted set, expiring: live forwards to one sandbox (member = forward id, score = heartbeat ms). */
  forwardsBySandbox: (sandboxId: string) => `sg:sshfwd:sbx:${sandboxId}`,
  /** Hash: one API token (`id`, `name`, `ws`, `role`, `created`, `exp`), by the token's SHA-256; the token itself is never stored. */
  apiToken: (digest: string) => `sg:tok:${digest}`,
  /** Hash: every API token's id → its digest (listing and revoking by id). */
  apiTokenIndex: () => 'sg:toks',
  /** Hash: one workspace (`id`, `created`, `rv`, `labels` JSON, `phase`, `deleted`). */
  workspace: (name: string) => `sg:ws:${name}`,
  /** Set: every workspace name. */
  workspaceIndex: () => 'sg:wss',
  /** Hash: a workspace's members, subject → JSON {id, role, created}. */
  workspaceMembers: (name: string) => `sg:wsmem:${name}`,
  /** Set: sandbox ids of one workspace (per-workspace quota and listing). */
  workspaceSandboxes: (name: string) => `sg:wssbx:${name}`,
  /** Hash: a workspace's creates and deletes under way (sandbox id → `create|delete <ms> <name>`), settled by the reconcile sweep when their replica died. */
  pendingSandboxes: (name: string) => `sg:wspend:${name}`,
  /** Sorted set, expiring: live execs of one workspace across replicas (member = exec id, score = heartbeat ms). */
  workspaceExecs: (name: string) => `sg:wsexec:${name}`,
  /** Hash: a warm pool's definition (`template` JSON: image, resources, policy; `size`, `gen`, `created`). Its members are the sandbox set of its workspace `pool:{name}` (workspaceSandboxes). */
  pool: (name: string) => `sg:pool:${name}`,
  /** Set: every warm pool's name. */
  poolIndex: () => 'sg:pools',
  /** Hash: a sandbox's exposed-service endpoints: `pb:<key>` encoded openshell.v1.ServiceEndpoint, `rv:<key>` its resource_version. */
  sandboxServices: (sandboxId: string) => `sg:svc:${sandboxId}`,
  /** Sorted set: a workspace's endpoint keys (`<sandbox>[--<service>]`), score = created_at_ms (listing order: creation, then name). */
  workspaceServices: (workspace: string) => `sg:svcs:${workspace}`,
} as const;

/** The shape both layouts share. */
export type KeySchema = { readonly [K in keyof typeof keys]: (typeof keys)[K] };

/**
 * Hash tags of the Redis Cluster layout. Only the text between a key's first `{` and the next
 * `}` picks its slot, so keys with the same tag always share a slot, and one script may touch
 * them together:
 * - `{s:ID}`: everything of one sandbox (record, owner and fence, events, logs, usage, its SSH
 *   session index, forwards and endpoints): the hot keys (owner renewals, logs) spread over the
 *   cluster with the sandboxes.
 * - `{w:NAME}`: one workspace (its hash, members, sandbox set, live execs, endpoint listing) and
 *   the names of its sandboxes.
 * - `{t:DIGEST}`: one SSH session token (its record and the forwards on it).
 * - a warm pool's definition is in its workspace's slot (`{w:pool:NAME}`), beside its members'
 *   set: a member's reservation checks the pool's size and generation.
 * - `{r:ID}`: one replica's liveness key.
 * - `{sg}`: the few cluster-wide keys (indexes, API tokens, counters, orphans), one slot.
 * Names cannot hold braces (sandbox, workspace and pool names are DNS labels; ids and digests are
 * generated), so no argument can move a key out of its slot.
 */
const tag = {
  sandbox: (id: string) => `{s:${id}}`,
  workspace: (name: string) => `{w:${name}}`,
  token: (digest: string) => `{t:${digest}}`,
  replica: (id: string) => `{r:${id}}`,
  global: '{sg}',
} as const;

export const clusterKeys: KeySchema = {
  sandbox: (id) => keys.sandbox(tag.sandbox(id)),
  sandboxName: (workspace, name) => keys.sandboxName(tag.workspace(workspace), name),
  sandboxIndex: () => `${keys.sandboxIndex()}:${tag.global}`,
  orphans: () => `${keys.orphans()}:${tag.global}`,
  owner: (id) => keys.owner(tag.sandbox(id)),
  events: (id) => keys.events(tag.sandbox(id)),
  logs: (id) => keys.logs(tag.sandbox(id)),
  usage: (id) => keys.usage(tag.sandbox(id)),
  fence: (id) => keys.fence(tag.sandbox(id)),
  replica: (replicaId) => keys.replica(tag.replica(replicaId)),
  legacyPeerSecret: () => `${keys.legacyPeerSecret()}:${tag.global}`,
  counter: (name) => `${keys.counter(name)}:${tag.global}`,
  phaseCounts: () => `${keys.phaseCounts()}:${tag.global}`,
  sshSession: (digest) => keys.sshSession(tag.token(digest)),
  sandboxSshSessions: (sandboxId) => keys.sandboxSshSessions(tag.sandbox(sandboxId)),
  forwardsByToken: (digest) => keys.forwardsByToken(tag.token(digest)),
  forwardsBySandbox: (sandboxId) => keys.forwardsBySandbox(tag.sandbox(sandboxId)),
  apiToken: (digest) => `${keys.apiToken(digest)}:${tag.global}`,
  apiTokenIndex: () => `${keys.apiTokenIndex()}:${tag.global}`,
  workspace: (name) => keys.workspace(tag.workspace(name)),
  workspaceIndex: () => `${keys.workspaceIndex()}:${tag.global}`,
  workspaceMembers: (name) => keys.workspaceMembers(tag.workspace(name)),
  workspaceSandboxes: (name) => keys.workspaceSandboxes(tag.workspace(name)),
  pendingSandboxes: (name) => keys.pendingSandboxes(tag.workspace(name)),
  workspaceExecs: (name) => keys.workspaceExecs(tag.workspace(name)),
  pool: (name) => `${keys.pool(name)}:${tag.workspace(poolWorkspace(name))}`,
  poolIndex: () => `${keys.poolIndex()}:${tag.global}`,
  sandboxServices: (sandboxId) => keys.sandboxServices(tag.sandbox(sandboxId)),
  workspaceServices: (workspace) => keys.workspaceServices(tag.workspace(workspace)),
};

/**
 * The hash tag of a key of the cluster layout (what picks its slot), '' for a key without one (the
 * single-Redis layout): keys with the same tag may go into one script.
 */
export function hashTagOf(key: string): string {
  const open = key.indexOf('{');
  const close = open < 0 ? -1 : key.indexOf('}', open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : '';
}

/** The job queue's prefix and name on a connection: `clusterJobQueue` on a Redis Cluster. */
export function jobQueueFor(redis: unknown): { prefix: string; name: string } {
  return redis instanceof Cluster ? clusterJobQueue : jobQueue;
}

/** The layout a connection's keys use: `clusterKeys` on a Redis Cluster, `keys` otherwise. */
export function keysFor(redis: unknown): KeySchema {
  return redis instanceof Cluster ? clusterKeys : keys;
}
