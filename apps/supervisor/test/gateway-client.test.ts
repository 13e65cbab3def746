// The supervisor's gRPC client (gateway-client.ts) against a real grpc-js server, the gateway's
// library, and against a TCP peer that never speaks HTTP/2. What its callers rely on: every end
// of a call is a status (`error` when not OK, then `status`, once), a refused or silent gateway
// included; cancel resets the stream on the gateway's side; TLS verifies the name given.
import * as net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { afterEach, describe, expect, it } from 'vitest';
import { createCertificateAuthority } from '@sandgate/pki';
import { serviceDefinition, type GatewayMessage, type SupervisorMessage } from '@sandgate/protocols';
import { callMetadata, createGatewayClient, type CallError, type CallStatus, type GatewayCall, type GatewayClient } from '../src/gateway-client.ts';

type ControlCall = grpc.ServerDuplexStream<SupervisorMessage, GatewayMessage>;

const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function startServer(onControl: (call: ControlCall) => void, credentials = grpc.ServerCredentials.createInsecure()): Promise<string> {
  const server = new grpc.Server();
  server.addService(serviceDefinition('sandgate.v1.SupervisorGateway'), {
    Control: onControl,
    ExecChannel: (call: grpc.ServerDuplexStream<unknown, unknown>) => call.end(),
    TcpChannel: (call: grpc.ServerDuplexStream<unknown, unknown>) => call.end(),
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', credentials, (err, bound) => (err ? reject(err) : resolve(bound))),
  );
  cleanups.push(() => void server.forceShutdown());
  return `127.0.0.1:${port}`;
}

function client(endpoint: string, ...rest: Parameters<typeof createGatewayClient> extends [string, ...infer R] ? R : never): GatewayClient {
  const c = createGatewayClient(endpoint, ...rest);
  cleanups.push(() => c.close());
  return c;
}

/** Everything a call reports after it was opened, in order. */
function record(call: GatewayCall<SupervisorMessage, GatewayMessage>) {
  const events: string[] = [];
  const messages: GatewayMessage[] = [];
  let error: CallError | undefined;
  const status = new Promise<CallStatus>((resolve) => {
    call.on('data', (m: GatewayMessage) => messages.push(m));
    call.on('end', () => events.push('end'));
    call.on('error', (err: CallError) => {
      error = err;
      events.push(`error ${err.code}`);
    });
    call.on('status', (s: CallStatus) => {
      events.push(`status ${s.code}`);
      resolve(s);
    });
  });
  return { events, messages, status, error: () => error };
}

const md = callMetadata('sb-1', 'secret-1');

describe('the supervisor gateway client', () => {
  it('carries the metadata and messages both ways, and ends with OK when the gateway ends the call', async () => {
    let seen: { sandbox: unknown; credential: unknown; hello?: SupervisorMessage['hello'] } | undefined;
    const endpoint = await startServer((call) => {
      call.on('data', (m: SupervisorMessage) => {
        seen = { sandbox: call.metadata.get('x-sandgate-sandbox-id')[0], credential: call.metadata.get('x-sandgate-credential')[0], hello: m.hello };
        call.write({ hello_ack: { session_id: 'sess-1', replica_id: 'r0', heartbeat_interval_ms: 1000 } });
        call.end();
      });
    });
    const call = client(endpoint).Control(md);
    const r = record(call);
    call.write({ hello: { sandbox_id: 'sb-1', instance_id: 'i-1', supervisor_version: 'test', main_pid: 7 } });
    const status = await r.status;
    await new Promise((resolve) => setImmediate(resolve));
    expect(status.code).toBe(grpc.status.OK);
    expect(seen).toEqual({ sandbox: 'sb-1', credential: 'secret-1', hello: expect.objectContaining({ sandbox_id: 'sb-1', main_pid: 7 }) });
    expect(r.messages.map((m) => m.hello_ack?.session_id)).toEqual(['sess-1']);
    expect(r.events).toEqual(['status 0', 'end']);
  });

  it("reports the gateway's error status once, with its code and message", async () => {
    const endpoint = await startServer((call) => {
      call.emit('error', { code: grpc.status.PERMISSION_DENIED, details: 'not this sandbox: ünïcode kept' });
    });
    const r = record(client(endpoint).Control(md));
    const status = await r.status;
    expect(status).toEqual({ code: grpc.status.PERMISSION_DENIED, details: 'not this sandbox: ünïcode kept' });
    expect(r.error()?.message).toBe('7 PERMISSION_DENIED: not this sandbox: ünïcode kept');
    expect(r.events.filter((e) => e.startsWith('error') || e.startsWith('status'))).toEqual(['error 7', 'status 7']);
  });

  it('turns a refused dial into UNAVAILABLE, reported after the caller listens', async () => {
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as net.AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const r = record(client(`127.0.0.1:${port}`).Control(md));
    const status = await r.status;
    expect(status.code).toBe(grpc.status.UNAVAILABLE);
    expect(status.details).toMatch(/ECONNREFUSED/);
    expect(r.events).toContain('error 14');
  });

  it('gives up on a gateway that does not answer its keepalive pings', async () => {
    // A TCP peer that accepts and then says nothing: no settings, no ping ack.
    const silent = net.createServer((socket) => socket.on('error', () => {}).resume());
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise<void>((resolve) => silent.close(() => resolve())));
    const started = Date.now();
    const r = record(client(`127.0.0.1:${(silent.address() as net.AddressInfo).port}`, undefined, { intervalMs: 200, timeoutMs: 300 }).Control(md));
    const status = await r.status;
    expect(status.code).toBe(grpc.status.UNAVAILABLE);
    expect(status.details).toMatch(/did not answer a keepalive ping within 300 ms/);
    expect(Date.now() - started).toBeGreaterThanOrEqual(450);
  });

  it('cancel ends the call as CANCELLED here and as cancelled on the gateway', async () => {
    let gatewaySawCancel!: () => void;
    const cancelled = new Promise<void>((resolve) => (gatewaySawCancel = resolve));
    let opened!: () => void;
    const open = new Promise<void>((resolve) => (opened = resolve));
    const endpoint = await startServer((call) => {
      call.on('cancelled', gatewaySawCancel);
      call.on('data', () => opened());
    });
    const call = client(endpoint).Control(md);
    const r = record(call);
    call.write({ heartbeat: { sent_at_ms: 1 } });
    await open;
    call.cancel();
    const status = await r.status;
    expect(status).toEqual({ code: grpc.status.CANCELLED, details: 'Cancelled on client' });
    await cancelled;
    // Writes after the end go nowhere and do not throw.
    call.write({ heartbeat: { sent_at_ms: 2 } });
  });

  it('verifies the gateway certificate for the name given, whatever address is dialled', async () => {
    const ca = await createCertificateAuthority('gateway client test CA');
    const pair = await ca.issue({ commonName: 'gateway', dnsNames: ['gateway.test'], ipAddresses: [], usage: 'server' });
    const endpoint = await startServer(
      (call) => call.on('data', () => call.end()),
      grpc.ServerCredentials.createSsl(null, [{ private_key: Buffer.from(pair.key), cert_chain: Buffer.from(pair.cert) }], false),
    );
    const trusted = client(endpoint, { ca: Buffer.from(ca.cert), serverName: 'gateway.test' }).Control(md);
    const ok = record(trusted);
    trusted.write({ heartbeat: { sent_at_ms: 1 } });
    expect((await ok.status).code).toBe(grpc.status.OK);

    const wrongName = client(endpoint, { ca: Buffer.from(ca.cert), serverName: 'other.test' }).Control(md);
    const refused = record(wrongName);
    wrongName.write({ heartbeat: { sent_at_ms: 1 } });
    const status = await refused.status;
    expect(status.code).toBe(grpc.status.UNAVAILABLE);
    expect(status.details).toMatch(/other\.test/);
  });
});
