// The spawning process of fork-cost.ts: only node builtins at its start, so its own size is a
// bare Node's plus what it is asked to hold (touched anonymous memory) or load (a module, such as
// the supervisor's). Answers each line on stdin (a count) with that many spawns' timings: each
// [to the exit, inside spawn() itself]. The second is the time the caller's event loop is blocked:
// libuv's spawn returns only once the child has exec'd (or failed to).
//   node load-tests/fork-cost-child.ts HELD_MIB [MODULE]
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

const heldMib = Number(process.argv[2]);
const load = process.argv[3];
if (load) await import(load);
const held: Buffer[] = [];
// Filled, so every page is really mapped: untouched pages have no page tables to copy.
for (let i = 0; i < heldMib; i++) held.push(Buffer.alloc(1 << 20, 1));

const once = () =>
  new Promise<[number, number]>((resolve, reject) => {
    const t = performance.now();
    const c = spawn('/bin/true', { stdio: 'ignore' });
    const blocked = performance.now() - t;
    c.on('error', reject);
    c.on('exit', () => resolve([performance.now() - t, blocked]));
  });

process.stdout.write('ready\n');
for await (const line of createInterface({ input: process.stdin })) {
  const out: [number, number][] = [];
  for (let i = 0; i < Number(line); i++) out.push(await once());
  process.stdout.write(`${JSON.stringify(out)}\n`);
}
// The memory stays reachable until stdin ends.
if (held.length !== heldMib) process.exitCode = 1;
