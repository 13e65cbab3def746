// WatchService's positions (REST's SSE ids), on a real redis-server: a watch resumed from the
// position of any event it sent delivers exactly what came after that event, snapshots and log
// lines, and nothing it had already sent; then what is new.
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RedisClient } from '@sandgate/store';
import type { SandboxStreamEvent, WatchSandboxRequest } from '@sandgate/protocols';
import { SandboxFeed, SandboxLogStore, SandboxStore, WorkspaceStore } from '@sandgate/store';
import { createLogger } from '@sandgate/telemetry';
import { LOCAL_DEV_PRINCIPAL } from '@sandgate/core';
import { WatchService, type WatchPosition } from '../src/sandboxes/watch-service.ts';
import { WorkspaceAccess } from '../src/api/access.ts';
import { startRedis, type TestRedis } from '@sandgate/test-harness/redis';
import { waitFor } from '@sandgate/test-harness/wait';

type Positioned = SandboxStreamEvent & { position: WatchPosition };

let redis: TestRedis;
let client: RedisClient;
let watch: WatchService;
let store: SandboxStore;
let logs: SandboxLogStore;

beforeAll(async () => {
  redis = await startRedis();
  client = redis.client();
  store = new SandboxStore(client);
  logs = new SandboxLogStore(client);
  watch = new WatchService({ feed: new SandboxFeed(client), store, logs, workspaces: new WorkspaceAccess(new WorkspaceStore(client)), log: createLogger({ component: 'test' }, 'error') });
});

afterAll(async () => {
  client?.disconnect();
  await redis?.stop();
});

/** A call collecting what the watch writes (as the SSE call does, minus the HTTP). */
class Collect extends Writable {
  readonly request: WatchSandboxRequest;
  cancelled = false;
  readonly got: Positioned[] = [];
  constructor(request: WatchSandboxRequest) {
    super({ objectMode: true });
    this.request = request;
    this.on('error', () => undefined);
  }
  override _write(ev: Positioned, _e: BufferEncoding, done: () => void): void {
    this.got.push(ev);
    done();
  }
  cancel(): void {
    this.cancelled = true;
    this.emit('cancelled');
    this.destroy();
  }
}

const label = (e: Positioned) => (e.sandbox ? `rv${e.sandbox.metadata?.resource_version}` : `log:${e.log?.message}`);
const snapshots = (es: Positioned[]) => es.filter((e) => e.sandbox).map(label);
const lines = (es: Positioned[]) => es.filter((e) => e.log).map(label);

async function bump(id: string): Promise<void> {
  await store.mutate(id, (cur) => ({ sandbox: { ...cur.sandbox, metadata: { ...cur.sandbox.metadata!, labels: { n: String(Math.random()) } } } }));
}
const line = (id: string, message: string) => logs.append(id, { timestamp_ms: Date.now(), level: 'INFO', target: 't', source: 'sandbox', message });

describe('WatchService positions', () => {
  it('resumes after any event without duplicates or gaps', async () => {
    const id = 'resume-me';
    await store.create(
      { metadata: { id, name: id, workspace: 'default', labels: {}, annotations: {}, created_at_ms: Date.now() }, spec: { environment: {}, providers: [], command: ['sleep', '1'] }, status: { conditions: [], phase: 2 } },
      'h',
    );
    for (const m of ['t1', 't2', 't3']) await line(id, m);
    const request: WatchSandboxRequest = { id, follow_status: true, follow_logs: true, log_sources: [] };
    const first = new Collect(request);
    const firstEnded = watch.handleWatch(first as never, LOCAL_DEV_PRINCIPAL, { positions: true });
    await waitFor('snapshot and tail', () => first.got.length === 4);
    await bump(id);
    await line(id, 'l1');
    await bump(id);
    await line(id, 'l2');
    await waitFor('the live changes', () => first.got.length === 8, 10_000);
    first.cancel();
    await firstEnded;
    expect(snapshots(first.got)).toHaveLength(3);
    expect(lines(first.got)).toEqual(['log:t1', 'log:t2', 'log:t3', 'log:l1', 'log:l2']);

    // Written while no one watched.
    await bump(id);
    await line(id, 'l3');
    const rvAfter = `rv${(await store.get(id))!.resourceVersion}`;

    for (let k = 0; k < first.got.length; k++) {
      const resumed = new Collect(request);
      const ended = watch.handleWatch(resumed as never, LOCAL_DEV_PRINCIPAL, { positions: true, resumeFrom: first.got[k]!.position });
      const rest = first.got.slice(k + 1);
      const want = { snapshots: [...snapshots(rest), rvAfter], lines: [...lines(rest), 'log:l3'] };
      await waitFor(`resume after event ${k} (${label(first.got[k]!)})`, () => snapshots(resumed.got).length >= want.snapshots.length && lines(resumed.got).length >= want.lines.length, 10_000, 20);
      // Anything extra would come in the same read: give it a moment to show.
      await new Promise((r) => setTimeout(r, 50));
      resumed.cancel();
      await ended;
      expect({ snapshots: snapshots(resumed.got), lines: lines(resumed.got) }, `resumed after event ${k}`).toEqual(want);
    }
  });
});
