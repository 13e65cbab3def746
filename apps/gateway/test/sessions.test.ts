// Supervisor sessions against a real redis-server: which session a replica keeps when two hellos
// of one sandbox overlap.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventEmitter } from 'node:events';
import { Metadata } from '@grpc/grpc-js';
import type { Redis } from 'ioredis';
import { OwnershipStore, SandboxStore } from '@sandgate/store';
import type { GatewayMessage, Sandbox } from '@sandgate/protocols';
import { createLogger, Metrics } from '@sandgate/telemetry';
import { SessionRegistry, type ControlCall } from '../src/sessions/sessions.ts';
import { hashCredential } from '../src/sessions/credentials.ts';
import { startRedis, type TestRedis } from '../../../test/harness/redis.ts';
import { waitFor } from '../../../test/harness/wait.ts';

let redis: TestRedis;
let client: Redis;

beforeAll(async () => {
  redis = await startRedis();
  client = redis.client();
});
afterAll(async () => redis.stop());

const CREDENTIAL = 'the-credential';

/** A Control call as grpc-js hands it to the registry: the supervisor side is driven by the test. */
class FakeControlCall extends EventEmitter {
  readonly metadata = new Metadata();
  readonly written: GatewayMessage[] = [];
  error: { code?: number; details?: string } | undefined;
  cancelled = false;
  writableEnded = false;
  destroyed = false;
  constructor(sandboxId: string) {
    super();
    this.metadata.set('x-sandgate-sandbox-id', sandboxId);
    this.metadata.set('x-sandgate-credential', CREDENTIAL);
    this.on('error', (err: { code?: number; details?: string }) => {
      this.error = err;
      this.destroyed = true;
    });
  }
  write(msg: GatewayMessage): boolean {
    this.written.push(msg);
    return true;
  }
  pause(): this {
    return this;
  }
  resume(): this {
    return this;
  }
  helloAck(): GatewayMessage['hello_ack'] | undefined {
    return this.written.find((m) => m.hello_ack)?.hello_ack;
  }
}

/** The real ownership store, with each claim's answer held back until the test lets it through. */
class GatedOwnership extends OwnershipStore {
  readonly claimed: Array<{ fence: number; release(): void }> = [];
  hold = true;
  override async claim(sandboxId: string, replicaId: string, sessionId: string, instanceId: string): Promise<number> {
    const fence = await super.claim(sandboxId, replicaId, sessionId, instanceId);
    if (!this.hold) return fence;
    await new Promise<void>((release) => this.claimed.push({ fence, release }));
    return fence;
  }
}

function sandbox(id: string): Sandbox {
  return {
    metadata: { id, name: id, workspace: 'default', labels: {}, annotations: {}, created_at_ms: Date.now() },
    spec: { environment: {}, providers: [], command: ['sleep', '1'] },
    status: { conditions: [], phase: 1 },
  };
}

function registry(store: SandboxStore, ownership: OwnershipStore): SessionRegistry {
  return new SessionRegistry({
    replicaId: 'r1',
    store,
    ownership,
    heartbeatIntervalMs: 60_000,
    heartbeatMisses: 3,
    maxExecsPerSandbox: 4,
    disconnectGraceMs: 60_000,
    reports: { mainExit: async () => undefined, terminalFinal: async () => undefined },
    log: createLogger({ component: 'test' }, 'error'),
    metrics: new Metrics(),
  });
}

function hello(call: FakeControlCall, sandboxId: string, instanceId: string): void {
  call.emit('data', { hello: { sandbox_id: sandboxId, instance_id: instanceId } });
}

describe('SessionRegistry', () => {
  it('keeps the session with the newest fence when an older hello finishes last', async () => {
    const id = 'fence-race';
    const store = new SandboxStore(client);
    await store.create(sandbox(id), hashCredential(CREDENTIAL));
    const ownership = new GatedOwnership(client, 60_000);
    const sessions = registry(store, ownership);
    try {
      // Hello A claims first and is held just after its claim.
      const a = new FakeControlCall(id);
      sessions.handleControl(a as unknown as ControlCall);
      hello(a, id, 'inst');
      await waitFor('A to claim', () => ownership.claimed.length === 1);
      // Hello B claims after A (a higher fence) and finishes first.
      const b = new FakeControlCall(id);
      sessions.handleControl(b as unknown as ControlCall);
      hello(b, id, 'inst');
      await waitFor('B to claim', () => ownership.claimed.length === 2);
      const [fenceA, fenceB] = ownership.claimed.map((c) => c.fence);
      expect(fenceB).toBeGreaterThan(fenceA!);
      ownership.claimed[1]!.release();
      await waitFor('B to be accepted', () => b.helloAck() !== undefined);
      // Now A finishes its hello.
      ownership.claimed[0]!.release();
      await waitFor('A to be answered', () => a.helloAck() !== undefined || a.error !== undefined);

      expect(sessions.get(id)?.fence).toBe(fenceB);
      expect(sessions.get(id)?.call).toBe(b);
      expect(b.error).toBeUndefined();
      // A is refused, not left half-alive: the supervisor behind it reconnects if it is the live one.
      expect(a.helloAck()).toBeUndefined();
      expect(a.error?.code).toBeDefined();
      // The record names B's fence, so B's disconnect is the one that counts.
      expect((await store.get(id))?.ownerFence).toBe(fenceB);
    } finally {
      ownership.hold = false;
      for (const c of ownership.claimed) c.release();
      await sessions.drain();
    }
  });

  it('closes the older session when the newer hello finishes last', async () => {
    const id = 'fence-order';
    const store = new SandboxStore(client);
    await store.create(sandbox(id), hashCredential(CREDENTIAL));
    const ownership = new GatedOwnership(client, 60_000);
    const sessions = registry(store, ownership);
    try {
      const a = new FakeControlCall(id);
      sessions.handleControl(a as unknown as ControlCall);
      hello(a, id, 'inst');
      await waitFor('A to claim', () => ownership.claimed.length === 1);
      const b = new FakeControlCall(id);
      sessions.handleControl(b as unknown as ControlCall);
      hello(b, id, 'inst');
      await waitFor('B to claim', () => ownership.claimed.length === 2);
      const fenceB = ownership.claimed[1]!.fence;
      ownership.claimed[0]!.release();
      await waitFor('A to be answered', () => a.helloAck() !== undefined || a.error !== undefined);
      ownership.claimed[1]!.release();
      await waitFor('B to be accepted', () => b.helloAck() !== undefined);

      expect(sessions.get(id)?.fence).toBe(fenceB);
      expect(sessions.get(id)?.call).toBe(b);
      await waitFor('A to be ended', () => a.error !== undefined);
      expect((await store.get(id))?.ownerFence).toBe(fenceB);
    } finally {
      ownership.hold = false;
      for (const c of ownership.claimed) c.release();
      await sessions.drain();
    }
  });
});
