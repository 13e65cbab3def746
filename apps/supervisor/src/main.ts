// Entry point of the in-sandbox supervisor:
//   node apps/supervisor/src/main.ts -- <main process argv...>
// configured through SANDGATE_* environment variables (see config.ts). The supervisor must be very
// hard to kill: errors are logged and survived, only SIGTERM/SIGINT end it.
//
// Loading the supervisor's ~300 modules is most of a sandbox's start. With SANDGATE_COMPILE_CACHE
// (a directory the driver filled on the host and shows the sandbox read-only) Node takes their
// compiled code from there: a sandbox reaches Ready in about 0.8 of the time (BENCHMARKS.md,
// "Cold create"). The drivers also set NODE_COMPILE_CACHE to the same directory
// (compileCacheEnvironment), so Node has the cache on before it loads this file: no TypeScript is
// stripped at all, which spares the ~30 ms of CPU Node's type stripper takes to start. Without
// it (an older driver's launch) only this bootstrap is loaded before the cache is on: everything
// else comes through the dynamic import below.
//   node apps/supervisor/src/main.ts --fill-compile-cache
// loads the same modules, writes their compiled code to SANDGATE_COMPILE_CACHE and exits: the
// driver runs it on the host, where the directory is writable.
import module from 'node:module';
import { SupervisorEnv } from '@sandgate/protocols/contract';
import { bootCompileCacheDir } from './boot-env.ts';
import './without-long.ts';

const cacheDir = bootCompileCacheDir();
// A cache that cannot be used only costs the speed-up: never a reason not to start.
if (cacheDir) module.enableCompileCache(cacheDir);
const { runSupervisor } = await import('./supervisor-main.ts');
if (process.argv[2] === '--fill-compile-cache') {
  if (!cacheDir) {
    process.stderr.write(`--fill-compile-cache needs ${SupervisorEnv.compileCache}\n`);
    process.exit(2);
  }
  // The netns agent is a Node process of its own (started with the same cache), and the SSH
  // server's code loads at the first SSH connection: compile them too.
  await Promise.all([import('./workload/netns-agent.ts'), import('./ssh/ssh-connection.ts'), import('./ssh/host-key.ts')]);
  module.flushCompileCache();
  process.exit(0);
}
runSupervisor();
