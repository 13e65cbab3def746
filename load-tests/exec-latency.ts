// Exec latency of `true` through the owner replica vs through a non-owner (one relay hop),
// measured side by side in one run (interleaved, so machine noise hits both alike).
//   node load-tests/exec-latency.ts [--iterations 300]
import { parseArgs } from 'node:util';
import type { ClientReadableStream } from '@grpc/grpc-js';
import { Cluster, runCli } from '../test/harness/cluster.ts';
import { startRedis } from '../test/harness/redis.ts';
import { openShellClient, type AnyClient } from '../test/harness/grpc-client.ts';
import { createSandbox, ownerOf } from '../test/harness/sandbox.ts';
import { summarise, ms, table } from './stats.ts';

const { values } = parseArgs({ options: { iterations: { type: 'string', default: '300' }, warmup: { type: 'string', default: '20' } } });
const iterations = Number(values.iterations);
const warmup = Number(values.warmup);

function execOnce(client: AnyClient, sandboxId: string): Promise<number> {
  const t0 = process.hrtime.bigint();
  return new Promise((resolve, reject) => {
    const call: ClientReadableStream<{ exit?: object }> = client.ExecSandbox({ sandbox_id: sandboxId, command: ['true'], environment: {} });
    let exited = false;
    call.on('data', (ev) => {
      if (ev.exit) exited = true;
    });
    call.on('end', () => (exited ? resolve(Number(process.hrtime.bigint() - t0) / 1e6) : reject(new Error('no exit'))));
    call.on('error', reject);
  });
}

async function main() {
  const redis = await startRedis();
  const cluster = await Cluster.start({ redisUrl: redis.url, replicas: 2 });
  try {
    const sbx = await createSandbox(cluster.replicas[0]!.grpcAddress, 'bench-latency');
    const ownerId = await ownerOf(redis.client(), sbx.id);
    const owner = cluster.replicas.find((r) => r.id === ownerId)!;
    const other = cluster.replicas.find((r) => r.id !== ownerId)!;
    const direct = openShellClient(owner.grpcAddress);
    const relayed = openShellClient(other.grpcAddress);
    for (let i = 0; i < warmup; i++) {
      await execOnce(direct, sbx.id);
      await execOnce(relayed, sbx.id);
    }
    const d: number[] = [];
    const r: number[] = [];
    for (let i = 0; i < iterations; i++) {
      d.push(await execOnce(direct, sbx.id));
      r.push(await execOnce(relayed, sbx.id));
    }
    const sd = summarise(d);
    const sr = summarise(r);
    console.log(`exec latency of \`true\`, ${iterations} iterations each, interleaved`);
    console.log(
      table(
        ['path', 'p50', 'p90', 'p99', 'mean'],
        [
          ['direct (owner replica)', ms(sd.p50), ms(sd.p90), ms(sd.p99), ms(sd.mean)],
          ['relayed (non-owner → owner)', ms(sr.p50), ms(sr.p90), ms(sr.p99), ms(sr.mean)],
          ['relay overhead', ms(sr.p50 - sd.p50), ms(sr.p90 - sd.p90), ms(sr.p99 - sd.p99), ms(sr.mean - sd.mean)],
          ['ratio relayed/direct', (sr.p50 / sd.p50).toFixed(3), (sr.p90 / sd.p90).toFixed(3), (sr.p99 / sd.p99).toFixed(3), (sr.mean / sd.mean).toFixed(3)],
        ],
      ),
    );
    direct.close();
    relayed.close();
    await runCli(['sandbox', 'delete', sbx.name], { gateway: owner.grpcAddress });
  } finally {
    await cluster.stop();
    cluster.cleanup();
    await redis.stop();
  }
}

await main();
