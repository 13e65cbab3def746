// Issue 13's acceptance for clients: one built the way OpenShell's official TypeScript SDK builds
// its transport (test/harness/openshell-sdk.ts: connect-node's gRPC transport, `https://` base
// URLs, the CA and client certificate handed to Node's TLS, `authorization: Bearer` from an
// interceptor) runs create, exec and delete against a three-replica TLS cluster, each call at
// another replica: once with a bearer token, once over mTLS with no token. A plaintext client and
// a client that does not trust the gateway's CA get nowhere.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCertificateAuthority } from '@sandgate/pki';
import { TokenStore } from '@sandgate/store';
import { Cluster } from '../harness/cluster.ts';
import { startRedis, type TestRedis } from '../harness/redis.ts';
import { ConnectError, openShellService, sdkClient, type SdkClientOptions } from '../harness/openshell-sdk.ts';
import { waitFor } from '../harness/wait.ts';

let redis: TestRedis;
let cluster: Cluster;
let token: string;
let client: { cert: string; key: string };

beforeAll(async () => {
  redis = await startRedis();
  cluster = await Cluster.start({ redisUrl: redis.url, replicas: 3, tls: { clientCa: true } });
  // A real API token (admin of `default`), as `sandgate token create` makes one.
  token = (await new TokenStore(redis.client()).create({ workspace: 'default', role: 'admin', name: 'sdk-connect' })).token;
  client = await cluster.issueClientCertificate('sdk-user', ['admin']);
});

afterAll(async () => {
  await cluster?.stop();
  cluster?.cleanup();
  await redis?.stop();
});

const baseUrl = (i: number) => `https://127.0.0.1:${cluster.replicas[i]!.grpcPort}`;
const trust = (): Pick<SdkClientOptions, 'ca' | 'servername'> => ({ ca: cluster.tlsCredentials().ca, servername: 'localhost' });

// The SDK's client type is generated; ours is built from a descriptor, so its methods are untyped.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Sdk = any;

interface ExecEvent {
  payload: { case: 'stdout' | 'stderr'; value: { data: Uint8Array } } | { case: 'exit'; value: { exitCode: number } } | { case: undefined };
}

/** CreateSandbox at replica 0, ExecSandbox (server stream) at replica 1, DeleteSandbox at replica 2. */
async function createExecDelete(name: string, credentials: Pick<SdkClientOptions, 'token' | 'cert' | 'key'>): Promise<void> {
  const at = [0, 1, 2].map((i) => sdkClient({ baseUrl: baseUrl(i), ...trust(), ...credentials }) as Sdk);
  const created = await at[0].createSandbox({ name, spec: { command: ['sleep', 'infinity'] } });
  const id: string = created.sandbox.metadata.id;
  expect(created.sandbox.metadata.name).toBe(name);
  try {
    await waitFor(`${name} ready`, async () => (await at[1].getSandbox({ name })).sandbox.status?.phase === 2, 60_000, 200);
    let stdout = '';
    let exitCode: number | undefined;
    for await (const event of at[1].execSandbox({ sandboxId: id, command: ['sh', '-c', 'echo hello from $0', 'sdk'] }) as AsyncIterable<ExecEvent>) {
      if (event.payload.case === 'stdout') stdout += Buffer.from(event.payload.value.data).toString();
      if (event.payload.case === 'exit') exitCode = event.payload.value.exitCode;
    }
    expect(stdout).toBe('hello from sdk\n');
    expect(exitCode).toBe(0);
  } finally {
    expect((await at[2].deleteSandbox({ name })).deleted).toBe(true);
  }
  await expect(at[0].getSandbox({ name })).rejects.toMatchObject({ code: 5 }); // NOT_FOUND
}

describe('an OpenShell SDK-shaped client (connect-node gRPC transport) over TLS', () => {
  it('with a bearer token: create, exec and delete, each at another replica', async () => {
    await createExecDelete('sdk-token', { token });
  });

  it('over mTLS with a client certificate and no token: create, exec and delete, each at another replica', async () => {
    // GetCurrentUser says who the gateway took the caller for, where the gateway has it.
    if (openShellService().methods.some((m) => m.name === 'GetCurrentUser')) {
      const me = await (sdkClient({ baseUrl: baseUrl(1), ...trust(), ...client }) as Sdk).getCurrentUser({});
      expect(JSON.stringify(me)).toContain('sdk-user');
    }
    await createExecDelete('sdk-mtls', client);
  });

  it('a plaintext client gets nothing from the TLS port', async () => {
    const plain = sdkClient({ baseUrl: `http://127.0.0.1:${cluster.replicas[0]!.grpcPort}`, token }) as Sdk;
    const err = await plain.health({}).then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
  });

  it('a client that does not trust the gateway\'s CA refuses it (and so never sends its token)', async () => {
    const stranger = await createCertificateAuthority('not the gateway CA');
    const c = sdkClient({ baseUrl: baseUrl(0), ca: stranger.cert, servername: 'localhost', token }) as Sdk;
    const err = (await c.health({}).then(() => null, (e: unknown) => e)) as ConnectError | null;
    expect(err).toBeInstanceOf(ConnectError);
    expect(String(err?.cause ?? err?.message)).toMatch(/certificate|self.signed|verify/i);
    // And a certificate for another name is refused as well.
    const wrongName = sdkClient({ baseUrl: baseUrl(0), ca: cluster.tlsCredentials().ca, servername: 'evil.example', token }) as Sdk;
    expect(await wrongName.health({}).then(() => null, (e: unknown) => e)).toBeInstanceOf(ConnectError);
  });
});
