// rpc.server.duration from the server interceptor, on a real gRPC server and client: unary OK,
// unary error, a server stream ended by the handler, and one cancelled by the client.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  credentials,
  makeGenericClientConstructor,
  Metadata,
  Server,
  ServerCredentials,
  status,
  type sendUnaryData,
  type ServerUnaryCall,
  type ServerWritableStream,
  type ServiceError,
} from '@grpc/grpc-js';
import { serviceDefinition } from '@sandgate/protocols';
import { Metrics } from '@sandgate/telemetry';
import { rpcMetricsInterceptor } from '../src/api/rpc-metrics.ts';

const definition = serviceDefinition('openshell.v1.OpenShell');
const metrics = new Metrics();
const server = new Server({ interceptors: [rpcMetricsInterceptor(metrics)] });
let client: Record<string, (...args: unknown[]) => any>;

beforeAll(async () => {
  server.addService(definition, {
    Health: (_call: ServerUnaryCall<object, object>, cb: sendUnaryData<object>) => cb(null, { status: 1, version: 'x' }),
    GetSandbox: (_call: ServerUnaryCall<object, object>, cb: sendUnaryData<object>) => cb({ code: status.NOT_FOUND, details: 'no such sandbox' }),
    // Id 'once': one event, then the end. Anything else: events until the client goes away.
    WatchSandbox: (call: ServerWritableStream<{ id?: string }, unknown>) => {
      call.write({});
      if (call.request.id === 'once') call.end();
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  const Client = makeGenericClientConstructor(definition, 'OpenShell');
  client = new Client(`127.0.0.1:${port}`, credentials.createInsecure()) as unknown as typeof client;
});

afterAll(() => {
  (client as unknown as { close(): void }).close();
  server.forceShutdown();
});

const unary = (method: string, req: object) =>
  new Promise<ServiceError | null>((resolve) => client[method]!(req, new Metadata(), {}, (err: ServiceError | null) => resolve(err)));

const count = async (method: string, code: number) => {
  const line = (await metrics.render())
    .split('\n')
    .find((l) => l.startsWith(`rpc_server_duration_count{rpc_system="grpc",rpc_service="openshell.v1.OpenShell",rpc_method="${method}",rpc_grpc_status_code="${code}"} `));
  return line ? Number(line.split(' ')[1]) : 0;
};

describe('rpc.server.duration', () => {
  it('records unary calls with their final status code', async () => {
    expect(await unary('Health', {})).toBeNull();
    expect((await unary('GetSandbox', { name: 'x' }))?.code).toBe(status.NOT_FOUND);
    expect(await count('Health', status.OK)).toBe(1);
    expect(await count('GetSandbox', status.NOT_FOUND)).toBe(1);
  });

  it('records a server stream when it ends, and a client cancel as CANCELLED', async () => {
    await new Promise<void>((resolve) => {
      const call = client.WatchSandbox!({ id: 'once' }, new Metadata(), {});
      call.on('data', () => undefined);
      call.on('status', () => resolve());
    });
    await expect.poll(() => count('WatchSandbox', status.OK)).toBe(1);
    const call = client.WatchSandbox!({}, new Metadata(), {});
    call.on('error', () => undefined);
    await new Promise<void>((resolve) => call.once('data', () => resolve()));
    call.cancel();
    await expect.poll(() => count('WatchSandbox', status.CANCELLED)).toBe(1);
    expect(await count('WatchSandbox', status.OK)).toBe(1);
  });
});
