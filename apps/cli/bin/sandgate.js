#!/usr/bin/env node
// The `sandgate` command. Node runs the TypeScript sources directly (type stripping).
// Node's on-disk compile cache (NODE_COMPILE_CACHE, else the OS tmpdir), enabled before anything
// is loaded so even type stripping is cached: the CLI starts once per SSH connection (ssh-proxy is
// a ProxyCommand), and this halves its start-up CPU. Best effort.
import { enableCompileCache } from 'node:module';

// Replicas and workers live long and make short-lived garbage at every heartbeat and relayed
// frame; V8's young generation grows to 64 MiB for it, and the old one with what it promotes. A
// 4 MiB one holds a replica's memory at about 0.7 of that for the same sessions, at the same
// throughput. And V8 grows the old generation by up to 4x at a time while sessions arrive: a
// fixed half holds a replica at about 0.5 of its memory per session at 10 000 sessions, for
// about a tenth more CPU per hello and none more per exec (BENCHMARKS.md "Replica memory per
// session"). Both flags must be on Node's command line (V8 sizes the heap at start; it refuses
// the second in NODE_OPTIONS), so these commands replace this process (same pid, same stdio) with
// one that has the flags the caller did not set, unless it asked for an inspector (this process
// has announced one already: the new one would listen elsewhere).
const LONG_RUNNING = new Set(['gateway', 'up', 'worker']);
const HEAP_FLAGS = ['--max-semi-space-size=4', '--heap-growing-percent=50'];
const nodeFlags = [...process.execArgv, process.env.NODE_OPTIONS ?? ''];
const missingHeapFlags = HEAP_FLAGS.filter((flag) => !nodeFlags.some((a) => a.includes(flag.split('=')[0])));
if (
  LONG_RUNNING.has(process.argv[2] ?? '') &&
  typeof process.execve === 'function' &&
  missingHeapFlags.length > 0 &&
  !nodeFlags.some((a) => a.includes('--inspect'))
) {
  process.execve(process.execPath, [process.execPath, ...missingHeapFlags, ...process.execArgv, ...process.argv.slice(1)], process.env);
}
try {
  enableCompileCache();
} catch {
  // no cache: slower, nothing else
}
const { main } = await import('../src/main.ts');

await main(process.argv.slice(2), process.env);
