// Issue 17, item 3: no acknowledged write lost to a Redis failover. Replication is asynchronous,
// so a primary that acknowledges a write and dies before its replicas have it takes the write
// along. With SANDGATE_REDIS_MIN_REPLICAS=1 a replica waits (WAIT) until a replica holds a create,
// delete, stop, start, token or ownership claim before the client hears it succeeded, and answers
// UNAVAILABLE otherwise. The negative half runs the same failover against a replica started with
// the `redis-wait` debug fault: its create is acknowledged and then lost, which is exactly what
// the guard prevents.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keys } from '@sandgate/store';
import { status as grpcStatus } from '@grpc/grpc-js';
import { Cluster, repoRoot, runCli } from '../harness/cluster.ts';
import { openShellClient, unaryCall } from '../harness/grpc-client.ts';
import { startSentinelGroup, type SentinelGroup } from '../harness/redis-sentinel.ts';
import { LocalDriver } from '@sandgate/compute';
import { deleteAllSandboxes } from '../harness/sandbox.ts';
import { waitFor } from '../harness/wait.ts';

let group: SentinelGroup;
/**
 * One gateway cluster (one Redis holds one cluster: its records, its sweep), two replicas on the
 * same compute. Replica 0 is guarded: every acknowledged write waits for one Redis replica (500 ms
 * at most). Replica 1 has the `redis-wait` debug fault: its writes are acknowledged by the primary
 * alone. Each one's sandboxes dial it alone, so it records their supervisors' reports.
 */
let cluster: Cluster;
const guarded = 0;
const unguarded = 1;

beforeAll(async () => {
  group = await startSentinelGroup({ replicas: 2 });
  const env = { SANDGATE_REDIS_MIN_REPLICAS: '1', SANDGATE_REDIS_WAIT_TIMEOUT_MS: '500' };
  // Replica 0's supervisors dial every regular replica: replica 1 (ownSupervisors) is not one.
  cluster = await Cluster.start({ redisUrl: group.url, replicas: 1, env });
  await cluster.addReplica({ ownSupervisors: true, env: { SANDGATE_DEBUG_BREAK: 'redis-wait', SANDGATE_DEBUG_UNSAFE: '1' } });
}, 90_000);

afterAll(async () => {
  await group?.restoreReplication().catch(() => undefined);
  if (cluster) {
    await deleteAllSandboxes(gw(guarded));
    // A lost record's compute has nothing left to delete it (the sweep would, after its grace
    // period): the driver removes whatever runs in the cluster's state directory.
    const driver = new LocalDriver({ stateDir: cluster.stateDir, supervisorEntry: `${repoRoot}/apps/supervisor/src/main.ts` });
    for (const c of await driver.list()) await driver.delete(c.sandboxId, c.handle).catch(() => undefined);
    await cluster.stop();
    cluster.cleanup();
  }
  await group?.stop();
});

/** The gRPC address of replica `replica` (guarded or unguarded). */
const gw = (replica: number) => cluster.replicas[replica]!.grpcAddress;

async function create(replica: number, name: string): Promise<{ code: number; id: string; stderr: string }> {
  const res = await runCli(['sandbox', 'create', '--name', name, '--detach', '-o', 'json', '--', 'sleep', 'infinity'], { gateway: gw(replica), timeoutMs: 30_000 });
  const id = res.code === 0 ? (JSON.parse(res.stdout.toString()) as { metadata: { id: string } }).metadata.id : '';
  return { code: res.code ?? -1, id, stderr: res.stderr.toString() };
}

describe('acknowledged writes wait for a Redis replica', () => {
  it('with the replicas in step, creates, stops, starts and deletes are acknowledged', async () => {
    const made = await create(guarded, 'wait-ok');
    expect(made.code, made.stderr).toBe(0);
    for (const verb of ['stop', 'start', 'delete']) {
      const res = await runCli(['sandbox', verb, 'wait-ok'], { gateway: gw(guarded), timeoutMs: 30_000 });
      expect(res.code, `${verb}: ${res.stderr.toString()}`).toBe(0);
    }
  });

  it('with the replicas cut off, a create and a token are refused UNAVAILABLE, saying why, and the create is undone', async () => {
    await group.cutReplication();
    try {
      const refused = await unaryCall(openShellClient(gw(guarded)), 'CreateSandbox', { name: 'wait-refused', spec: { command: ['sleep', 'infinity'] } }).then(
        () => null,
        (err: { code: number; details: string }) => err,
      );
      expect(refused?.code).toBe(grpcStatus.UNAVAILABLE);
      expect(refused?.details).toContain('the create reached 0 of the 1 Redis replica(s) required (SANDGATE_REDIS_MIN_REPLICAS) within 500 ms');
      // Undone: no record (the client was told it failed, and it did).
      const get = await runCli(['sandbox', 'get', 'wait-refused'], { gateway: gw(guarded) });
      expect(get.code).not.toBe(0);

      const token = await runCli(['token', 'create', '--redis', group.url, '--workspace', 'default'], {
        gateway: gw(guarded),
        env: { SANDGATE_REDIS_MIN_REPLICAS: '1', SANDGATE_REDIS_WAIT_TIMEOUT_MS: '500' },
      });
      expect(token.code).not.toBe(0);
      expect(token.stderr.toString()).toContain('the token reached 0 of the 1 Redis replica(s) required');
    } finally {
      await group.restoreReplication();
    }
    await group.waitReplicated();
  });

  it('without the guard (redis-wait debug fault) a create acknowledged while the replicas were cut off is lost in a failover', async () => {
    await group.cutReplication();
    const lost = await create(unguarded, 'wait-lost');
    // Acknowledged by the primary alone...
    expect(lost.code, lost.stderr).toBe(0);
    const old = await group.primaryPort();
    expect(await group.node(old).exists(keys.sandbox(lost.id))).toBe(1);
    // ...which dies; the Sentinels promote a replica that never saw it.
    group.signal(old, 'SIGKILL');
    await group.restoreReplication();
    const promoted = await group.waitFailover(old);
    expect(await group.node(promoted).exists(keys.sandbox(lost.id))).toBe(0);
    await waitFor(
      'the lost sandbox to be unknown to both replicas',
      async () => {
        for (const replica of [guarded, unguarded]) {
          const get = await runCli(['sandbox', 'get', 'wait-lost'], { gateway: gw(replica) });
          if (get.code === 0 || !/not found/i.test(get.stderr.toString())) return false;
        }
        return true;
      },
      30_000,
      500,
    );
  });

  it("a supervisor's main-process exit is acknowledged only once replicated: a failover cannot lose it (and does, without the guard)", async () => {
    // Two sandboxes whose main process exits 7 when told to, one on each replica.
    const main = ['sh', '-c', 'while [ ! -e /sandbox/go ]; do sleep 0.1; done; exit 7'];
    const status = async (replica: number, name: string) => {
      const res = await runCli(['sandbox', 'get', name, '-o', 'json'], { gateway: gw(replica) });
      if (res.code !== 0) return { phase: `get failed: ${res.stderr.toString()}`, reason: '' };
      const st = (JSON.parse(res.stdout.toString()) as { status: { phase: string; conditions?: { reason?: string }[] } }).status;
      return { phase: st.phase, reason: st.conditions?.[0]?.reason ?? '' };
    };
    const phase = async (replica: number, name: string) => (await status(replica, name)).phase;
    /** The exit itself on record (not only an Error phase: the sweep marks a record whose compute is gone ComputeVanished). */
    const exitRecorded = async (replica: number, name: string) => (await status(replica, name)).reason === 'MainProcessFailed';
    /** A timed-out wait's error with what it was waiting on: the record's status and the replica's log. */
    const explained = (replica: number, name: string) => async (err: unknown) => {
      throw new Error(`${String(err)}; now ${JSON.stringify(await status(replica, name))}\n${cluster.logs()}`);
    };
    const sandboxes = [
      { replica: guarded, name: 'exit-guarded' },
      { replica: unguarded, name: 'exit-unguarded' },
    ];
    // After the failover of the test above a replica may still be resyncing: a guarded create is
    // then refused UNAVAILABLE ("reached 0 of the 1 Redis replica(s) required", CI once) and
    // undone. A client retries that; so does this test (ALREADY_EXISTS: an earlier try's undo
    // failed, and the sandbox is there).
    await group.waitReplicated();
    for (const { replica, name } of sandboxes) {
      await waitFor(`${name} created`, async () => {
        const res = await runCli(['sandbox', 'create', '--name', name, '--detach', '-o', 'json', '--', ...main], { gateway: gw(replica), timeoutMs: 30_000 });
        const stderr = res.stderr.toString();
        if (res.code === 0 || /already exists/i.test(stderr)) return true;
        if (/Redis replica\(s\) required/.test(stderr)) return false;
        throw new Error(`create ${name}: ${stderr}`);
      }, 60_000, 500);
      // 60 s: right after a failover, on a machine the other lane loads, 30 s was once too short.
      await waitFor(`${name} Ready`, async () => (await phase(replica, name)) === 'SANDBOX_PHASE_READY', 60_000, 200).catch(explained(replica, name));
      // Ready is on record before the guarded claim's WAIT: the session is in place once an exec
      // runs. (Right after the failover above a replica may still be resyncing, and a hello whose
      // claim cannot be confirmed is refused and tried again.) Cut off without one, the guarded
      // supervisor could not report anything, and the test would prove nothing.
      await waitFor(`${name}'s session`, async () => (await runCli(['sandbox', 'exec', name, '--', 'true'], { gateway: gw(replica), timeoutMs: 30_000 })).code === 0, 30_000, 200);
    }
    // The replicas cut off once they have everything; both main processes exit, and the primary
    // records both exits.
    await group.waitReplicated();
    await group.cutReplication();
    for (const { replica, name } of sandboxes) {
      const res = await runCli(['sandbox', 'exec', name, '--', 'touch', '/sandbox/go'], { gateway: gw(replica), timeoutMs: 30_000 });
      expect(res.code, res.stderr.toString()).toBe(0);
    }
    for (const { replica, name } of sandboxes) {
      await waitFor(`${name}'s exit on the primary`, () => exitRecorded(replica, name), 30_000, 200);
    }
    // The primary dies before its replicas had the exits; one of them is promoted, and the old
    // node comes back empty as its replica (so a write can be confirmed again).
    const old = await group.primaryPort();
    group.signal(old, 'SIGKILL');
    await group.restoreReplication();
    const promoted = await group.waitFailover(old);
    await group.restartNode(old, promoted);
    // Guarded: never acknowledged, so recorded again on the new primary. (CI once saw it
    // ComputeVanished instead: the test then ran two gateway clusters on one Redis, and the other
    // one's sweep, not seeing this compute, marked the record. One cluster now: see beforeAll.)
    await waitFor('the guarded exit recorded again after the failover', () => exitRecorded(guarded, 'exit-guarded'), 60_000, 200).catch(explained(guarded, 'exit-guarded'));
    // Unguarded: acknowledged by the lost primary alone, so the supervisor never says it again
    // (the record is Ready again: its supervisor, still running, reconnects and says hello).
    await new Promise((r) => setTimeout(r, 3_000));
    expect(await status(unguarded, 'exit-unguarded'), 'the unguarded exit is lost').not.toMatchObject({ reason: 'MainProcessFailed' });
  });
});
