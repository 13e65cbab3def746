// WatchSandbox over a real gRPC server and a real redis-server: a watcher whose client went away
// while the server waited for the stream to drain must end and release its follow connection.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Server, ServerCredentials, type ClientReadableStream, type ServerWritableStream } from '@grpc/grpc-js';
import type { Redis } from 'ioredis';
import { serviceDefinition, type SandboxStreamEvent, type WatchSandboxRequest } from '@sandgate/protocols';
import { SandboxFeed, SandboxLogStore, SandboxStore, WorkspaceStore } from '@sandgate/store';
import { createLogger } from '@sandgate/telemetry';
import { LOCAL_DEV_PRINCIPAL } from '@sandgate/core';
import { WatchService } from '../src/sandboxes/watch-service.ts';
import { WorkspaceAccess } from '../src/api/access.ts';
import { startRedis, type TestRedis } from '@sandgate/test-harness/redis';
import { openShellClient, type AnyClient } from '@sandgate/test-harness/grpc-client';
import { sleep, waitFor } from '@sandgate/test-harness/wait';

let redis: TestRedis;
let client: Redis;
let server: Server;
let grpc: AnyClient;
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
  grpc = openShellClient(`127.0.0.1:${port}`);
});

afterAll(async () => {
  grpc?.close();
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
    // The client never reads: its buffers and the HTTP/2 window fill up, the server's writes back up.
    const call = grpc.WatchSandbox({ id, follow_logs: true, follow_status: true }) as ClientReadableStream<SandboxStreamEvent>;
    call.on('error', () => undefined); // CANCELLED, below
    await waitFor('the watch to follow', async () => (await followConnections(id)) === 1);

    const logs = new SandboxLogStore(client);
    const message = 'x'.repeat(64 * 1024);
    // How much it takes depends on how far the client's and the server's buffers stretch (12.5 MiB
    // was not always enough): feed until the stream pushes back, pausing now and then so the
    // follower keeps up, up to 125 MiB.
    for (let i = 0; i < 2000 && !watches.get(id)?.sawBackpressure; i++) {
      await logs.append(id, { timestamp_ms: Date.now(), level: 'INFO', target: 't', source: 'sandbox', message });
      if (i % 100 === 99) await sleep(100);
    }
    await waitFor('the stream to push back', () => watches.get(id)?.sawBackpressure).catch((err: Error) => {
      // Says whether the watcher wrote at all (not following) or wrote without ever being refused.
      throw new Error(`${err.message} (the watcher wrote ${watches.get(id)?.writes ?? 0} events)`);
    });

    call.cancel();
    const ended = await Promise.race([watches.get(id)!.ended.then(() => true), new Promise((r) => setTimeout(() => r(false), 5_000))]);
    expect(ended, 'the watch ended after the client went away').toBe(true);
    await waitFor('the follow connection to close', async () => (await followConnections(id)) === 0, 5_000);
  });
});
