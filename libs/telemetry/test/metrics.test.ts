import { describe, expect, it } from 'vitest';
import { Metrics } from '@sandgate/telemetry';

describe('Metrics', () => {
  it('renders labelled gauges under one TYPE line per family, with label values escaped', () => {
    const m = new Metrics();
    m.inc('sandgate_things_total', 2);
    m.gauge('sandgate_g', () => 1, { name: 'a' });
    m.gauge('sandgate_plain', () => 7);
    m.gauge('sandgate_g', () => 2, { name: 'say "hi"\\' });
    expect(m.render()).toBe(
      [
        '# TYPE sandgate_things_total counter',
        'sandgate_things_total 2',
        '# TYPE sandgate_g gauge',
        'sandgate_g{name="a"} 1',
        'sandgate_g{name="say \\"hi\\"\\\\"} 2',
        '# TYPE sandgate_plain gauge',
        'sandgate_plain 7',
        '',
      ].join('\n'),
    );
    expect(m.get('sandgate_g', { name: 'a' })).toBe(1);
    expect(m.get('sandgate_plain')).toBe(7);
    expect(m.get('sandgate_g')).toBe(0);
  });
});
