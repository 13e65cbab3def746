// The one comparison of shared secrets (peer secret on links and on Peer gRPC calls): wrong
// secrets are refused whatever their length, and Peer.KillExec uses it.
import { describe, expect, it } from 'vitest';
import { Metadata, type ServerUnaryCall, type ServiceError } from '@grpc/grpc-js';
import { Code } from '@sandgate/core';
import { createLogger, Metrics } from '@sandgate/telemetry';
import { secretsEqual } from '../src/api/secrets.ts';
import { hashCredential, newCredential, verifyCredential } from '../src/sessions/credentials.ts';
import { ExecService, type ExecServiceDeps } from '../src/exec/exec-service.ts';

const SECRET = 'the-peer-secret';

describe('secretsEqual', () => {
  it('accepts the secret itself', () => {
    expect(secretsEqual(SECRET, SECRET)).toBe(true);
    expect(secretsEqual('', '')).toBe(true);
  });

  it('refuses a wrong secret of the same length and of another length', () => {
    expect(secretsEqual('the-peer-secreT', SECRET)).toBe(false);
    expect(secretsEqual('x'.repeat(SECRET.length), SECRET)).toBe(false);
    expect(secretsEqual('the-peer', SECRET)).toBe(false);
    expect(secretsEqual(`${SECRET}-and-more`, SECRET)).toBe(false);
    expect(secretsEqual('', SECRET)).toBe(false);
    expect(secretsEqual(SECRET, '')).toBe(false);
  });
});

describe('verifyCredential', () => {
  it('accepts the credential whose hash is stored, and nothing else', () => {
    const { secret, hash } = newCredential();
    expect(verifyCredential(secret, hash)).toBe(true);
    expect(verifyCredential(`${secret.slice(0, -1)}x`, hash)).toBe(secret.endsWith('x'));
    expect(verifyCredential('short', hash)).toBe(false);
    expect(verifyCredential('', hash)).toBe(false);
    expect(verifyCredential(secret, '')).toBe(false);
    expect(verifyCredential(secret, hashCredential('another'))).toBe(false);
    expect(verifyCredential(secret, 'not-a-hash')).toBe(false);
  });
});

describe('Peer.KillExec', () => {
  /** Calls KillExec with `secret` (none when undefined); resolves with the error code, or the kill count. */
  function killExec(secret: string | undefined): Promise<{ code?: number; killed?: number }> {
    const kills: string[] = [];
    const exec = new ExecService({
      router: {
        killExecLocal: async (sandboxId: string, execId: string) => {
          kills.push(`${sandboxId}/${execId}`);
          return 2;
        },
      } as unknown as ExecServiceDeps['router'],
      store: undefined as unknown as ExecServiceDeps['store'],
      peerSecret: SECRET,
      scheduler: null,
      log: createLogger({ component: 'test' }, 'error'),
      metrics: new Metrics(),
      // KillExec is a peer call: no caller, no workspace scoping or exec slots involved.
      workspaces: undefined as unknown as ExecServiceDeps['workspaces'],
      execSlots: undefined as unknown as ExecServiceDeps['execSlots'],
      maxExecsPerWorkspace: 0,
    });
    const metadata = new Metadata();
    if (secret !== undefined) metadata.set('x-sandgate-peer-secret', secret);
    const call = { metadata, request: { sandbox_id: 's', exec_id: 'e' } } as unknown as ServerUnaryCall<
      { sandbox_id?: string; exec_id?: string },
      { killed: number }
    >;
    return new Promise((resolve) =>
      exec.handlePeerKill(call, (err: Partial<ServiceError> | null, res?: { killed: number } | null) =>
        resolve(err ? { code: err.code } : { killed: res?.killed }),
      ),
    );
  }

  it('kills with the right secret', async () => {
    expect(await killExec(SECRET)).toEqual({ killed: 2 });
  });

  it('refuses a wrong secret of the same length, of another length, and none', async () => {
    for (const wrong of ['the-peer-secreT', 'short', `${SECRET}!`, '', undefined]) {
      expect(await killExec(wrong), String(wrong)).toEqual({ code: Code.PERMISSION_DENIED });
    }
  });
});
