// The Redis key schema. Every key sandgate writes is named here (and in ARCHITECTURE.md).
export const keys = {
  /** Hash: the sandbox record (`pb` = encoded openshell.v1.Sandbox, `rv`, `ws`, `name`, `cred`, `compute`, `ownfence`, `termfinal`, `runstart`). */
  sandbox: (id: string) => `sg:sbx:${id}`,
  /** String: sandbox id, by workspace and name (uniqueness of names). */
  sandboxName: (workspace: string, name: string) => `sg:sbxname:${workspace}:${name}`,
  /** Set: every sandbox id (listing). */
  sandboxIndex: () => 'sg:sbxs',
  /** Hash, expiring: the replica holding the sandbox's supervisor session (`replica`, `session`, `fence`). */
  owner: (id: string) => `sg:own:${id}`,
  /** Stream: every snapshot of the sandbox (`rv`, `pb`), then `deleted`; trimmed, expires after delete. */
  events: (id: string) => `sg:events:${id}`,
  /** Stream: the sandbox's log lines (gateway and sandbox sources), trimmed to the tail. */
  logs: (id: string) => `sg:logs:${id}`,
  /** Counter: fencing tokens for `owner`; only ever grows while the sandbox exists. */
  fence: (id: string) => `sg:fence:${id}`,
  /** String, expiring: a live replica and its addresses (JSON). */
  replica: (replicaId: string) => `sg:replica:${replicaId}`,
} as const;
