// WatchSandbox over a real gRPC server and a real redis-server: a watcher whose client went away
// while the server waited for the stream to drain must end and release its follow connection.
// The client is a separate process that stops itself (SIGSTOP) and is then killed (SIGKILL).
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Server, ServerCredentials, type ServerWritableStream } from '@grpc/grpc-js';
import type { RedisClient } from '@sandgate/store';
import { serviceDefinition, type SandboxStreamEvent, type WatchSandboxRequest } from '@sandgate/protocols';
import { SandboxFeed, SandboxLogStore, SandboxStore, WorkspaceStore } from '@sandgate/store';
import { createLogger } from '@sandgate/telemetry';
import { LOCAL_DEV_PRINCIPAL } from '@sandgate/core';
import { WatchService } from '../src/sandboxes/watch-service.ts';
import { WorkspaceAccess } from '../src/api/access.ts';
import { startRedis, type TestRedis } from '@sandgate/test-harness/redis';
import { sleep, waitFor } from '@sandgate/test-harness/wait';

let redis: TestRedis;
let client: RedisClient;
let server: Server;
let address: string;
const stalledWatcher = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures', 'stalled-watcher.ts');
/** Per sandbox id: the server side of its watch, and the watch's end. */
const watches = new Map<string, { sawBackpressure: boolean; ended: Promise<void>; writes: number }>();

beforeAll(async () => {
  redis = await startRedis();
  client = redis.client();
  const watch = new WatchService({
    feed: new SandboxFeed(client),
    store: new SandboxStore(client),
    logs: new SandboxLogStore(client),
    workspaces: new WorkspaceAccess(new WorkspaceStore(client)),
    log: createLogger({ component: 'test' }, 'error'),
  });
  server = new Server();
  server.addService(serviceDefinition('openshell.v1.OpenShell'), {
    WatchSandbox: (call: ServerWritableStream<WatchSandboxRequest, SandboxStreamEvent>) => {
      const entry = { sawBackpressure: false, ended: Promise.resolve(), writes: 0 };
      // Records when the stream refused more (the server is about to wait for a drain).
      const write = call.write.bind(call) as (ev: SandboxStreamEvent) => boolean;
      call.write = ((ev: SandboxStreamEvent) => {
        const ok = write(ev);
        entry.writes++;
        if (!ok) entry.sawBackpressure = true;
        return ok;
      }) as typeof call.write;
      entry.ended = watch.handleWatch(call, LOCAL_DEV_PRINCIPAL);
      watches.set(call.request.id!, entry);
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  address = `127.0.0.1:${port}`;
});

afterAll(async () => {
  server?.forceShutdown();
  await redis.stop();
});

const followConnections = async (sandboxId: string) =>
  ((await client.client('LIST')) as string).split('\n').filter((l) => l.includes(`name=sandgate-follow:${sandboxId} `)).length;

describe('WatchSandbox', () => {
  it('ends, and closes its follow connection, when the client goes away while the stream is full', async () => {
    const id = 'slow-reader';
    await new SandboxStore(client).create(
      {
        metadata: { id, name: id, workspace: 'default', labels: {}, annotations: {}, created_at_ms: Date.now() },
        spec: { environment: {}, providers: [], command: ['sleep', '1'] },
        status: { conditions: [], phase: 2 },
      },
      'h',
    );
    // The client takes the first event, then stops: nothing reads its socket any more.
    const watcher = spawn(process.execPath, ['--no-warnings', stalledWatcher, address, id], { stdio: ['ignore', 'pipe', 'inherit'] });
    const watcherGone = new Promise((resolve) => watcher.once('exit', resolve));
    let out = '';
    watcher.stdout!.on('data', (b: Buffer) => (out += b.toString()));
    await waitFor('the watcher to take its first event and stop', () => out.includes('watching\n'), 15_000);
    await waitFor('the watch to follow', async () => (await followConnections(id)) === 1);

    const logs = new SandboxLogStore(client);
    const message = 'x'.repeat(64 * 1024);
    // Feed until the stream pushes back: the HTTP/2 window and the loopback socket buffers hold a
    // few MiB at most; up to 125 MiB is fed, pausing now and then so the follower keeps up.
    for (let i = 0; i < 2000 && !watches.get(id)?.sawBackpressure; i++) {
      await logs.append(id, { timestamp_ms: Date.now(), level: 'INFO', target: 't', source: 'sandbox', message });
      if (i % 100 === 99) await sleep(100);
    }
    await waitFor('the stream to push back', () => watches.get(id)?.sawBackpressure).catch((err: Error) => {
      // Says whether the watcher wrote at all (not following) or wrote without ever being refused.
      throw new Error(`${err.message} (the watcher wrote ${watches.get(id)?.writes ?? 0} events)`);
    });

    watcher.kill('SIGKILL');
    await watcherGone;
    const ended = await Promise.race([watches.get(id)!.ended.then(() => true), new Promise((r) => setTimeout(() => r(false), 5_000))]);
    expect(ended, 'the watch ended after the client went away').toBe(true);
    await waitFor('the follow connection to close', async () => (await followConnections(id)) === 0, 5_000);
  });
});
