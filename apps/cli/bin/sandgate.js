#!/usr/bin/env node
// The `sandgate` command. Node runs the TypeScript sources directly (type stripping).
// Node's on-disk compile cache (NODE_COMPILE_CACHE, else the OS tmpdir), enabled before anything
// is loaded so even type stripping is cached: the CLI starts once per SSH connection (ssh-proxy is
// a ProxyCommand), and this halves its start-up CPU. Best effort.
import { enableCompileCache } from 'node:module';

// Replicas and workers live long and make short-lived garbage at every heartbeat and relayed
// frame; V8's young generation grows to 64 MiB for it, and the old one with what it promotes. A
// 4 MiB one holds a replica's memory at about 0.7 of that for the same sessions, at the same
// throughput (BENCHMARKS.md "Replica memory per session"). The flag must be on Node's command
// line (V8 sizes the heap at start), so these commands replace this process (same pid, same
// stdio) with one that has it, unless the caller chose a size already, or asked for an inspector
// (this process has announced one already: the new one would listen elsewhere).
const LONG_RUNNING = new Set(['gateway', 'up', 'worker']);
const YOUNG_GENERATION_FLAG = '--max-semi-space-size=4';
const nodeFlags = [...process.execArgv, process.env.NODE_OPTIONS ?? ''];
if (
  LONG_RUNNING.has(process.argv[2] ?? '') &&
  typeof process.execve === 'function' &&
  !nodeFlags.some((a) => a.includes('--max-semi-space-size') || a.includes('--inspect'))
) {
  process.execve(process.execPath, [process.execPath, YOUNG_GENERATION_FLAG, ...process.execArgv, ...process.argv.slice(1)], process.env);
}
try {
  enableCompileCache();
} catch {
  // no cache: slower, nothing else
}
const { main } = await import('../src/main.ts');

await main(process.argv.slice(2), process.env);
