// Against a real redis-server: a sandbox's delete (SandboxStore.remove) leaves
// the key space as it was before the sandbox was created. Every kind of key the store lets a
// sandbox have is written first: the record and its indexes, ownership and fence, usage, a log
// line, an exposed service, SSH sessions (expiring, never-expiring, revoked) and a live forward.
// The one exception is the event stream, which keeps its final `deleted` entry for
// EVENTS_TTL_AFTER_DELETE_MS (60 s) so watchers see the end, then expires.
import { describe, expect, it, vi } from 'vitest';
import type { RedisClient } from '@sandgate/store';
import {
  OwnershipStore,
  SandboxLogStore,
  SandboxStore,
  SandboxUsageStore,
  ServiceEndpointStore,
  SshSessionStore,
  WorkspaceStore,
  keys,
  tokenDigest,
  duplicateClient,
} from '@sandgate/store';
import type { Sandbox, ServiceEndpoint } from '@sandgate/protocols';
import { redisForFile } from '@sandgate/test-harness/redis-per-file';
import { sleep } from '@sandgate/test-harness/wait';

let client: RedisClient;
redisForFile((server) => (client = server.client()));

const sandbox = (id: string, name: string): Sandbox => ({
  metadata: { id, name, workspace: 'default', labels: {}, annotations: {}, created_at_ms: Date.now() },
  spec: { environment: {}, providers: [], command: ['sleep', '1'] },
  status: { conditions: [], phase: 1 },
});

const endpoint = (sandboxId: string, sandboxName: string, service: string): ServiceEndpoint => ({
  metadata: { id: `ep-${sandboxName}-${service}`, name: `${sandboxName}--${service}`, labels: {}, annotations: {}, workspace: 'default', created_at_ms: 1000 },
  sandbox_id: sandboxId,
  sandbox_name: sandboxName,
  service_name: service,
  target_port: 8080,
  domain: true,
});

/** Every key with its type and contents (members, fields, values; a stream's length), sorted. */
async function keySpace(): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  let cursor = '0';
  do {
    const [next, batch] = await client.scan(cursor, 'COUNT', 1000);
    cursor = next;
    for (const key of batch) {
      const type = await client.type(key);
      let contents: unknown;
      if (type === 'string') contents = await client.get(key);
      else if (type === 'hash') contents = Object.entries(await client.hgetall(key)).sort();
      else if (type === 'set') contents = (await client.smembers(key)).sort();
      else if (type === 'zset') contents = await client.zrange(key, '0', '-1', 'WITHSCORES');
      else if (type === 'stream') contents = await client.xlen(key);
      out.set(key, `${type} ${JSON.stringify(contents)}`);
    }
  } while (cursor !== '0');
  return new Map([...out].sort(([a], [b]) => a.localeCompare(b)));
}

/** Keys (or collection members / hash fields) that mention any of `needles`. */
function mentioning(space: Map<string, string>, needles: string[]): string[] {
  return [...space].filter(([k, v]) => needles.some((n) => k.includes(n) || v.includes(n))).map(([k]) => k);
}

describe('a sandbox delete removes every key of the sandbox', () => {
  it('leaves the key space as it was before the create (the event stream aside, which expires in 60 s)', async () => {
    await new WorkspaceStore(client).ensureDefault();
    const before = await keySpace();

    const id = 'hygiene-id';
    const name = 'hygiene';
    const sandboxes = new SandboxStore(client);
    await sandboxes.create(sandbox(id, name), 'cred-hash');
    await new OwnershipStore(client, 6000).claim(id, 'replica-1', 'session-1', 'instance-1');
    await new SandboxUsageStore(client).publish([{ sandboxId: id, cpuSeconds: 1.5, memoryBytes: 1024, atMs: Date.now(), replica: 'replica-1' }], 45_000);
    await new SandboxLogStore(client).append(id, { timestamp_ms: Date.now(), level: 'INFO', target: 'test', message: 'hello', source: 'gateway' });
    await new ServiceEndpointStore(client).upsert(endpoint(id, name, 'web'), 0);
    const ssh = new SshSessionStore(client);
    const record = { sandboxId: id, runStartedAtMs: 0, revoked: false, createdAtMs: Date.now() };
    expect(await ssh.create('tok-expiring', { ...record, expiresAtMs: Date.now() + 60_000 })).toBe(true);
    expect(await ssh.create('tok-forever', { ...record, expiresAtMs: 0 })).toBe(true);
    expect(await ssh.create('tok-revoked', { ...record, expiresAtMs: Date.now() + 60_000 })).toBe(true);
    expect(await ssh.revoke('tok-revoked')).toBe(true);
    expect(await ssh.acquireForward({ token: 'tok-expiring', sandboxId: id, forwardId: 'fwd-1' }, { perToken: 3, perSandbox: 20 })).toBe('ok');

    const digests = ['tok-expiring', 'tok-forever', 'tok-revoked'].map(tokenDigest);
    const during = await keySpace();
    // Every kind of key is there (the test would prove nothing otherwise).
    for (const key of [
      keys.sandbox(id), keys.sandboxName('default', name), keys.owner(id), keys.fence(id), keys.usage(id), keys.logs(id), keys.events(id),
      keys.sandboxServices(id), keys.forwardsBySandbox(id), keys.forwardsByToken(digests[0]!), ...digests.map((d) => keys.sshSession(d)),
    ]) {
      expect(during.has(key), key).toBe(true);
    }

    expect(await sandboxes.remove(id, 'default', name)).toBe(true);

    const after = await keySpace();
    // The event stream lingers (its final entry is `deleted`) and is set to expire.
    expect(after.get(keys.events(id))).toBeDefined();
    const [[, lastFields]] = (await client.xrevrange(keys.events(id), '+', '-', 'COUNT', 1)) as [string, string[]][];
    expect(lastFields).toEqual(['deleted', '1']);
    const pttl = await client.pttl(keys.events(id));
    expect(pttl).toBeGreaterThan(0);
    expect(pttl).toBeLessThanOrEqual(60_000);
    after.delete(keys.events(id));

    expect(mentioning(after, [id, name, ...digests])).toEqual([]);
    expect(after).toEqual(before);
    // The tokens fail as tokens that were never issued.
    expect(await ssh.get('tok-expiring')).toBeNull();
    expect(await ssh.get('tok-forever')).toBeNull();
  });

  it('refuses an SSH session for a sandbox already gone, writing nothing (no session outlives its sandbox)', async () => {
    const before = await keySpace();
    const ssh = new SshSessionStore(client);
    expect(await ssh.create('tok-late', { sandboxId: 'never-created', runStartedAtMs: 0, expiresAtMs: 0, revoked: false, createdAtMs: Date.now() })).toBe(false);
    expect(await ssh.get('tok-late')).toBeNull();
    expect(await keySpace()).toEqual(before);
  });

  it('removes the sessions created while the delete runs, from another connection (a session is refused once the record is gone)', async () => {
    const sandboxes = new SandboxStore(client);
    const other = duplicateClient(client, 'delete-keys-other');
    await other.ping();
    const ssh = new SshSessionStore(other);
    await sandboxes.create(sandbox('many-ssh', 'many-ssh'), 'h');
    const tokens: string[] = [];
    const created: boolean[] = [];
    // Sessions keep coming, one after another, until one is refused: the record is gone.
    const creating = (async () => {
      for (;;) {
        const token = `tok-many-${tokens.length}`;
        tokens.push(token);
        const ok = await ssh.create(token, { sandboxId: 'many-ssh', runStartedAtMs: 0, expiresAtMs: 0, revoked: false, createdAtMs: 1 });
        created.push(ok);
        if (!ok) return;
      }
    })();
    while (created.length < 20) await sleep(1);
    const zrange = client.zrange.bind(client) as (...args: unknown[]) => Promise<string[]>;
    let reads = 0;
    vi.spyOn(client, 'zrange').mockImplementation((async (...args: unknown[]) => {
      reads++;
      return zrange(...args);
    }) as typeof client.zrange);
    expect(await sandboxes.remove('many-ssh', 'default', 'many-ssh')).toBe(true);
    vi.restoreAllMocks();
    // At most one read lost the race: after it the record was sealed against new sessions.
    expect(reads).toBeLessThanOrEqual(2);
    await creating;
    other.disconnect();
    expect(created.at(-1)).toBe(false);
    for (const t of tokens) expect(await client.exists(keys.sshSession(tokenDigest(t))), t).toBe(0);
    expect(mentioning(await keySpace(), ['many-ssh']).filter((k) => k !== keys.events('many-ssh'))).toEqual([]);
  });

  it('refuses a session minted between the delete\'s read of the session index and its removal (the record is sealed first)', async () => {
    const sandboxes = new SandboxStore(client);
    const ssh = new SshSessionStore(duplicateClient(client, 'delete-keys-ssh'));
    await sandboxes.create(sandbox('late-ssh', 'late-ssh'), 'h');
    const session = { sandboxId: 'late-ssh', runStartedAtMs: 0, expiresAtMs: 0, revoked: false, createdAtMs: 1 };
    expect(await ssh.create('tok-early', session)).toBe(true);
    // The delete's read of the index is answered, then a session is asked for before the removal.
    const zrange = client.zrange.bind(client) as (...args: unknown[]) => Promise<string[]>;
    let reads = 0;
    vi.spyOn(client, 'zrange').mockImplementation((async (...args: unknown[]) => {
      const answer = await zrange(...args);
      if (reads++ === 0) expect(await ssh.create('tok-between', session)).toBe(false);
      return answer;
    }) as typeof client.zrange);
    expect(await sandboxes.remove('late-ssh', 'default', 'late-ssh')).toBe(true);
    vi.restoreAllMocks();
    // Sealed before the read, so the read was final: one read, nothing left behind.
    expect(reads).toBe(1);
    for (const t of ['tok-early', 'tok-between']) expect(await client.exists(keys.sshSession(tokenDigest(t))), t).toBe(0);
    expect(await ssh.create('tok-after', session)).toBe(false);
    expect(mentioning(await keySpace(), ['late-ssh', tokenDigest('tok-between')]).filter((k) => k !== keys.events('late-ssh'))).toEqual([]);
  });


  it("keeps the session index no shorter-lived than its sessions, and prunes sessions whose key expired", async () => {
    const sandboxes = new SandboxStore(client);
    const ssh = new SshSessionStore(client);
    await sandboxes.create(sandbox('ttl-ssh', 'ttl-ssh'), 'h');
    const index = keys.sandboxSshSessions('ttl-ssh');
    const session = { sandboxId: 'ttl-ssh', runStartedAtMs: 0, revoked: false, createdAtMs: 1 };
    const keyPttl = (token: string) => client.pttl(keys.sshSession(tokenDigest(token)));
    await ssh.create('tok-long', { ...session, expiresAtMs: Date.now() + 120_000 });
    await ssh.create('tok-short', { ...session, expiresAtMs: Date.now() + 60_000 });
    expect(await client.pttl(index)).toBeGreaterThanOrEqual(await keyPttl('tok-long'));
    // Expired beyond the grace hour: its key is gone at once, its index entry at the next create.
    await ssh.create('tok-old', { ...session, expiresAtMs: Date.now() - 7_200_000 });
    expect(await client.exists(keys.sshSession(tokenDigest('tok-old')))).toBe(0);
    await ssh.create('tok-forever', { ...session, expiresAtMs: 0 });
    expect(await client.zscore(index, tokenDigest('tok-old'))).toBeNull();
    expect(await client.zcard(index)).toBe(3);
    expect(await client.pttl(index)).toBe(-1); // a session without expiry: neither has its index
    expect(await sandboxes.remove('ttl-ssh', 'default', 'ttl-ssh')).toBe(true);
    expect(await client.exists(index)).toBe(0);
  });
});
