// Finds the way to a sandbox's supervisor: directly when this replica holds its session,
// otherwise through the owner replica's peer port (found in Redis).
import { credentials, makeGenericClientConstructor, Metadata, type Client, type ClientDuplexStream, type ServiceError } from '@grpc/grpc-js';
import type { Duplex } from 'node:stream';
import { serviceDefinition, type ExecFrame, type ExecStart, type TcpFrame, type TcpOpen } from '@sandgate/protocols';
import { GatewayError, Code } from '@sandgate/core';
import type { OwnershipStore, ReplicaRegistry } from '@sandgate/store';
import type { Logger } from '@sandgate/telemetry';
import { endWithError, type SessionRegistry } from './sessions.ts';

/** One exec's frame stream to the supervisor, wherever it is, and how to tear it down. */
export interface ExecPath {
  readonly stream: Duplex;
  readonly via: 'local' | 'peer';
  /** Break the path: the supervisor then kills the exec's process tree. */
  abort(reason: string): void;
}

/** One TCP channel's frame stream to the supervisor (TcpFrames), wherever it is. */
export type TcpPath = ExecPath;

const PeerClient = makeGenericClientConstructor(serviceDefinition('sandgate.v1.Peer'), 'Peer');

type PeerClientInstance = Client & {
  Exec(metadata: Metadata): ClientDuplexStream<ExecFrame, ExecFrame>;
  Tcp(metadata: Metadata): ClientDuplexStream<TcpFrame, TcpFrame>;
  KillExec(
    req: { sandbox_id: string; exec_id: string },
    metadata: Metadata,
    options: { deadline: number },
    cb: (err: ServiceError | null, res?: { killed?: number }) => void,
  ): void;
};

export interface RouterDeps {
  replicaId: string;
  sessions: SessionRegistry;
  ownership: OwnershipStore;
  replicas: ReplicaRegistry;
  peerSecret: string;
  log: Logger;
}

export class ExecRouter {
  private readonly deps: RouterDeps;
  private readonly peers = new Map<string, PeerClientInstance>();

  constructor(deps: RouterDeps) {
    this.deps = deps;
  }

  /** Is the sandbox's supervisor session live anywhere: here, or a fresh owner record naming a live replica. */
  async sessionLive(sandboxId: string): Promise<boolean> {
    if (this.deps.sessions.get(sandboxId)) return true;
    const owner = await this.deps.ownership.get(sandboxId);
    if (!owner || owner.replica === this.deps.replicaId) return false;
    return (await this.deps.replicas.get(owner.replica)) !== null;
  }

  /** Opens the exec on the owner replica, wherever that is. `start` is sent as the first frame. */
  async open(sandboxId: string, start: ExecStart): Promise<ExecPath> {
    if (this.deps.sessions.get(sandboxId)) return this.openLocal(sandboxId, start);
    return this.openPeer(await this.ownerPeerAddress(sandboxId), start);
  }

  /** The peer address of the replica holding the sandbox's session (not this one), or UNAVAILABLE. */
  private async ownerPeerAddress(sandboxId: string): Promise<string> {
    const owner = await this.deps.ownership.get(sandboxId);
    if (!owner || owner.replica === this.deps.replicaId) {
      throw new GatewayError(Code.UNAVAILABLE, 'supervisor relay failed: supervisor session not connected');
    }
    const info = await this.deps.replicas.get(owner.replica);
    if (!info) {
      throw new GatewayError(
        Code.UNAVAILABLE,
        `supervisor relay failed: the session is held by replica ${owner.replica}, which is not live; the supervisor is reconnecting, retry`,
      );
    }
    return info.peerAddress;
  }

  /**
   * Kills what is left of an exec, wherever the sandbox's session is. Throws UNAVAILABLE when no
   * replica holds the session right now (the caller, a durable job, retries).
   */
  async killExec(sandboxId: string, execId: string): Promise<number> {
    if (this.deps.sessions.get(sandboxId)) return this.killExecLocal(sandboxId, execId);
    const address = await this.ownerPeerAddress(sandboxId);
    const client = this.peerClient(address);
    return new Promise<number>((resolve, reject) => {
      client.KillExec({ sandbox_id: sandboxId, exec_id: execId }, this.peerMetadata(), { deadline: Date.now() + 15_000 }, (err, res) => {
        if (err) {
          if (err.code === Code.UNAVAILABLE) this.evict(address);
          reject(err);
        } else resolve(res?.killed ?? 0);
      });
    });
  }

  killExecLocal(sandboxId: string, execId: string): Promise<number> {
    const session = this.deps.sessions.get(sandboxId);
    if (!session) return Promise.reject(new GatewayError(Code.UNAVAILABLE, 'supervisor session not connected'));
    return this.deps.sessions.killExec(session, execId);
  }

  private peerMetadata(): Metadata {
    const metadata = new Metadata();
    metadata.set('x-sandgate-peer-secret', this.deps.peerSecret);
    metadata.set('x-sandgate-from-replica', this.deps.replicaId);
    return metadata;
  }

  /** This replica holds the session: ask the supervisor for an ExecChannel. */
  async openLocal(sandboxId: string, start: ExecStart): Promise<ExecPath> {
    const session = this.deps.sessions.get(sandboxId);
    if (!session) throw new GatewayError(Code.UNAVAILABLE, 'supervisor relay failed: supervisor session not connected');
    const call = await this.deps.sessions.openExec(session, start);
    return {
      stream: call as unknown as Duplex,
      via: 'local',
      abort: (reason) => endWithError(call, new GatewayError(Code.CANCELLED, reason)),
    };
  }

  private openPeer(address: string, start: ExecStart): ExecPath {
    const client = this.peerClient(address);
    const call = client.Exec(this.peerMetadata());
    call.on('error', (err: { code?: number }) => {
      // Drop the cached channel on transport failures so the next call re-resolves the owner.
      if (err.code === Code.UNAVAILABLE) this.evict(address);
    });
    call.write({ start });
    return { stream: call as unknown as Duplex, via: 'peer', abort: () => call.cancel() };
  }

  // ---- TCP channels (SSH and ForwardTcp): the same routing as exec, with TcpFrames -----------

  /** Opens a TCP channel to the sandbox's supervisor, wherever its session is. */
  async openTcp(sandboxId: string, open: TcpOpen): Promise<TcpPath> {
    if (this.deps.sessions.get(sandboxId)) return this.openTcpLocal(sandboxId, open);
    const address = await this.ownerPeerAddress(sandboxId);
    const call = this.peerClient(address).Tcp(this.peerMetadata());
    call.on('error', (err: { code?: number }) => {
      if (err.code === Code.UNAVAILABLE) this.evict(address);
    });
    call.write({ open });
    return { stream: call as unknown as Duplex, via: 'peer', abort: () => call.cancel() };
  }

  /** This replica holds the session: ask the supervisor for a TcpChannel. */
  async openTcpLocal(sandboxId: string, open: TcpOpen): Promise<TcpPath> {
    const session = this.deps.sessions.get(sandboxId);
    if (!session) throw new GatewayError(Code.UNAVAILABLE, 'supervisor relay failed: supervisor session not connected');
    const call = await this.deps.sessions.openTcp(session, open);
    return {
      stream: call as unknown as Duplex,
      via: 'local',
      abort: (reason) => endWithError(call, new GatewayError(Code.CANCELLED, reason)),
    };
  }

  private peerClient(address: string): PeerClientInstance {
    let client = this.peers.get(address);
    if (!client) {
      client = new PeerClient(address, credentials.createInsecure(), {
        'grpc.keepalive_time_ms': 2_000,
        'grpc.keepalive_timeout_ms': 2_000,
        'grpc.keepalive_permit_without_calls': 1,
        'grpc.initial_reconnect_backoff_ms': 100,
        'grpc.max_reconnect_backoff_ms': 1000,
      }) as unknown as PeerClientInstance;
      this.peers.set(address, client);
    }
    return client;
  }

  private evict(address: string): void {
    const client = this.peers.get(address);
    if (client) {
      this.peers.delete(address);
      client.close();
    }
  }

  close(): void {
    for (const client of this.peers.values()) client.close();
    this.peers.clear();
  }
}
