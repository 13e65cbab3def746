// The JSON log lines a sandgate process wrote (replica, worker, supervisor: one logger, one shape:
// `level` name, `ts`, `msg`, bound fields, `trace_id`/`span_id` inside a span). Anything else in
// the text (a plain banner line, a partial last line) is skipped. Tests match fields, not the
// order they are written in.
export type LogLine = Record<string, unknown> & { level: string; ts: string; msg: string };

export function logLines(text: string): LogLine[] {
  const out: LogLine[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      const rec = JSON.parse(line) as LogLine;
      if (typeof rec.level === 'string' && typeof rec.msg === 'string') out.push(rec);
    } catch {
      // not a log line
    }
  }
  return out;
}
