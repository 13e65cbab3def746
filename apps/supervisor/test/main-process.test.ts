// The main process: exact argv, sandbox env, output mirrored to the supervisor's stdout, exit
// recorded without ending the supervisor.
import { afterEach, describe, expect, it } from 'vitest';
import { FakeGateway, startSupervisor, waitFor } from './helpers.ts';

describe('main process', () => {
  const cleanups: Array<() => unknown> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  }, 20_000);

  it('runs with pipes and the sandbox env; its exit is logged and execs keep working', async () => {
    const gw = await new FakeGateway().start();
    cleanups.push(() => gw.stop());
    const sup = startSupervisor({
      endpoints: [gw.address],
      sandboxId: 'sb-main-exit',
      env: { GREETING: 'hi there' },
      mainArgv: ['sh', '-c', 'echo "main:$GREETING:$(env | grep -c ^SANDGATE_)"; echo to-stderr >&2; exit 3'],
    });
    cleanups.push(() => sup.stop());
    await waitFor('main exit logged', () => sup.logs().find((l) => l.msg === 'main process exited'), 15_000);
    const exitLog = sup.logs().find((l) => l.msg === 'main process exited')!;
    expect(exitLog.exit_code).toBe(3);
    expect(sup.stdout()).toBe('main:hi there:0\n');
    expect(sup.stderr()).toContain('to-stderr\n');

    await gw.waitHello(1, 15_000);
    const exec = await gw.openExec({ exec_id: `m${process.pid}-1`, argv: ['echo', 'still-here'] });
    await exec.waitExit();
    expect(exec.stdout()).toBe('still-here\n');
    expect(sup.child.exitCode).toBeNull();
  }, 30_000);

  it('gets a PTY when SANDGATE_MAIN_TTY=1', async () => {
    const gw = await new FakeGateway().start();
    cleanups.push(() => gw.stop());
    const sup = startSupervisor({
      endpoints: [gw.address],
      sandboxId: 'sb-main-tty',
      env: { SANDGATE_MAIN_TTY: '1' },
      mainArgv: ['sh', '-c', 'tty; stty size; echo "TERM=$TERM"'],
    });
    cleanups.push(() => sup.stop());
    await waitFor('main exit logged', () => sup.logs().find((l) => l.msg === 'main process exited'), 15_000);
    expect(sup.stdout()).toMatch(/^\/dev\/pts\/\d+\r\n24 80\r\nTERM=xterm-256color\r\n$/);
  }, 30_000);

  it('reports a main process that cannot be started and keeps running', async () => {
    const gw = await new FakeGateway().start();
    cleanups.push(() => gw.stop());
    const sup = startSupervisor({ endpoints: [gw.address], sandboxId: 'sb-main-missing', mainArgv: ['no-such-main-xyz'] });
    cleanups.push(() => sup.stop());
    const hello = (await gw.waitHello(1, 15_000)).hello!;
    expect(hello.main_pid ?? 0).toBe(0);
    const exitLog = sup.logs().find((l) => l.msg === 'main process exited')!;
    expect(exitLog.exit_code).toBe(127);
    expect(sup.stderr()).toContain('no-such-main-xyz: command not found\n');
  }, 30_000);

  it('exits with an error on a bad configuration', async () => {
    const sup = startSupervisor({ endpoints: [], sandboxId: 'sb-bad' });
    cleanups.push(() => sup.stop());
    expect(await sup.exited).toBe(2);
    expect(sup.logs().some((l) => l.msg === 'invalid configuration')).toBe(true);
  }, 30_000);
});
