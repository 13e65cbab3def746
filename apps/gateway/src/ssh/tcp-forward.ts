// ForwardTcp (clients) and relayed TCP channels (peer links from other replicas). The entry replica checks everything — the init
// frame, the access rule, the SSH session token and the connection caps — then opens a TCP channel
// to the sandbox's supervisor wherever its session is (locally, or relayed through the owner) and
// relays raw bytes both ways until either end closes.
import type { Principal } from '@sandgate/core';
import { randomUUID } from 'node:crypto';
import type { ServerDuplexStream } from '@grpc/grpc-js';
import { limitReadAhead, type LinkChannel } from '@sandgate/relay';
import type { Duplex } from 'node:stream';
import type { TcpForwardFrame, TcpFrame, TcpForwardInit } from '@sandgate/protocols';
import { GatewayError, Code, type DebugBreak } from '@sandgate/core';
import type { Logger, Metrics } from '@sandgate/telemetry';
import { toPeerError, type ExecRouter } from '../relay/exec-router.ts';
import type { SshService } from './ssh-service.ts';
import { endWithError, onceGone, takeFirstMessage } from '../api/calls.ts';
import { toClientError } from '../api/grpc-errors.ts';
import { tcpOpenFor, validateForwardInit } from './tcp-target.ts';
import { relayForward, spliceTcp } from './tcp-relay.ts';
import { extractContext, failSpan, injectContext, SpanKind, startSpan, TraceAttr } from '@sandgate/telemetry';

export interface TcpForwardDeps {
  ssh: SshService;
  router: ExecRouter;
  log: Logger;
  metrics: Metrics;
  /** Debug faults of this process (only `retriable-errors` acts here); normally empty. */
  debugBreaks?: ReadonlySet<DebugBreak>;
}

type ForwardCall = ServerDuplexStream<TcpForwardFrame, TcpForwardFrame>;

export class TcpForwardService {
  private readonly deps: TcpForwardDeps;

  constructor(deps: TcpForwardDeps) {
    this.deps = deps;
  }

  /** The status the client gets for a failed forward (see toClientError). */
  private readonly clientError = (err: unknown) => toClientError(err, this.deps.log, this.deps.debugBreaks?.has('retriable-errors') ?? false);

  /** ForwardTcp: bidi; the first client frame must be `init`. */
  handleForward(call: ForwardCall, caller: Principal): void {
    // Later data frames wait until the path is open: one message's worth (libs/relay's limitReadAhead).
    limitReadAhead(call);
    takeFirstMessage(call, 'empty ForwardTcp stream', (first: TcpForwardFrame) => {
      if (!first.init) {
        endWithError(call, new GatewayError(Code.INVALID_ARGUMENT, 'first TcpForwardFrame must be init'));
        return;
      }
      this.open(call, first.init, caller).catch((err: unknown) => endWithError(call, this.clientError(err)));
    });
  }

  private async open(call: ForwardCall, init: TcpForwardInit, caller: Principal): Promise<void> {
    const { ssh, router, log, metrics } = this.deps;
    const { sandboxId, target } = validateForwardInit(init);
    const record = await ssh.accessibleSandbox(sandboxId, caller);
    const token = init.authorization_token ?? '';
    await ssh.checkToken(token, record);
    const release = await ssh.acquire(token, sandboxId);
    // The slot is held exactly as long as the client's call lives.
    onceGone(call, release);
    if (call.cancelled) return release();
    const channelId = randomUUID();
    let path;
    try {
      path = await router.openTcp(sandboxId, tcpOpenFor(channelId, sandboxId, target, init.service_id ?? ''));
    } catch (err) {
      release();
      throw err;
    }
    if (call.cancelled) {
      path.abort('client went away');
      return;
    }
    metrics.inc('sandgate_ssh_forwards_total');
    log.debug('tcp forward opened', { sandboxId, channelId, target: target.kind, via: path.via });
    relayForward(call as unknown as Duplex & { cancelled: boolean }, path, this.clientError, release);
  }

  /** A relayed TCP channel on the owner, over a peer link (already authorised). */
  servePeer(call: LinkChannel<TcpFrame>): void {
    call.once('data', (first: TcpFrame) => {
      call.pause();
      const open = first.open;
      if (!open?.sandbox_id || !open.channel_id || (!open.ssh && !open.tcp && !open.file)) {
        endWithError(call, new GatewayError(Code.INVALID_ARGUMENT, 'first peer frame must be open with sandbox_id, channel_id and a target'));
        return;
      }
      // The owner's hop of a relayed TCP channel (SSH, ForwardTcp): a child of the entry's call
      // span, parent of what the supervisor does; it lasts as long as the channel.
      const { span, ctx } = startSpan('sandgate.Peer/Tcp', {
        kind: SpanKind.SERVER,
        parent: extractContext(open.trace_context),
        attributes: { [TraceAttr.sandboxId]: open.sandbox_id, [TraceAttr.channelId]: open.channel_id, 'sandgate.tcp.target': open.ssh ? 'ssh' : open.file ? 'file' : 'tcp' },
      });
      if (span.isRecording()) {
        open.trace_context = injectContext(ctx);
        call.on('error', (err: unknown) => failSpan(span, err));
        onceGone(call, () => span.end());
      }
      this.deps.router
        .openTcpLocal(open.sandbox_id, open)
        .then((path) => {
          if (call.cancelled) return path.abort('peer went away');
          call.sendMetadata();
          spliceTcp(call as unknown as Duplex & { cancelled: boolean }, path);
        })
        .catch((err: unknown) => endWithError(call, toPeerError(err, this.deps.log)));
    });
  }
}
