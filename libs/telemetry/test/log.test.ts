// The log lines: JSON with the fields operators and tests read, one error serialiser under every
// key, and the active span's ids on lines written inside a span (a real tracer provider and the
// async-hooks context manager, as the tracing setup installs them). The same checks run on both
// writers: pino's (log.ts: replica, worker, CLI) and the supervisor's own (line-log.ts).
import { context, ROOT_CONTEXT, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger, parseLogLevel, serialiseError, type LogLevel } from '../src/log.ts';
import { createLineLogger } from '../src/line-log.ts';
// tracing.ts installs the logger's reader of the active span, as in every process that makes spans.
import '../src/tracing.ts';

const WRITERS = [
  { name: 'pino (log.ts)', create: createLogger, file: 'log.ts', factory: 'createLogger' },
  { name: 'the supervisor\'s (line-log.ts)', create: createLineLogger, file: 'line-log.ts', factory: 'createLineLogger' },
] as const;
type Writer = (typeof WRITERS)[number];

function capture(writer: Writer, base: Record<string, unknown>, level: LogLevel = 'debug') {
  const lines: string[] = [];
  const log = writer.create(base, level, { destination: { write: (l: string) => lines.push(l) } });
  const records = () =>
    lines.map((l) => {
      expect(l.endsWith('\n')).toBe(true);
      expect(l.slice(0, -1)).not.toContain('\n');
      return JSON.parse(l) as Record<string, unknown>;
    });
  return { log, lines, records };
}

describe.each(WRITERS)('$name', (writer) => {
  it('writes one JSON line per event: level name, ISO ts, msg, base and child fields, filtered by level', () => {
    const { log, lines, records } = capture(writer, { sandbox_id: 'sb' }, 'info');
    log.debug('hidden');
    log.child({ exec_id: 'e1' }).warn('boom', { n: 1 });
    log.error('bad');
    expect(lines).toHaveLength(2);
    const [warn, error] = records();
    expect(warn).toEqual({ level: 'warn', ts: expect.any(String), msg: 'boom', sandbox_id: 'sb', exec_id: 'e1', n: 1 });
    expect(new Date(warn!.ts as string).toISOString()).toBe(warn!.ts);
    expect(error).toMatchObject({ level: 'error', msg: 'bad', sandbox_id: 'sb' });
    expect(error).not.toHaveProperty('exec_id');
    // The level and message are matched as text by operators and the fuzz harness.
    expect(lines[1]).toContain('"level":"error"');
  });

  it('never throws: circular fields, throwing getters', () => {
    const { log, records } = capture(writer, {});
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    expect(() => log.info('circular', { circular })).not.toThrow();
    const hostile = {
      get x(): never {
        throw new Error('getter');
      },
    };
    expect(() => log.info('hostile', { hostile })).not.toThrow();
    expect(records()[0]).toMatchObject({ msg: 'circular', circular: { self: '[Circular]' } });
  });

  it('writes a bigint as its exact digits', () => {
    const { log, lines } = capture(writer, {});
    log.info('big', { n: 2n ** 70n });
    expect(lines[0]).toContain('"n":1180591620717411303424');
  });

  it('SANDGATE_LOG_LEVEL values: any case, anything else is info', () => {
    expect(parseLogLevel(' DEBUG ')).toBe('debug');
    expect(parseLogLevel('warn')).toBe('warn');
    expect(parseLogLevel('verbose')).toBe('info');
    expect(parseLogLevel(undefined)).toBe('info');
  });
});

describe.each(WRITERS)('error serialiser, $name', (writer) => {
  it('serialises an Error the same way under any key, in fields, child bindings and the base', () => {
    const { log, records } = capture(writer, { boot: new Error('at boot') });
    const cause = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });
    const err = new Error('dial failed', { cause });
    log.child({ first: new TypeError('typed') }).error('x', { err, whatever: err, plain: 'text' });
    const rec = records()[0]!;
    const expected = {
      type: 'Error',
      message: 'dial failed',
      stack: expect.stringContaining('dial failed'),
      cause: { type: 'Error', message: 'connect ECONNREFUSED 127.0.0.1:1', code: 'ECONNREFUSED', stack: expect.any(String) },
    };
    expect(rec.err).toEqual(expected);
    expect(rec.whatever).toEqual(expected);
    expect(rec.plain).toBe('text');
    expect(rec.first).toMatchObject({ type: 'TypeError', message: 'typed' });
    expect(rec.boot).toMatchObject({ type: 'Error', message: 'at boot' });
  });

  it('names a gRPC status (grpc-js ServiceError shape, GatewayError) by code and name', () => {
    const svc = Object.assign(new Error('14 UNAVAILABLE: no connection'), { code: 14, details: 'no connection', metadata: {} });
    expect(serialiseError(svc)).toMatchObject({ message: '14 UNAVAILABLE: no connection', grpc_code: 14, grpc_status: 'UNAVAILABLE', details: 'no connection' });
    expect(serialiseError(svc)).not.toHaveProperty('code');
    const gw = Object.assign(new Error('sandbox not found'), { name: 'GatewayError', code: 5 });
    expect(serialiseError(gw)).toMatchObject({ type: 'GatewayError', grpc_code: 5, grpc_status: 'NOT_FOUND' });
  });

  it('ends a cause cycle and lists an AggregateError’s errors', () => {
    const a = new Error('a');
    const b = new Error('b', { cause: a });
    (a as { cause?: unknown }).cause = b;
    const s = JSON.stringify(serialiseError(a));
    expect(s.length).toBeLessThan(20_000);
    const agg = serialiseError(new AggregateError([new Error('one'), 'two'], 'both'));
    expect(agg).toMatchObject({ type: 'AggregateError', message: 'both', errors: [{ message: 'one' }, 'two'] });
  });
});

describe.each(WRITERS)('trace correlation, $name', (writer) => {
  const exporter = new InMemorySpanExporter();
  const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
  const contextManager = new AsyncLocalStorageContextManager();

  beforeAll(() => {
    contextManager.enable();
    context.setGlobalContextManager(contextManager);
  });
  afterAll(async () => {
    context.disable();
    await provider.shutdown();
  });

  it('puts trace_id and span_id on lines inside an active span, across awaits, and not outside', async () => {
    const { log, records } = capture(writer, { component: 'test' });
    const tracer = provider.getTracer('log-test');
    log.info('before');
    await tracer.startActiveSpan('outer', async (span) => {
      log.info('inside');
      await new Promise((r) => setTimeout(r, 5));
      const child = log.child({ exec_id: 'e1' });
      await tracer.startActiveSpan('inner', async (inner) => {
        child.warn('nested', { err: new Error('x') });
        inner.end();
      });
      log.info('back in outer');
      span.end();
    });
    log.info('after');
    // A context with no span (e.g. a callback that escaped the call) carries no ids either.
    context.with(ROOT_CONTEXT, () => log.info('root'));

    await provider.forceFlush();
    const spans = exporter.getFinishedSpans();
    const outer = spans.find((s) => s.name === 'outer')!.spanContext();
    const inner = spans.find((s) => s.name === 'inner')!.spanContext();
    const byMsg = Object.fromEntries(records().map((r) => [r.msg, r]));
    expect(byMsg.inside).toMatchObject({ trace_id: outer.traceId, span_id: outer.spanId, component: 'test' });
    expect(byMsg.nested).toMatchObject({ trace_id: inner.traceId, span_id: inner.spanId, exec_id: 'e1', err: { message: 'x' } });
    expect(inner.traceId).toBe(outer.traceId);
    expect(byMsg['back in outer']).toMatchObject({ trace_id: outer.traceId, span_id: outer.spanId });
    for (const m of ['before', 'after', 'root']) {
      expect(byMsg[m]).toBeDefined();
      expect(byMsg[m]).not.toHaveProperty('trace_id');
      expect(byMsg[m]).not.toHaveProperty('span_id');
    }
    expect(trace.getActiveSpan()).toBeUndefined();
  });
});

describe.each(WRITERS)('a process logging on its real stderr, $name', (writer) => {
  it('writes the ids of the span a line is written in, and only those lines carry them', () => {
    // A separate Node process with the default destination (process.stderr) and the tracing
    // setup's pieces registered globally, as a replica or supervisor with tracing on has them.
    const logTs = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../src', writer.file);
    const tracingTs = path.resolve(path.dirname(logTs), 'tracing.ts');
    const script = `
      import { context, trace } from '@opentelemetry/api';
      import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
      import { TracerProvider } from '@opentelemetry/sdk-trace';
      import { ${writer.factory} as createLogger } from ${JSON.stringify(logTs)};
      import ${JSON.stringify(tracingTs)};
      context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
      trace.setGlobalTracerProvider(new TracerProvider());
      const log = createLogger({ component: 'probe' }, 'info');
      log.info('outside');
      await trace.getTracer('probe').startActiveSpan('call', async (span) => {
        await new Promise((r) => setTimeout(r, 1));
        log.warn('inside', { err: new Error('boom') });
        process.stdout.write(JSON.stringify(span.spanContext()));
        span.end();
      });
    `;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: path.dirname(logTs), encoding: 'utf8', timeout: 20_000 });
    expect(r.status, r.stderr).toBe(0);
    const span = JSON.parse(r.stdout) as { traceId: string; spanId: string };
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(2);
    const [outside, inside] = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(outside).toEqual({ level: 'info', ts: expect.any(String), component: 'probe', msg: 'outside' });
    expect(inside).toMatchObject({ level: 'warn', component: 'probe', trace_id: span.traceId, span_id: span.spanId, msg: 'inside', err: { type: 'Error', message: 'boom' } });
    expect(span.traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(lines[1]).toMatch(/^\{"level":"warn","ts":"[^"]+","component":"probe","trace_id":"[0-9a-f]{32}","span_id":"[0-9a-f]{16}",/);
  });
});

describe.each(WRITERS)('the logger alone, $name', (writer) => {
  it('loads no OTel module (the supervisor\'s: no pino either), and its lines carry no ids until tracing.ts is loaded', () => {
    // What a process with tracing off loads: every module a process resolves is recorded.
    const logTs = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../src', writer.file);
    const script = `
      import { registerHooks } from 'node:module';
      const loaded = [];
      registerHooks({ resolve(spec, ctx, next) { const r = next(spec, ctx); loaded.push(r.url); return r; } });
      const { ${writer.factory}: createLogger } = await import(${JSON.stringify(logTs)});
      createLogger({ component: 'probe' }, 'info').info('plain');
      process.stdout.write(JSON.stringify({ otel: loaded.filter((u) => u.includes('opentelemetry')), pino: loaded.some((u) => u.includes('/pino/')) }));
    `;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: path.dirname(logTs), encoding: 'utf8', timeout: 20_000 });
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ otel: [], pino: writer.file === 'log.ts' });
    expect(JSON.parse(r.stderr.trim())).toEqual({ level: 'info', ts: expect.any(String), component: 'probe', msg: 'plain' });
  });
});
