// The control session's resilience: failover to another endpoint, silence detection, and what
// happens to running execs when the session dies or the supervisor is told to stop.
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { FakeGateway, freePort, killTagged, startSupervisor, taggedPids, waitFor, type SupervisorHandle } from './helpers.ts';

const PREFIX = `r${process.pid}-${randomUUID().slice(0, 8)}-`;
let seq = 0;
const newExecId = () => `${PREFIX}${++seq}`;

describe('control session resilience', () => {
  const cleanups: Array<() => unknown> = [];
  const track = <T>(v: T, cleanup: (v: T) => unknown): T => {
    cleanups.push(() => cleanup(v));
    return v;
  };

  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
    killTagged(PREFIX);
  }, 20_000);

  it('reconnects to the next endpoint when its gateway dies, killing execs of the dead session', async () => {
    const first = track(await new FakeGateway({ heartbeatIntervalMs: 500 }).start(), (g) => g.stop());
    const secondPort = await freePort();
    const sup: SupervisorHandle = track(
      startSupervisor({ endpoints: [first.address, `127.0.0.1:${secondPort}`], sandboxId: 'sb-failover' }),
      (s) => s.stop(),
    );
    const hello1 = (await first.waitHello(1, 15_000)).hello!;

    const id = newExecId();
    await first.openExec({ exec_id: id, argv: ['sh', '-c', 'setsid sleep 606 & sleep 607'] });
    await waitFor('exec tree started', () => taggedPids(id).length >= 3);

    first.stop();
    // The control session died with the replica: the exec's path is broken, its tree must go.
    await waitFor('exec tree killed', () => taggedPids(id).length === 0, 5000);

    const second = track(await new FakeGateway({ port: secondPort, heartbeatIntervalMs: 500 }).start(), (g) => g.stop());
    const hello2 = (await second.waitHello(1, 10_000)).hello!;
    expect(hello2.sandbox_id).toBe('sb-failover');
    // Same supervisor run: same instance id and main pid.
    expect(hello2.instance_id).toBe(hello1.instance_id);
    expect(hello2.main_pid).toBe(hello1.main_pid);

    // Execs work over the new session.
    const exec = await second.openExec({ exec_id: newExecId(), argv: ['echo', 'after-failover'] });
    await exec.waitExit();
    expect(exec.stdout()).toBe('after-failover\n');
    expect(exec.attach!.session_id).toBe('sess-1');
    expect(sup.child.exitCode).toBeNull();
  }, 30_000);

  it('treats a gateway that stops talking as dead and reconnects', async () => {
    const gw = track(await new FakeGateway({ heartbeatIntervalMs: 150, sendHeartbeats: false }).start(), (g) => g.stop());
    track(startSupervisor({ endpoints: [gw.address], sandboxId: 'sb-silent' }), (s) => s.stop());
    const first = await gw.waitHello(1, 15_000);
    // Nothing arrives after the ack: 3 intervals later the supervisor gives up and says hello again.
    await gw.waitHello(2, 5000);
    await waitFor('first stream cancelled', () => first.ended, 3000);
    expect(first.messages.filter((m) => m.heartbeat).length).toBeGreaterThanOrEqual(1);
  }, 30_000);

  it('keeps retrying while no gateway is reachable at all', async () => {
    const port = await freePort();
    const sup = track(startSupervisor({ endpoints: [`127.0.0.1:${port}`], sandboxId: 'sb-patient' }), (s) => s.stop());
    await waitFor('several failed attempts', () => sup.logs().filter((l) => l.msg === 'control session attempt failed').length >= 3, 10_000);
    expect(sup.child.exitCode).toBeNull();
    const gw = track(await new FakeGateway({ port }).start(), (g) => g.stop());
    await gw.waitHello(1, 10_000);
  }, 30_000);

  it('on SIGTERM kills running exec trees and the main process group, then exits', async () => {
    const gw = track(await new FakeGateway().start(), (g) => g.stop());
    const mainTag = `${PREFIX}main`;
    const sup = track(
      startSupervisor({
        endpoints: [gw.address],
        sandboxId: 'sb-stop',
        // The main process is not tagged by the supervisor; tag it here to find it in /proc.
        mainArgv: ['env', `SANDGATE_EXEC_ID=${mainTag}`, 'sh', '-c', 'sleep 608 & sleep 609'],
      }),
      (s) => s.stop(),
    );
    await gw.waitHello(1, 15_000);
    const id = newExecId();
    await gw.openExec({ exec_id: id, argv: ['sh', '-c', 'setsid sleep 610 & sleep 611'] });
    await waitFor('trees started', () => taggedPids(id).length >= 3 && taggedPids(mainTag).length >= 2);
    sup.child.kill('SIGTERM');
    expect(await sup.exited).toBe(0);
    expect(taggedPids(id)).toEqual([]);
    await waitFor('main tree gone', () => taggedPids(mainTag).length === 0, 3000);
  }, 30_000);
});
