// Counters and gauges kept in process and exposed as Prometheus text on /metrics. The
// OpenTelemetry API is the seam for exporters; these in-process values are what tests and
// operators read directly.
export type Labels = Readonly<Record<string, string>>;

interface Gauge {
  name: string;
  labels: string;
  read: () => number;
}

/** `{k="v",…}` with Prometheus escaping, or '' without labels. */
function formatLabels(labels: Labels): string {
  const pairs = Object.entries(labels).map(([k, v]) => `${k}="${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`);
  return pairs.length === 0 ? '' : `{${pairs.join(',')}}`;
}

export class Metrics {
  private readonly counters = new Map<string, number>();
  /** Keyed by series (name plus labels). */
  private readonly gauges = new Map<string, Gauge>();

  inc(name: string, by = 1): void {
    this.counters.set(name, (this.counters.get(name) ?? 0) + by);
  }

  gauge(name: string, read: () => number, labels: Labels = {}): void {
    const formatted = formatLabels(labels);
    this.gauges.set(name + formatted, { name, labels: formatted, read });
  }

  get(name: string, labels: Labels = {}): number {
    return this.counters.get(name) ?? this.gauges.get(name + formatLabels(labels))?.read() ?? 0;
  }

  render(): string {
    const lines: string[] = [];
    for (const [name, value] of this.counters) lines.push(`# TYPE ${name} counter`, `${name} ${value}`);
    // Prometheus wants one TYPE line per family, followed by all of its series.
    const families = new Map<string, string[]>();
    for (const { name, labels, read } of this.gauges.values()) {
      const series = families.get(name) ?? [];
      series.push(`${name}${labels} ${read()}`);
      families.set(name, series);
    }
    for (const [name, series] of families) lines.push(`# TYPE ${name} gauge`, ...series);
    return lines.join('\n') + '\n';
  }
}
