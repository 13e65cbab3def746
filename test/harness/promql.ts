// Reading metric names out of PromQL expressions and out of a Prometheus text exposition, so that
// tests can check that every dashboard panel and alert names a metric the replicas export.

/** Words that stand where a metric name could, but are operators or modifiers. */
const KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'and', 'or', 'unless', 'offset', 'atan2', 'inf', 'nan', 'start', 'end']);

/**
 * The metric names an expression selects (`sum by (le) (rate(x_bucket{a="b"}[5m]))` → x_bucket).
 * Not a full parser: strings, label matchers, ranges, grouping clauses and Grafana variables are
 * cut out, and what is left that is an identifier not followed by `(` is a metric name.
 */
export function metricNames(expr: string): string[] {
  let s = expr.replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""');
  s = s.replace(/\{[^}]*\}/g, ' ');
  s = s.replace(/\[[^\]]*\]/g, ' ');
  s = s.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  s = s.replace(/\$\{?\w+\}?/g, ' ');
  const names = new Set<string>();
  for (const m of s.matchAll(/(?<![\w.])([A-Za-z_:][A-Za-z0-9_:]*)\s*(\()?/g)) {
    const name = m[1]!;
    if (m[2] !== undefined || KEYWORDS.has(name.toLowerCase())) continue;
    names.add(name);
  }
  return [...names];
}

/** Grafana's variables replaced by values Prometheus accepts, so an expression can be run as is. */
export function withGrafanaVariables(expr: string, vars: Record<string, string> = {}): string {
  const all: Record<string, string> = { __rate_interval: '1m', __interval: '15s', __range: '1h', ...vars };
  return expr.replace(/\$\{(\w+)(?::\w+)?\}|\$(\w+)/g, (whole, a: string | undefined, b: string | undefined) => all[(a ?? b)!] ?? whole);
}

/**
 * The series names a /metrics body exports: every sample's name, plus the names a `# TYPE`
 * line declares (a family with no sample yet: a histogram `x` declares x_bucket, x_sum and
 * x_count; a counter `x` also x_total).
 */
export function exportedNames(exposition: string): { samples: Set<string>; declared: Set<string> } {
  const samples = new Set<string>();
  const declared = new Set<string>();
  for (const line of exposition.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)/.exec(line);
    if (type) {
      const [, name, kind] = type as unknown as [string, string, string];
      declared.add(name);
      if (kind === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) declared.add(name + suffix);
      if (kind === 'counter' && !name.endsWith('_total')) declared.add(name + '_total');
      continue;
    }
    const sample = /^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{|\s)/.exec(line);
    if (sample) samples.add(sample[1]!);
  }
  return { samples, declared };
}
