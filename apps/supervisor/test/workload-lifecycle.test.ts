// The confined supervisor's edges: the proxy environment workloads get, the netns agent dying
// (fatal: the supervisor exits), confinement without network isolation, and a driver naming
// root as the workload identity.
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import type { GatewayMessage } from '@sandgate/protocols';
import { FakeGateway, killTagged, startSupervisor, waitFor, type SupervisorHandle } from './helpers.ts';

const PREFIX = `wl${process.pid}-${randomUUID().slice(0, 8)}-`;
let seq = 0;
const newId = () => `${PREFIX}${++seq}`;

describe('confined supervisor lifecycle', () => {
  let gw: FakeGateway | undefined;
  let sup: SupervisorHandle | undefined;

  afterEach(async () => {
    await sup?.stop();
    gw?.stop();
    killTagged(PREFIX);
    sup = undefined;
    gw = undefined;
  }, 20_000);

  const start = async (env: Record<string, string>, mainArgv?: string[]) => {
    if (process.getuid?.() !== 0) throw new Error('these tests must run as root');
    gw = await new FakeGateway({ heartbeatIntervalMs: 500 }).start();
    sup = startSupervisor({
      endpoints: [gw.address],
      sandboxId: 'sb-wl-life',
      mainArgv,
      env: { SANDGATE_WORKLOAD_UID: '10001', SANDGATE_WORKLOAD_GID: '10001', ...env },
    });
    return gw;
  };

  it('gives workloads the proxy variables unless they set their own, and dies when its netns agent dies', async () => {
    const g = await start({ SANDGATE_NETWORK_ISOLATION: '1' });
    await g.waitHello(1, 20_000);
    const exec = await g.openExec({
      exec_id: newId(),
      argv: ['sh', '-c', 'env | grep -i _proxy= | sort'],
      env: { https_proxy: 'http://mine.test:1' },
    });
    await exec.waitExit();
    expect(exec.stdout()).toBe(
      [
        'ALL_PROXY=http://127.0.0.1:3128',
        'HTTPS_PROXY=http://127.0.0.1:3128',
        'HTTP_PROXY=http://127.0.0.1:3128',
        'NO_PROXY=127.0.0.1,localhost,::1',
        'all_proxy=http://127.0.0.1:3128',
        'http_proxy=http://127.0.0.1:3128',
        'https_proxy=http://mine.test:1',
        'no_proxy=127.0.0.1,localhost,::1',
        '',
      ].join('\n'),
    );

    const ready = await waitFor('netns agent pid', () => sup!.logs().find((l) => l.msg === 'workload network namespace ready'));
    process.kill(ready.agent_pid as number, 'SIGKILL');
    expect(await Promise.race([sup!.exited, new Promise((r) => setTimeout(() => r('still running'), 15_000))])).toBe(1);
    expect(sup!.logs().some((l) => l.msg === 'supervisor cannot go on' && /netns agent exited/.test(String(l.reason)))).toBe(true);
  });

  it('without network isolation still drops the uid (a PTY main process too), and refuses a policy it cannot enforce', async () => {
    const g = await start({ SANDGATE_NETWORK_ISOLATION: '0', SANDGATE_MAIN_TTY: '1' }, ['sh', '-c', 'echo "main uid $(id -u) on $(tty)"; exec sleep 1000']);
    const control = await g.waitHello(1, 20_000);
    await waitFor('main output', () => /main uid 10001 on \/dev\/pts\//.test(sup!.stdout()), 10_000);
    const exec = await g.openExec({ exec_id: newId(), argv: ['sh', '-c', 'id -u; env | grep -ci _proxy= || true'] });
    await exec.waitExit();
    expect(exec.stdout()).toBe('10001\n0\n');
    control.call.write({ policy_update: { policy: Buffer.alloc(0), revision: 7 } } as GatewayMessage);
    const applied = await waitFor('policy_applied', () => control.messages.find((m) => (m as { policy_applied?: unknown }).policy_applied));
    expect((applied as { policy_applied?: { revision?: number; error?: string } }).policy_applied).toEqual({
      revision: 7,
      error: 'this sandbox has no network isolation: its egress policy cannot be enforced',
    });
  });

  it('refuses to start with root as the workload identity', async () => {
    await start({ SANDGATE_WORKLOAD_UID: '0', SANDGATE_NETWORK_ISOLATION: '1' });
    expect(await sup!.exited).toBe(2);
    expect(sup!.logs().find((l) => l.msg === 'invalid configuration')?.err).toMatch(/SANDGATE_WORKLOAD_UID must be a numeric id other than 0/);
  });
});
