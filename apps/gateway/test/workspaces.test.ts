// Workspaces and roles over real gRPC against two in-process replicas on one real Redis, with
// callers authenticated by real API tokens (TokenStore): a member of workspace A tries every path
// to a sandbox of workspace B and must get NOT_FOUND on each, while B's own member gets through;
// ListSandboxes filtering and all_workspaces; the workspace RPCs' shapes and status codes; the
// per-workspace sandbox quota and the cross-replica exec cap. The sandbox records are written
// straight into Redis (no compute), as policy-config.test.ts does.
//
// The authenticator here is the test's own (a token's record → a Principal, as the contract in
// libs/core/src/principal.ts describes), handed to startReplica: the workspace rules under test are
// the services', whatever authenticator fronts them. test/e2e/workspaces.test.ts repeats the
// cross-workspace attack against a 3-replica cluster of real processes with the gateway's own
// authenticator.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import type { Metadata, ServiceError } from '@grpc/grpc-js';
import type { RedisClient } from '@sandgate/store';
import { startReplica, type ReplicaConfig, type RunningReplica } from '@sandgate/gateway';
import type { Sandbox } from '@sandgate/protocols';
import { Code, GatewayError, Phase, type Principal } from '@sandgate/core';
import { SandboxStore, SshSessionStore, TokenStore, WorkspaceExecSlots, WorkspaceStore } from '@sandgate/store';
import { openShellClient, unaryCall, type AnyClient } from '@sandgate/test-harness/grpc-client';
import { redisForFile } from '@sandgate/test-harness/redis-per-file';
import { waitFor } from '@sandgate/test-harness/wait';
import { inProcessReplicaConfig } from './in-process-replica.ts';
import type { Authenticator } from '../src/auth/authenticator.ts';

let redis: RedisClient;
let redisUrl = '';
redisForFile((server) => {
  redis = server.client();
  redisUrl = server.url;
});

/** API tokens → principals: `admin` tokens are gateway admins; the subject is `token:<id>`. */
function tokenAuthenticator(tokens: TokenStore): Authenticator {
  return {
    async authenticate({ metadata }: { metadata: Metadata }): Promise<Principal> {
      const header = String(metadata.get('authorization')[0] ?? '');
      const m = /^Bearer (.+)$/.exec(header);
      if (!m) throw new GatewayError(Code.UNAUTHENTICATED, 'missing authorization header');
      const rec = await tokens.verify(m[1]!);
      if (!rec) throw new GatewayError(Code.UNAUTHENTICATED, 'invalid token');
      const subject = `token:${rec.id}`;
      return { subject, displayName: rec.name || subject, provider: 'api_token', admin: rec.role === 'admin', workspace: rec.workspace, roles: [rec.role], scopes: [] };
    },
  };
}

let stateDir: string;
const replicas: RunningReplica[] = [];
const clients: AnyClient[] = [];
/** Per caller: one client on each replica (calls alternate replicas). */
let admin: AnyClient[];
let memberA: AnyClient[];
let memberB: AnyClient[];
let subjectA = '';
let store: SandboxStore;
let workspaces: WorkspaceStore;

const MAX_SANDBOXES = 2;
const MAX_EXECS = 1;

function config(replicaId: string): ReplicaConfig {
  return inProcessReplicaConfig({ replicaId, redisUrl, stateDir }, { workers: false, maxSandboxesPerWorkspace: MAX_SANDBOXES, maxExecsPerWorkspace: MAX_EXECS });
}

beforeAll(async () => {
  stateDir = mkdtempSync(path.join(os.tmpdir(), 'sg-ws-'));
  const tokens = new TokenStore(redis);
  for (const id of ['ws-r1', 'ws-r2']) replicas.push(await startReplica(config(id), { authenticator: tokenAuthenticator(tokens) }));
  store = new SandboxStore(redis);
  workspaces = new WorkspaceStore(redis);
  const adminToken = (await tokens.create({ workspace: 'default', role: 'admin', name: 'admin' })).token;
  const a = await tokens.create({ workspace: 'team-a', role: 'member', name: 'alice' });
  subjectA = `token:${a.record.id}`;
  const bToken = (await tokens.create({ workspace: 'team-b', role: 'member', name: 'bob' })).token;
  const on = (token: string) => replicas.map((r) => {
    const c = openShellClient(r.grpcAddress, { token });
    clients.push(c);
    return c;
  });
  admin = on(adminToken);
  memberA = on(a.token);
  memberB = on(bToken);
});
afterAll(async () => {
  for (const c of clients) c.close();
  for (const r of replicas) await r.close();
  rmSync(stateDir, { recursive: true, force: true });
});

async function rejection(p: Promise<unknown>): Promise<ServiceError> {
  try {
    await p;
  } catch (err) {
    return err as ServiceError;
  }
  throw new Error('expected the call to fail');
}

/** A sandbox record as CreateSandbox would have stored it, without compute. */
async function insertSandbox(workspace: string, name: string, phase = Phase.READY): Promise<string> {
  const id = randomUUID();
  const sandbox: Sandbox = {
    metadata: { id, name, workspace, labels: {}, annotations: {}, created_at_ms: Date.now(), resource_version: 0 },
    spec: { environment: {}, providers: [], command: ['sleep', 'infinity'] },
    status: { conditions: [], phase },
  };
  await store.create(sandbox, 'no-credential');
  return id;
}

/** The final status of any call, unary or streaming: OK (code 0) or the error. */
function outcome(client: AnyClient, method: string, request: object): Promise<{ code: number; details: string; data: unknown[] }> {
  const bidi = method === 'ExecSandboxInteractive' || method === 'ForwardTcp';
  const streaming = bidi || method === 'WatchSandbox' || method === 'ExecSandbox';
  if (!streaming) {
    return unaryCall(client, method, request).then(
      (res) => ({ code: 0, details: '', data: [res] }),
      (err: ServiceError) => ({ code: err.code, details: err.details, data: [] }),
    );
  }
  return new Promise((resolve) => {
    const call = bidi ? client[method]() : client[method](request);
    const data: unknown[] = [];
    let done = false;
    const finish = (code: number, details: string) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      call.cancel?.();
      resolve({ code, details, data });
    };
    // A stream that delivers anything before failing has already shown the sandbox exists.
    call.on('data', (d: unknown) => {
      data.push(d);
      finish(0, 'delivered data');
    });
    call.on('error', (err: ServiceError) => finish(err.code, err.details));
    call.on('end', () => finish(0, 'ended'));
    call.on('status', (s: { code: number; details: string }) => finish(s.code, s.details));
    const timer = setTimeout(() => finish(-1, 'no answer within 5 s'), 5_000);
    if (bidi) call.write(request);
  });
}

describe('a caller of workspace A cannot see or touch workspace B', () => {
  let bId = '';
  let bSshToken = '';
  const bName = 'b-secret';

  /** Every path to a sandbox, as [method, request]; built once B's sandbox and SSH token exist. */
  const paths = (): [string, object][] => [
    ['GetSandbox', { name: bName, workspace: 'team-b' }],
    ['GetSandbox', { name: bName }],
    ['StopSandbox', { name: bName, workspace: 'team-b' }],
    ['StartSandbox', { name: bName, workspace: 'team-b' }],
    ['WatchSandbox', { id: bId, follow_status: true }],
    ['GetSandboxLogs', { sandbox_id: bId }],
    ['ExecSandbox', { sandbox_id: bId, command: ['id'] }],
    ['ExecSandboxInteractive', { start: { sandbox_id: bId, command: ['sh'] } }],
    ['CreateSshSession', { sandbox_id: bId }],
    ['RevokeSshSession', { token: bSshToken }],
    ['ForwardTcp', { init: { sandbox_id: bId, ssh: {}, authorization_token: bSshToken } }],
    ['GetSandboxConfig', { sandbox_id: bId }],
    ['UpdateConfig', { name: bName, workspace: 'team-b', policy: Buffer.alloc(0) }],
    ['DeleteSandbox', { name: bName, workspace: 'team-b' }],
  ];

  beforeAll(async () => {
    await workspaces.create('team-a', {});
    await workspaces.create('team-b', {});
    await insertSandbox('team-a', 'a-own');
    bId = await insertSandbox('team-b', bName);
    // B's member mints an SSH token for its own sandbox (READY: the access rule passes).
    const session = await unaryCall<{ token: string }>(memberB[0]!, 'CreateSshSession', { sandbox_id: bId });
    bSshToken = session.token;
    expect(bSshToken).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('every path, on every replica, answers NOT_FOUND to a member of A', async () => {
    for (const [i, client] of memberA.entries()) {
      for (const [method, request] of paths()) {
        const res = await outcome(client, method, request);
        expect({ replica: i, method, code: res.code, details: res.details }).toEqual({
          replica: i,
          method,
          code: Code.NOT_FOUND,
          details: 'sandbox not found',
        });
      }
    }
    // Nothing was touched: the record is as it was, the SSH token still valid.
    const rec = await store.get(bId);
    expect(rec?.sandbox.status?.phase).toBe(Phase.READY);
    expect(rec?.resourceVersion).toBe(0);
    expect(await new SshSessionStore(redis).get(bSshToken)).toMatchObject({ sandboxId: bId, revoked: false });
  });

  it("B's own member gets past the scoping on the same paths (the NOT_FOUND above is the rule, not a broken path)", async () => {
    const readOnly = paths().filter(([m]) => !['StopSandbox', 'StartSandbox', 'DeleteSandbox', 'RevokeSshSession', 'UpdateConfig'].includes(m));
    for (const [method, request] of readOnly) {
      const res = await outcome(memberB[0]!, method, request);
      if (method === 'GetSandbox' && !('workspace' in request)) continue; // B's member's own workspace is team-b: found below
      expect({ method, notFound: res.code === Code.NOT_FOUND && res.details === 'sandbox not found' }).toEqual({ method, notFound: false });
    }
    expect((await unaryCall<{ sandbox: Sandbox }>(memberB[1]!, 'GetSandbox', { name: bName })).sandbox.metadata?.id).toBe(bId);
    // An admin sees it too.
    expect((await unaryCall<{ sandbox: Sandbox }>(admin[0]!, 'GetSandbox', { name: bName, workspace: 'team-b' })).sandbox.metadata?.id).toBe(bId);
  });

  it('a membership in B opens it to A; removing it closes it again', async () => {
    await unaryCall(admin[0]!, 'AddWorkspaceMember', { workspace: 'team-b', principal_subject: subjectA, role: 1 });
    expect((await unaryCall<{ sandbox: Sandbox }>(memberA[1]!, 'GetSandbox', { name: bName, workspace: 'team-b' })).sandbox.metadata?.id).toBe(bId);
    const removed = await unaryCall<{ removed: boolean }>(admin[1]!, 'RemoveWorkspaceMember', { workspace: 'team-b', principal_subject: subjectA });
    expect(removed.removed).toBe(true);
    const err = await rejection(unaryCall(memberA[0]!, 'GetSandbox', { name: bName, workspace: 'team-b' }));
    expect(err.code).toBe(Code.NOT_FOUND);
  });

  it('ListSandboxes is filtered; another workspace and all_workspaces are refused to a member', async () => {
    const own = await unaryCall<{ sandboxes: Sandbox[] }>(memberA[0]!, 'ListSandboxes', {});
    expect(own.sandboxes.map((s) => s.metadata?.name)).toEqual(['a-own']);
    const other = await rejection(unaryCall(memberA[1]!, 'ListSandboxes', { workspace: 'team-b' }));
    expect(other.code).toBe(Code.PERMISSION_DENIED);
    expect(other.details).toMatch(/^not a member of workspace 'team-b'/);
    const all = await rejection(unaryCall(memberA[0]!, 'ListSandboxes', { all_workspaces: true }));
    expect(all.code).toBe(Code.PERMISSION_DENIED);
    expect(all.details).toMatch(/all_workspaces requires a gateway admin/);
    const everything = await unaryCall<{ sandboxes: Sandbox[] }>(admin[1]!, 'ListSandboxes', { all_workspaces: true });
    expect(everything.sandboxes.map((s) => s.metadata?.name)).toEqual(expect.arrayContaining(['a-own', bName]));
    const bOnly = await unaryCall<{ sandboxes: Sandbox[] }>(admin[0]!, 'ListSandboxes', { workspace: 'team-b' });
    expect(bOnly.sandboxes.map((s) => s.metadata?.name)).toEqual([bName]);
  });

  it('CreateSandbox in B by a member of A is PERMISSION_DENIED, and nothing is created', async () => {
    const before = await workspaces.sandboxCount('team-b');
    const err = await rejection(unaryCall(memberA[0]!, 'CreateSandbox', { spec: { command: ['sleep', '1'] }, workspace: 'team-b', name: 'intruder' }));
    expect(err.code).toBe(Code.PERMISSION_DENIED);
    expect(err.details).toMatch(/^not a member of workspace 'team-b'/);
    expect(await workspaces.sandboxCount('team-b')).toBe(before);
    expect(await store.getByName('team-b', 'intruder')).toBeNull();
  });

  it("GetWorkspace and ListWorkspaceMembers of B are refused to A (even for a workspace that does not exist: names cannot be probed)", async () => {
    for (const name of ['team-b', 'no-such-ws']) {
      const err = await rejection(unaryCall(memberA[0]!, 'GetWorkspace', { name }));
      expect(err.code).toBe(Code.PERMISSION_DENIED);
      const members = await rejection(unaryCall(memberA[1]!, 'ListWorkspaceMembers', { workspace: name }));
      expect(members.code).toBe(Code.PERMISSION_DENIED);
    }
    const listed = await unaryCall<{ workspaces: { metadata: { name: string } }[] }>(memberA[0]!, 'ListWorkspaces', {});
    expect(listed.workspaces.map((w) => w.metadata.name)).toEqual(['team-a']);
  });
});

describe('roles', () => {
  it('only admins create and delete workspaces and read gateway info', async () => {
    for (const [method, req] of [
      ['CreateWorkspace', { name: 'by-member' }],
      ['DeleteWorkspace', { name: 'team-a' }],
      ['GetGatewayInfo', {}],
    ] as const) {
      const err = await rejection(unaryCall(memberA[0]!, method, req));
      expect({ method, code: err.code }).toEqual({ method, code: Code.PERMISSION_DENIED });
    }
    expect(await workspaces.get('by-member')).toBeNull();
    expect(await workspaces.get('team-a')).not.toBeNull();
    const info = await unaryCall<{ status: number; gateway_version: string; compute_drivers: { name: string; capabilities: { driver_name: string } }[] }>(admin[0]!, 'GetGatewayInfo', {});
    expect(info.status).toBe(1);
    expect(info.gateway_version).toMatch(/^\d+\.\d+\.\d+/);
    expect(info.compute_drivers).toEqual([expect.objectContaining({ name: 'local', capabilities: expect.objectContaining({ driver_name: 'local' }) })]);
  });

  it('membership writes: a plain member cannot; a workspace admin adds users but cannot grant admin', async () => {
    const plain = await rejection(unaryCall(memberA[0]!, 'AddWorkspaceMember', { workspace: 'team-a', principal_subject: 'eve', role: 1 }));
    expect(plain.code).toBe(Code.PERMISSION_DENIED);
    expect(plain.details).toMatch(/workspace role 'admin' required in workspace 'team-a'/);
    const elsewhere = await rejection(unaryCall(memberA[0]!, 'AddWorkspaceMember', { workspace: 'team-b', principal_subject: subjectA, role: 2 }));
    expect(elsewhere.code).toBe(Code.PERMISSION_DENIED);
    expect(await workspaces.memberRole('team-b', subjectA)).toBeNull();

    await unaryCall(admin[0]!, 'AddWorkspaceMember', { workspace: 'team-a', principal_subject: subjectA, role: 2 });
    const added = await unaryCall<{ member: { principal_subject: string; role: number; metadata: { workspace: string; name: string } } }>(
      memberA[1]!, 'AddWorkspaceMember', { workspace: 'team-a', principal_subject: 'carol', role: 1 },
    );
    expect(added.member).toMatchObject({ principal_subject: 'carol', role: 1, metadata: { workspace: 'team-a', name: 'carol' } });
    const grant = await rejection(unaryCall(memberA[0]!, 'AddWorkspaceMember', { workspace: 'team-a', principal_subject: 'dave', role: 2 }));
    expect(grant.code).toBe(Code.PERMISSION_DENIED);
    expect(grant.details).toBe('only platform admins can assign the workspace admin role');
    const dup = await rejection(unaryCall(memberA[0]!, 'AddWorkspaceMember', { workspace: 'team-a', principal_subject: 'carol', role: 1 }));
    expect(dup.code).toBe(Code.ALREADY_EXISTS);
    const noRole = await rejection(unaryCall(admin[0]!, 'AddWorkspaceMember', { workspace: 'team-a', principal_subject: 'x' }));
    expect([noRole.code, noRole.details]).toEqual([Code.INVALID_ARGUMENT, 'role must be USER or ADMIN, not UNSPECIFIED']);
    const list = await unaryCall<{ members: { principal_subject: string; role: number }[] }>(memberA[0]!, 'ListWorkspaceMembers', { workspace: 'team-a' });
    expect(list.members.map((m) => [m.principal_subject, m.role])).toEqual([[subjectA, 2], ['carol', 1]]);
    // A workspace admin of A is still nobody in B.
    const err = await rejection(unaryCall(memberA[0]!, 'GetSandbox', { name: 'b-secret', workspace: 'team-b' }));
    expect(err.code).toBe(Code.NOT_FOUND);
  });
});

describe('workspace RPCs: shapes and status codes', () => {
  it('create, get, list, delete with upstream shapes', async () => {
    const created = await unaryCall<{ workspace: { metadata: Record<string, unknown>; status: { phase: number } } }>(admin[0]!, 'CreateWorkspace', { name: 'team-c', labels: { env: 'dev' } });
    expect(created.workspace.metadata).toMatchObject({ name: 'team-c', labels: { env: 'dev' }, resource_version: 1 });
    expect(created.workspace.metadata.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(created.workspace.status.phase).toBe(1);
    const got = await unaryCall<{ workspace: { metadata: { id: string } } }>(admin[1]!, 'GetWorkspace', { name: 'team-c' });
    expect(got.workspace.metadata.id).toBe(created.workspace.metadata.id);
    const byLabel = await unaryCall<{ workspaces: { metadata: { name: string } }[] }>(admin[0]!, 'ListWorkspaces', { label_selector: 'env=dev' });
    expect(byLabel.workspaces.map((w) => w.metadata.name)).toEqual(['team-c']);
    const all = await unaryCall<{ workspaces: { metadata: { name: string } }[] }>(admin[0]!, 'ListWorkspaces', {});
    expect(all.workspaces.map((w) => w.metadata.name)).toEqual(expect.arrayContaining(['default', 'team-a', 'team-b', 'team-c']));
    expect(await unaryCall(admin[1]!, 'DeleteWorkspace', { name: 'team-c' })).toEqual({ deleted: true });
  });

  it.each([
    ['GetWorkspace', { name: 'nope' }, Code.NOT_FOUND, 'workspace not found'],
    ['DeleteWorkspace', { name: 'nope' }, Code.NOT_FOUND, "workspace 'nope' not found"],
    ['AddWorkspaceMember', { workspace: 'nope', principal_subject: 'x', role: 1 }, Code.NOT_FOUND, "workspace 'nope' not found"],
    ['RemoveWorkspaceMember', { workspace: 'nope', principal_subject: 'x' }, Code.NOT_FOUND, "workspace 'nope' not found"],
    ['ListWorkspaceMembers', { workspace: 'nope' }, Code.NOT_FOUND, "workspace 'nope' not found"],
    ['DeleteWorkspace', { name: 'default' }, Code.FAILED_PRECONDITION, 'the default workspace cannot be deleted'],
    ['CreateWorkspace', { name: 'default' }, Code.ALREADY_EXISTS, 'workspace already exists'],
    ['CreateWorkspace', { name: '' }, Code.INVALID_ARGUMENT, 'workspace name is required'],
    ['CreateWorkspace', { name: 'Bad_Name' }, Code.INVALID_ARGUMENT, 'workspace name must contain only lowercase alphanumeric characters or hyphens'],
    ['CreateWorkspace', { name: 'a-very-long-workspace-name' }, Code.INVALID_ARGUMENT, 'workspace name exceeds maximum length (26 > 19)'],
    ['CreateWorkspace', { name: 'a--b' }, Code.INVALID_ARGUMENT, 'workspace name must not contain consecutive hyphens'],
    ['GetWorkspace', { name: '' }, Code.INVALID_ARGUMENT, 'name is required'],
    ['CreateSandbox', { spec: { command: ['sleep', '1'] }, workspace: 'nope' }, Code.NOT_FOUND, "workspace 'nope' not found"],
  ] as const)('%s %j → %s', async (method, req, code, details) => {
    const err = await rejection(unaryCall(admin[0]!, method, req));
    expect([err.code, err.details]).toEqual([code, details]);
  });

  it('a workspace holding a sandbox is not deleted; it stays TERMINATING and refuses new sandboxes until a retry succeeds', async () => {
    await unaryCall(admin[0]!, 'CreateWorkspace', { name: 'busy' });
    const id = await insertSandbox('busy', 'keeper');
    const err = await rejection(unaryCall(admin[1]!, 'DeleteWorkspace', { name: 'busy' }));
    expect([err.code, err.details]).toEqual([Code.FAILED_PRECONDITION, "workspace 'busy' still contains resources: sandbox"]);
    const ws = await unaryCall<{ workspace: { metadata: { resource_version: number; deletion_timestamp_ms: number }; status: { phase: number } } }>(admin[0]!, 'GetWorkspace', { name: 'busy' });
    expect(ws.workspace.status.phase).toBe(2);
    expect(ws.workspace.metadata.resource_version).toBe(2);
    const create = await rejection(unaryCall(admin[0]!, 'CreateSandbox', { spec: { command: ['sleep', '1'] }, workspace: 'busy' }));
    expect([create.code, create.details]).toEqual([Code.FAILED_PRECONDITION, "workspace 'busy' is being deleted"]);
    const add = await rejection(unaryCall(admin[0]!, 'AddWorkspaceMember', { workspace: 'busy', principal_subject: 'x', role: 1 }));
    expect(add.code).toBe(Code.FAILED_PRECONDITION);
    // Once its sandbox is gone, the retry deletes it.
    const rec = (await store.get(id))!;
    await store.remove(id, 'busy', rec.sandbox.metadata!.name!);
    expect(await unaryCall(admin[1]!, 'DeleteWorkspace', { name: 'busy' })).toEqual({ deleted: true });
    expect((await rejection(unaryCall(admin[0]!, 'GetWorkspace', { name: 'busy' }))).code).toBe(Code.NOT_FOUND);
  });
});

describe('quotas', () => {
  it(`CreateSandbox beyond ${MAX_SANDBOXES} sandboxes in a workspace is RESOURCE_EXHAUSTED naming the limit and the flag`, async () => {
    await workspaces.create('full', {});
    for (let i = 0; i < MAX_SANDBOXES; i++) await insertSandbox('full', `s${i}`);
    const err = await rejection(unaryCall(admin[1]!, 'CreateSandbox', { spec: { command: ['sleep', '1'] }, workspace: 'full', name: 'one-more' }));
    expect(err.code).toBe(Code.RESOURCE_EXHAUSTED);
    expect(err.details).toBe(`workspace 'full' has reached its limit of ${MAX_SANDBOXES} sandboxes (--max-sandboxes-per-workspace); delete one first`);
    expect(await workspaces.sandboxCount('full')).toBe(MAX_SANDBOXES);
    expect(await store.getByName('full', 'one-more')).toBeNull();
  });

  it(`an exec beyond ${MAX_EXECS} live in a workspace, counted across replicas, is RESOURCE_EXHAUSTED`, async () => {
    await workspaces.create('busy-exec', {});
    const id = await insertSandbox('busy-exec', 'runner');
    // Another replica runs an exec in the workspace: its slot is live (heartbeated).
    const otherReplica = new WorkspaceExecSlots(redis);
    const slot = { workspace: 'busy-exec', execId: randomUUID() };
    expect(await otherReplica.acquire(slot, MAX_EXECS)).toBe(true);
    try {
      for (const [method, request] of [
        ['ExecSandbox', { sandbox_id: id, command: ['id'] }],
        ['ExecSandboxInteractive', { start: { sandbox_id: id, command: ['id'] } }],
      ] as const) {
        for (const client of admin) {
          const res = await outcome(client, method, request);
          expect({ method, code: res.code, details: res.details }).toEqual({
            method,
            code: Code.RESOURCE_EXHAUSTED,
            details: `workspace 'busy-exec' has reached its limit of ${MAX_EXECS} concurrent execs (--max-execs-per-workspace); wait for one to finish`,
          });
        }
      }
    } finally {
      await otherReplica.release(slot);
      otherReplica.close();
    }
    // With the slot free the exec gets past the cap (and fails later: this sandbox has no supervisor),
    // and the failed exec gave its own slot back.
    const res = await outcome(admin[0]!, 'ExecSandbox', { sandbox_id: id, command: ['id'] });
    expect(res.code).not.toBe(Code.RESOURCE_EXHAUSTED);
    await waitFor('exec slot released', async () => (await new WorkspaceExecSlots(redis).liveCount('busy-exec')) === 0);
  });
});
