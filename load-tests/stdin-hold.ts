// How much stdin one interactive exec lets into the replicas while its process does not read it:
// a gRPC ExecSandboxInteractive client runs `sleep 600` and writes 512 MiB of stdin in messages of
// the given size, through the owner and then through the other replica; once the client's own write
// buffer stops draining, what left it is held on the way (replicas, sockets, supervisor).
//   node load-tests/stdin-hold.ts [message bytes, default 4194000: the largest gRPC takes]
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { startRelayPair } from './env.ts';
const FRAME = Number(process.argv[2] ?? 4 * 1024 * 1024);
const pair = await startRelayPair('probe');
const rss = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;
for (const [label, client, entry] of [['direct', pair.direct, pair.owner], ['relayed', pair.relayed, pair.other]] as const) {
  const pids = { entry: entry.proc!.pid!, owner: pair.owner.proc!.pid! };
  const before = { entry: rss(pids.entry), owner: rss(pids.owner) };
  const call = client.ExecSandboxInteractive();
  call.on('data', () => undefined);
  call.on('error', (e: Error) => console.log('error', label, String(e).slice(0, 200)));
  call.write({ start: { sandbox_id: pair.sandbox.id, command: ['sleep', '600'], environment: {} } });
  await sleep(500);
  const frame = Buffer.alloc(FRAME, 7);
  const N = Math.ceil((512 * 1024 * 1024) / FRAME);
  for (let i = 0; i < N; i++) call.write({ stdin: frame });
  const w = call as unknown as { writableLength: number };
  let last = -1;
  for (;;) {
    const now = w.writableLength;
    await sleep(1000);
    if (w.writableLength === now && now === last) break;
    last = w.writableLength;
  }
  const left = (N - last) * FRAME;
  console.log(`${label}: messages of ${FRAME} B: ${(left / 2 ** 20).toFixed(1)} MiB left the client; entry RSS +${((rss(pids.entry) - before.entry) / 2 ** 20).toFixed(1)} MiB, owner RSS +${((rss(pids.owner) - before.owner) / 2 ** 20).toFixed(1)} MiB`);
  call.cancel();
  await sleep(1000);
}
process.exit(0);
