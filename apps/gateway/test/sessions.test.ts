// Supervisor sessions against a real redis-server: which session a replica keeps when two hellos
// of one sandbox overlap.
import { describe, expect, it } from 'vitest';
import { EventEmitter } from 'node:events';
import { Metadata } from '@grpc/grpc-js';
import type { RedisClient } from '@sandgate/store';
import { OwnershipStore, SandboxStore } from '@sandgate/store';
import type { GatewayMessage, Sandbox } from '@sandgate/protocols';
import { Code } from '@sandgate/core';
import { createLogger, Metrics } from '@sandgate/telemetry';
import { SessionRegistry, type ControlCall, type ExecChannelCall } from '../src/sessions/sessions.ts';
import { hashCredential } from '../src/sessions/credentials.ts';
import { redisForFile } from '@sandgate/test-harness/redis-per-file';
import { waitFor } from '@sandgate/test-harness/wait';

let client: RedisClient;
redisForFile((server) => (client = server.client()));

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

/**
 * Two hellos of one sandbox on one replica, each held just after its claim: A claims first (the
 * lower fence), then B. `run` lets them finish in the order it chooses.
 */
async function overlappingHellos(id: string, run: (h: Hellos) => Promise<void>): Promise<void> {
  const store = new SandboxStore(client);
  await store.create(sandbox(id), hashCredential(CREDENTIAL));
  const ownership = new GatedOwnership(client, 60_000);
  const sessions = registry(store, ownership);
  try {
    const calls = [new FakeControlCall(id), new FakeControlCall(id)] as const;
    for (const [i, call] of calls.entries()) {
      sessions.handleControl(call as unknown as ControlCall);
      call.emit('data', { hello: { sandbox_id: id, instance_id: 'inst' } });
      await waitFor(`hello ${i} to claim`, () => ownership.claimed.length === i + 1);
    }
    const [claimA, claimB] = ownership.claimed;
    expect(claimB!.fence).toBeGreaterThan(claimA!.fence);
    const finish = async (call: FakeControlCall, claim: { release(): void }) => {
      claim.release();
      await waitFor('the hello to be answered', () => call.helloAck() !== undefined || call.error !== undefined);
    };
    await run({
      store,
      sessions,
      a: calls[0],
      b: calls[1],
      fenceB: claimB!.fence,
      finishA: () => finish(calls[0], claimA!),
      finishB: () => finish(calls[1], claimB!),
    });
  } finally {
    ownership.hold = false;
    for (const c of ownership.claimed) c.release();
    await sessions.drain();
  }
}

interface Hellos {
  store: SandboxStore;
  sessions: SessionRegistry;
  a: FakeControlCall;
  b: FakeControlCall;
  fenceB: number;
  finishA(): Promise<void>;
  finishB(): Promise<void>;
}

describe('SessionRegistry', () => {
  it('keeps the session with the newest fence when an older hello finishes last', async () => {
    await overlappingHellos('fence-race', async ({ store, sessions, a, b, fenceB, finishA, finishB }) => {
      await finishB();
      expect(b.helloAck()).toBeDefined();
      await finishA();

      expect(sessions.get('fence-race')?.fence).toBe(fenceB);
      expect(sessions.get('fence-race')?.call).toBe(b);
      expect(b.error).toBeUndefined();
      // A is refused, not left half-alive: the supervisor behind it reconnects if it is the live one.
      expect(a.helloAck()).toBeUndefined();
      expect(a.error?.code).toBeDefined();
      // The record names B's fence, so B's disconnect is the one that counts.
      expect((await store.get('fence-race'))?.ownerFence).toBe(fenceB);
    });
  });

  it('closes the older session when the newer hello finishes last', async () => {
    await overlappingHellos('fence-order', async ({ store, sessions, a, b, fenceB, finishA, finishB }) => {
      await finishA();
      await finishB();
      expect(b.helloAck()).toBeDefined();

      expect(sessions.get('fence-order')?.fence).toBe(fenceB);
      expect(sessions.get('fence-order')?.call).toBe(b);
      await waitFor('A to be ended', () => a.error !== undefined);
      expect((await store.get('fence-order'))?.ownerFence).toBe(fenceB);
    });
  });
});

describe('SessionRegistry: who may speak for a sandbox', () => {
  it("refuses a hello with a wrong credential, with another sandbox's credential, or for an unknown id, and takes nothing over", async () => {
    const store = new SandboxStore(client);
    await store.create(sandbox('victim'), hashCredential(CREDENTIAL));
    await store.create(sandbox('attacker'), hashCredential('the-attackers-own-credential'));
    const ownership = new OwnershipStore(client, 60_000);
    const sessions = registry(store, ownership);
    try {
      const attempts: Array<[string, string, string]> = [
        ['victim', 'guessed', 'a wrong credential'],
        ['victim', 'the-attackers-own-credential', "another sandbox's valid credential"],
        ['victim', '', 'no credential'],
        ['no-such-sandbox', CREDENTIAL, 'an unknown sandbox id'],
      ];
      for (const [id, credential, what] of attempts) {
        const call = new FakeControlCall(id);
        call.metadata.set('x-sandgate-credential', credential);
        sessions.handleControl(call as unknown as ControlCall);
        call.emit('data', { hello: { sandbox_id: id, instance_id: 'evil' } });
        await waitFor(`the hello with ${what} to be answered`, () => call.error ?? call.helloAck());
        expect(call.helloAck(), what).toBeUndefined();
        expect(call.error, what).toMatchObject({ code: Code.PERMISSION_DENIED, details: 'unknown sandbox or bad credential' });
      }
      // Nothing was claimed or changed for the victim.
      expect(sessions.get('victim')).toBeUndefined();
      expect(await ownership.get('victim')).toBeNull();
      expect((await store.get('victim'))?.ownerFence ?? 0).toBe(0);
    } finally {
      await sessions.drain();
    }
  });
});

describe('SessionRegistry: streams that end before their first message', () => {
  it('answers a Control, ExecChannel or TcpChannel stream half-closed before any message at once, with INVALID_ARGUMENT', async () => {
    // Found by `npm run fuzz`: a Control stream half-closed before its hello was never answered
    // (its hello timer is cleared when the stream ends), and a channel waited 10 s for its attach.
    const sessions = registry(new SandboxStore(client), new OwnershipStore(client, 60_000));
    try {
      const control = new FakeControlCall('anything');
      sessions.handleControl(control as unknown as ControlCall);
      control.emit('end');
      expect(control.error).toMatchObject({ code: Code.INVALID_ARGUMENT, details: 'control stream ended before its hello' });
      for (const open of [(c: ExecChannelCall) => sessions.handleExecChannel(c), (c: ExecChannelCall) => sessions.handleTcpChannel(c as never)]) {
        const channel = new FakeChannelCall('anything');
        open(channel as unknown as ExecChannelCall);
        channel.emit('end');
        expect(channel.error).toMatchObject({ code: Code.INVALID_ARGUMENT, details: 'channel ended before its attach frame' });
      }
    } finally {
      await sessions.drain();
    }
  });
});

/** An ExecChannel call as the supervisor opens it: the test sends its attach frame and ends it. */
class FakeChannelCall extends EventEmitter {
  readonly metadata = new Metadata();
  error: { code?: number; details?: string } | undefined;
  writableEnded = false;
  destroyed = false;
  constructor(sandboxId: string) {
    super();
    this.metadata.set('x-sandgate-sandbox-id', sandboxId);
    this.on('error', (err: { code?: number; details?: string }) => {
      this.error = err;
      this.destroyed = true;
    });
  }
  pause(): this {
    return this;
  }
}

describe('SessionRegistry exec slots', () => {
  it('counts asked-for and attached execs against the limit, and frees a slot when a channel goes', async () => {
    const id = 'exec-slots';
    const store = new SandboxStore(client);
    await store.create(sandbox(id), hashCredential(CREDENTIAL));
    const sessions = registry(store, new OwnershipStore(client, 60_000));
    try {
      const control = new FakeControlCall(id);
      sessions.handleControl(control as unknown as ControlCall);
      control.emit('data', { hello: { sandbox_id: id, instance_id: 'inst' } });
      await waitFor('the session', () => sessions.get(id));
      const session = sessions.get(id)!;
      // The limit is 4 (registry()): two attached, two still waiting for their channel.
      const opened = ['e1', 'e2', 'e3', 'e4'].map((execId) => sessions.openExec(session, { exec_id: execId, sandbox_id: id, argv: ['true'], env: {} }));
      expect(control.written.filter((m) => m.open_exec).map((m) => m.open_exec!.exec_id)).toEqual(['e1', 'e2', 'e3', 'e4']);
      const channels = ['e1', 'e2'].map((execId) => {
        const channel = new FakeChannelCall(id);
        sessions.handleExecChannel(channel as unknown as ExecChannelCall);
        channel.emit('data', { attach: { exec_id: execId, session_id: session.sessionId } });
        return channel;
      });
      expect(await opened[0]).toBe(channels[0]);
      expect(await opened[1]).toBe(channels[1]);
      await expect(sessions.openExec(session, { exec_id: 'e5', sandbox_id: id, argv: ['true'], env: {} })).rejects.toMatchObject({
        code: Code.RESOURCE_EXHAUSTED,
        message: 'sandbox has 4 execs running, the limit per sandbox; wait for one to finish or cancel one',
      });

      // An attach for an unknown exec, or from another session, is NOT_FOUND and takes no slot.
      for (const attach of [{ exec_id: 'nope', session_id: session.sessionId }, { exec_id: 'e3', session_id: 'other' }]) {
        const stray = new FakeChannelCall(id);
        sessions.handleExecChannel(stray as unknown as ExecChannelCall);
        stray.emit('data', { attach });
        expect(stray.error).toMatchObject({ code: Code.NOT_FOUND, details: 'unknown or expired exec channel' });
      }

      // One channel goes (however many of its end events fire): one slot is free again.
      channels[0]!.emit('cancelled');
      channels[0]!.emit('close');
      const fifth = sessions.openExec(session, { exec_id: 'e5', sandbox_id: id, argv: ['true'], env: {} });
      await expect(sessions.openExec(session, { exec_id: 'e6', sandbox_id: id, argv: ['true'], env: {} })).rejects.toMatchObject({
        code: Code.RESOURCE_EXHAUSTED,
      });

      // The session closing fails what still waits for its channel.
      const waiting = Promise.allSettled([opened[2], opened[3], fifth]);
      await sessions.drop(id, 'test over');
      for (const outcome of await waiting) {
        expect(outcome).toMatchObject({ status: 'rejected', reason: { code: Code.UNAVAILABLE, message: 'supervisor session closed: test over' } });
      }
    } finally {
      await sessions.drain();
    }
  });
});
