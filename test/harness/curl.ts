// `curl` as the HTTP client of e2e tests: a real process, as a user would run it, so what is
// tested is what any HTTP client gets (no fetch() niceties in between).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { waitFor } from './wait.ts';

export interface CurlResult {
  status: number;
  body: string;
  /** The body parsed as JSON (undefined when it is not JSON). */
  json: any;
  headers: Record<string, string>;
}

const STATUS_MARK = '\n__curl_status__';

/**
 * Runs curl once: `-sS`, the response headers kept, the status appended. A JSON `body` is sent
 * from a file (`--data-binary @file`), so it is not on curl's command line (tests that look for
 * a sandbox's processes by command line must not find curl).
 */
export async function curl(method: string, url: string, opts: { token?: string; body?: unknown; rawBody?: string; headers?: Record<string, string>; timeoutMs?: number } = {}): Promise<CurlResult> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sg-curl-'));
  const headerFile = path.join(dir, 'headers');
  const args = ['-sS', '-X', method, '-D', headerFile, '-w', `${STATUS_MARK}%{http_code}`, url];
  if (opts.token !== undefined) args.push('-H', `Authorization: Bearer ${opts.token}`);
  for (const [k, v] of Object.entries(opts.headers ?? {})) args.push('-H', `${k}: ${v}`);
  const payload = opts.rawBody ?? (opts.body !== undefined ? JSON.stringify(opts.body) : undefined);
  if (payload !== undefined) {
    const bodyFile = path.join(dir, 'body');
    writeFileSync(bodyFile, payload);
    args.push('-H', 'Content-Type: application/json', '--data-binary', `@${bodyFile}`);
  }
  try {
    const { code, stdout, stderr } = await run(args, opts.timeoutMs ?? 60_000);
    if (code !== 0) throw new Error(`curl ${method} ${url} failed (${code}): ${stderr}`);
    const at = stdout.lastIndexOf(STATUS_MARK);
    const body = stdout.slice(0, at);
    const headers: Record<string, string> = {};
    for (const line of readFileSync(headerFile, 'utf8').split('\r\n').slice(1)) {
      const i = line.indexOf(':');
      if (i > 0) headers[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
    }
    let json: unknown;
    try {
      json = JSON.parse(body);
    } catch {
      json = undefined;
    }
    return { status: Number(stdout.slice(at + STATUS_MARK.length)), body, json, headers };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function run(args: string[], timeoutMs: number): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn('curl', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    p.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('error', reject);
    p.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, stdout, stderr });
    });
  });
}

export interface SseEvent {
  id?: string;
  event: string;
  data: string;
}

/** A curl process reading a Server-Sent Events stream (`-N`, unbuffered), parsed as it comes. */
export class CurlSse {
  readonly events: SseEvent[] = [];
  /** Comment lines seen (heartbeats). */
  comments = 0;
  readonly proc: ChildProcess;
  private buf = '';
  private exited = false;
  stderr = '';

  constructor(url: string, opts: { token?: string; lastEventId?: string; headers?: Record<string, string> } = {}) {
    const args = ['-sS', '-N', url];
    if (opts.token !== undefined) args.push('-H', `Authorization: Bearer ${opts.token}`);
    if (opts.lastEventId !== undefined) args.push('-H', `Last-Event-ID: ${opts.lastEventId}`);
    for (const [k, v] of Object.entries(opts.headers ?? {})) args.push('-H', `${k}: ${v}`);
    this.proc = spawn('curl', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc.stdout!.on('data', (c: Buffer) => this.feed(c.toString()));
    this.proc.stderr!.on('data', (c: Buffer) => (this.stderr += c.toString()));
    this.proc.on('close', () => (this.exited = true));
  }

  private feed(text: string): void {
    this.buf += text;
    for (let end = this.buf.indexOf('\n\n'); end >= 0; end = this.buf.indexOf('\n\n')) {
      const block = this.buf.slice(0, end);
      this.buf = this.buf.slice(end + 2);
      const ev: SseEvent = { event: 'message', data: '' };
      let comment = true;
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) continue;
        comment = false;
        const i = line.indexOf(':');
        const field = i < 0 ? line : line.slice(0, i);
        const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
        if (field === 'id') ev.id = value;
        else if (field === 'event') ev.event = value;
        else if (field === 'data') ev.data += (ev.data ? '\n' : '') + value;
      }
      if (comment) this.comments++;
      else this.events.push(ev);
    }
  }

  /** Waits until an event satisfies `pred` (or fails with what arrived). */
  async waitFor(what: string, pred: (e: SseEvent, all: SseEvent[]) => boolean, timeoutMs = 20_000): Promise<SseEvent> {
    return waitFor(
      `${what} (got ${this.events.map((e) => `${e.event}:${e.data.slice(0, 80)}`).join(' | ')}; curl: ${this.stderr})`,
      () => this.events.find((e) => pred(e, this.events)),
      timeoutMs,
      25,
    );
  }

  get ended(): boolean {
    return this.exited;
  }

  /** Ends curl (the client going away). */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    if (this.exited) return;
    const closed = new Promise((r) => this.proc.once('close', r));
    this.proc.kill(signal);
    await closed;
  }
}
