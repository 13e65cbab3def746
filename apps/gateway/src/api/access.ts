// The access rule, applied by everything that reaches into a running sandbox: exec, attaching to
// the main process, CreateSshSession and ForwardTcp. The rule itself (phase × live session) is
// libs/core's decideAccess; this is where the record and the session's liveness are looked up.
import { GatewayError, Code, Phase, decideAccess, notFound } from '@sandgate/core';
import type { SandboxStore, StoredSandbox } from '@sandgate/store';

export interface AccessDeps {
  store: SandboxStore;
  /** Is the sandbox's supervisor session live anywhere (on this replica or another)? */
  sessionLive(sandboxId: string): Promise<boolean>;
}

/** The sandbox's record if it may be accessed now; NOT_FOUND or FAILED_PRECONDITION otherwise. */
export async function requireAccess(deps: AccessDeps, sandboxId: string): Promise<StoredSandbox> {
  const record = await deps.store.get(sandboxId);
  if (!record) throw notFound();
  const phase = record.sandbox.status?.phase;
  // A Ready sandbox is judged without the session lookup, so the common case costs one read.
  const decision = decideAccess(phase, phase === Phase.READY ? true : await deps.sessionLive(sandboxId));
  if (!decision.allowed) throw new GatewayError(Code.FAILED_PRECONDITION, decision.message);
  return record;
}
