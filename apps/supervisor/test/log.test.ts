// The supervisor's JSON log lines.
import { describe, expect, it } from 'vitest';
import { createLogger } from '../src/log.ts';

describe('log', () => {
  it('writes one JSON line per event with the base fields, filtered by level', () => {
    const lines: string[] = [];
    const log = createLogger({ level: 'info', base: { sandbox_id: 'sb' }, write: (l) => lines.push(l) });
    log.debug('hidden');
    log.child({ exec_id: 'e1' }).warn('boom', { err: new Error('bad') });
    expect(lines).toHaveLength(1);
    expect(lines[0].endsWith('\n')).toBe(true);
    const rec = JSON.parse(lines[0]);
    expect(rec).toMatchObject({ level: 'warn', msg: 'boom', sandbox_id: 'sb', exec_id: 'e1', err: { message: 'bad' } });
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    expect(() => log.info('circular', { circular })).not.toThrow();
  });
});
