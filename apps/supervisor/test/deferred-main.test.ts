// A warm-pool member's supervisor (SANDGATE_DEFER_MAIN=1) against a fake gateway: it connects and
// serves execs with no main process; start_main lays the claim's environment over the sandbox's
// (for execs too) and starts the claim's command once, however often it is sent; a reconnect
// after that no longer says it is waiting.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeGateway, killTagged, pidsOf, startSupervisor, waitFor, type SupervisorHandle } from './helpers.ts';

const PREFIX = `t${process.pid}-${randomUUID().slice(0, 8)}-`;
let seq = 0;
const newExecId = () => `${PREFIX}${++seq}`;
const MARKER = `deferred-main-${randomUUID().slice(0, 8)}`;

describe('a supervisor whose main process waits for its claim', () => {
  let gw: FakeGateway;
  let sup: SupervisorHandle;

  beforeAll(async () => {
    gw = await new FakeGateway({ heartbeatIntervalMs: 200 }).start();
    sup = startSupervisor({
      endpoints: [gw.address],
      sandboxId: 'sb-pool',
      // What an empty start_main would run.
      mainArgv: ['sleep', '1001'],
      env: { SANDGATE_DEFER_MAIN: '1', SANDBOX_VAR: 'from-launch' },
    });
    await gw.waitHello(1, 15_000);
  }, 20_000);

  afterAll(async () => {
    await sup?.stop();
    gw?.stop();
    killTagged(PREFIX);
  }, 15_000);

  const run = async (script: string) => {
    const exec = await gw.openExec({ exec_id: newExecId(), argv: ['sh', '-c', script] });
    await exec.waitExit();
    return exec.stdout();
  };

  it('says it awaits its main process, runs none, and serves execs meanwhile', async () => {
    const control = gw.controls.find((c) => c.hello)!;
    expect(control.hello!.awaiting_main).toBe(true);
    expect(control.hello!.main_pid ?? 0).toBe(0);
    expect(await run('echo "$SANDBOX_VAR ${CLAIMED:-unset}"')).toBe('from-launch unset\n');
    expect(pidsOf(MARKER)).toEqual([]);
    expect(pidsOf('sleep 1001').filter((p) => p !== sup.child.pid)).toEqual([]); // the supervisor's own argv names it
  });

  it('start_main starts the claim command with the claim environment, once', async () => {
    const control = gw.liveControl()!;
    const start = { argv: ['bash', '-c', `exec -a ${MARKER} sleep 1002`], env: { CLAIMED: 'yes', SANDGATE_GATEWAY: 'spoofed' }, tty: false };
    control.call.write({ start_main: start });
    control.call.write({ start_main: start });
    await waitFor('two main_started answers', () => control.messages.filter((m) => m.main_started).length === 2, 10_000);
    await waitFor('the main process', () => pidsOf(MARKER).length === 1, 10_000);
    // The claim's variables reach execs; SANDGATE_* names never do.
    expect(await run('echo "$SANDBOX_VAR $CLAIMED ${SANDGATE_GATEWAY:-none}"')).toBe('from-launch yes none\n');
    expect(pidsOf(MARKER)).toHaveLength(1);
    expect(pidsOf('sleep 1001').filter((p) => p !== sup.child.pid)).toEqual([]); // the supervisor's own argv names it
  });

  it('a reconnect no longer says it is waiting', async () => {
    gw.liveControl()!.call.end();
    const again = await gw.waitHello(2, 15_000);
    expect(again.hello!.awaiting_main ?? false).toBe(false);
    expect(again.hello!.main_pid).toBeGreaterThan(0);
  });
});
