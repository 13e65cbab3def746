// The reminder a replica with debug faults keeps writing: at ERROR, at start and on every interval.
import { describe, expect, it } from 'vitest';
import { Metrics, type Logger } from '@sandgate/telemetry';
import { announceDebugBreaks } from '../src/debug-breaks.ts';

function collectingLogger(lines: Array<{ level: string; msg: string; fields?: Record<string, unknown> }>): Logger {
  const at = (level: string) => (msg: string, fields?: Record<string, unknown>) => void lines.push({ level, msg, fields });
  const log: Logger = { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'), child: () => log };
  return log;
}

describe('announceDebugBreaks', () => {
  it('logs the faults at ERROR at once and on every interval until stopped, and exposes them as metrics', async () => {
    const lines: Array<{ level: string; msg: string; fields?: Record<string, unknown> }> = [];
    const metrics = new Metrics();
    const stop = announceDebugBreaks(new Set(['fencing', 'jobs'] as const), collectingLogger(lines), metrics, 20);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 'error', fields: { debugBreaks: ['fencing', 'jobs'] } });
    // Two intervals' reminders, however late a loaded machine runs the timers (CI once saw only
    // one within a fixed 110 ms): waited for, up to 5 s.
    const deadline = Date.now() + 5_000;
    while (lines.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    stop();
    const seen = lines.length;
    expect(seen).toBeGreaterThanOrEqual(3);
    expect(lines.every((l) => l.level === 'error')).toBe(true);
    await new Promise((r) => setTimeout(r, 60));
    expect(lines.length).toBe(seen);
    expect(metrics.get('sandgate_debug_break', { name: 'jobs' })).toBe(1);
    expect(await metrics.render()).toContain('# TYPE sandgate_debug_break gauge\nsandgate_debug_break{name="fencing"} 1\nsandgate_debug_break{name="jobs"} 1\n');
  });

  it('says nothing without faults', async () => {
    const lines: Array<{ level: string; msg: string }> = [];
    const metrics = new Metrics();
    announceDebugBreaks(new Set(), collectingLogger(lines), metrics, 20)();
    expect(lines).toEqual([]);
    expect(await metrics.render()).not.toContain('sandgate_debug_break');
  });
});
