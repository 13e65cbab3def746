// The cost of one bare gRPC hop, for comparison with sandgate's exec stream: an in-process
// grpc-js server streaming `ExecSandboxEvent{stdout}` frames of a given size (the average frame
// the real stream carried) to an in-process client, through the same protobufjs glue, over loopback.
import * as grpc from '@grpc/grpc-js';
import { serviceDefinition, type ExecSandboxEvent } from '@sandgate/protocols';
import { now } from './bench.ts';

export interface FloorSample {
  mbps: number;
  /** CPU of both ends together (one process), per MB. */
  cpuMsPerMb: number;
}

export async function grpcFloor(mibTotal: number, repetitions: number, frameBytes = 64 * 1024): Promise<FloorSample[]> {
  const def = serviceDefinition('openshell.v1.OpenShell');
  const server = new grpc.Server();
  const chunk = Buffer.alloc(frameBytes);
  const total = mibTotal * 1024 * 1024;
  server.addService(def, {
    ExecSandbox: (call: grpc.ServerWritableStream<unknown, ExecSandboxEvent>) => {
      let sent = 0;
      const out = () => {
        while (sent < total) {
          sent += chunk.length;
          if (!call.write({ stdout: { data: chunk } })) return void call.once('drain', out);
        }
        call.write({ exit: { exit_code: 0 } });
        call.end();
      };
      out();
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  const Ctor = grpc.makeGenericClientConstructor(def, 'OpenShell');
  const client = new Ctor(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as unknown as grpc.Client & {
    ExecSandbox(req: object): grpc.ClientReadableStream<ExecSandboxEvent>;
  };
  const out: FloorSample[] = [];
  try {
    for (let i = 0; i < repetitions + 1; i++) {
      const c0 = process.cpuUsage();
      const t0 = now();
      let bytes = 0;
      await new Promise<void>((resolve, reject) => {
        const call = client.ExecSandbox({ sandbox_id: 'floor', command: ['floor'], environment: {} });
        call.on('data', (ev: ExecSandboxEvent) => void (bytes += ev.stdout?.data?.length ?? 0));
        call.on('end', () => resolve());
        call.on('error', reject);
      });
      const c = process.cpuUsage(c0);
      const mb = bytes / 1e6;
      // The first run warms the JIT; it is not kept.
      if (i > 0) out.push({ mbps: mb / ((now() - t0) / 1000), cpuMsPerMb: (c.user + c.system) / 1000 / mb });
    }
  } finally {
    client.close();
    server.forceShutdown();
  }
  return out;
}
