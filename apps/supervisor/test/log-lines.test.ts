// What a real supervisor writes on stderr (the sandbox log): every line one JSON object of the
// shared logger's shape, every line naming its sandbox, errors through the one serialiser (a
// lost control stream's gRPC status by code and name), no trace ids outside a span.
import { createLogger } from '@sandgate/telemetry/log';
import { afterEach, describe, expect, it } from 'vitest';
import { NetnsAgent } from '../src/workload/netns.ts';
import { FakeGateway, startSupervisor, waitFor } from './helpers.ts';

const LEVELS = ['debug', 'info', 'warn', 'error'];

describe('supervisor log lines', () => {
  const cleanups: Array<() => unknown> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  }, 20_000);

  it('are JSON lines with level, ts, msg and sandbox_id; a lost session logs its gRPC error whole', async () => {
    const gw = await new FakeGateway({ heartbeatIntervalMs: 500 }).start();
    let gwStopped = false;
    cleanups.push(() => gwStopped || gw.stop());
    const sup = startSupervisor({ endpoints: [gw.address], sandboxId: 'sb-log-shape', mainArgv: ['sleep', '1000'] });
    cleanups.push(() => sup.stop());
    await gw.waitHello(1, 15_000);
    const exec = await gw.openExec({ exec_id: `log-shape-${process.pid}`, argv: ['echo', 'hi'] });
    await exec.waitExit();
    gw.stop();
    gwStopped = true;
    const lost = await waitFor('control session lost', () => sup.logs().find((l) => l.msg === 'control session lost'), 15_000);

    // Every stderr line from the supervisor itself is a log line (the main process's own output
    // goes to stdout here: `sleep` writes nothing).
    const raw = sup.stderr().split('\n').filter((l) => l !== '');
    expect(raw.length).toBeGreaterThan(3);
    for (const line of raw) {
      const rec = JSON.parse(line) as Record<string, unknown>;
      expect(LEVELS).toContain(rec.level);
      expect(typeof rec.msg).toBe('string');
      expect(new Date(rec.ts as string).toISOString()).toBe(rec.ts);
      expect(rec.sandbox_id).toBe('sb-log-shape');
      // No span is active in this supervisor (tracing is off): no ids, and pino's pid/hostname stay out.
      expect(rec).not.toHaveProperty('trace_id');
      expect(rec).not.toHaveProperty('hostname');
      // The level is written as its name, first: operators grep for it.
      expect(line.startsWith(`{"level":"${String(rec.level)}","ts":"`)).toBe(true);
    }
    expect(sup.logs().some((l) => l.level === 'debug')).toBe(true);
    expect(lost).toMatchObject({
      level: 'warn',
      sandbox_id: 'sb-log-shape',
      endpoint: gw.address,
      err: { type: 'Error', message: expect.any(String), grpc_code: expect.any(Number), grpc_status: expect.any(String), stack: expect.any(String) },
    });
  }, 40_000);

  it('carries what the netns agent writes on stderr as log lines of the sandbox', async () => {
    const lines: string[] = [];
    const log = createLogger({ sandbox_id: 'sb-netns' }, 'info', { destination: { write: (l: string) => lines.push(l) } });
    // Port 0 is refused by the agent itself: it says why on stderr and exits 1.
    await expect(NetnsAgent.start({ proxyPort: 0, log, onDeath: () => {} })).rejects.toThrow(/netns agent exited \(code 1/);
    const recs = await waitFor('the agent line', () => {
      const r = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((x) => x.msg === 'netns agent stderr');
      return r.length > 0 ? r : undefined;
    }, 5_000);
    expect(recs[0]).toMatchObject({ level: 'error', sandbox_id: 'sb-netns', line: 'sandgate netns agent: bad proxy port 0', agent_pid: expect.any(Number) });
  });
});
