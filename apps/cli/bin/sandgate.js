#!/usr/bin/env node
// The `sandgate` command. Node runs the TypeScript sources directly (type stripping).
// Node's on-disk compile cache (NODE_COMPILE_CACHE, else the OS tmpdir), enabled before anything
// is loaded so even type stripping is cached: the CLI starts once per SSH connection (ssh-proxy is
// a ProxyCommand), and this halves its start-up CPU. Best effort.
import { enableCompileCache } from 'node:module';
try {
  enableCompileCache();
} catch {
  // no cache: slower, nothing else
}
const { main } = await import('../src/main.ts');

await main(process.argv.slice(2), process.env);
