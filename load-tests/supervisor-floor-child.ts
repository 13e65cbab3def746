// One idle Node process of load-tests/supervisor-floor.ts: imports the modules named on its command
// line, then, when given a port, holds a connection to the benchmark's HTTP/2 server the way a
// supervisor holds its control session (a grpc-js channel when grpc-js is among the modules, else
// a plain node:http2 session). Prints `ready <ms since the process began>` and idles until killed.
//   node [flags] load-tests/supervisor-floor-child.ts PORT|-|fill MODULE...
// `fill` writes the compile cache (NODE_COMPILE_CACHE) and exits: Node writes it only at a normal
// exit, and the idle ones are killed.
const [port, ...modules] = process.argv.slice(2);
for (const m of modules) await import(m);
if (port === 'fill') {
  (await import('node:module')).flushCompileCache();
  process.exit(0);
}
if (port && port !== '-') {
  const address = `127.0.0.1:${port}`;
  if (modules.includes('@grpc/grpc-js')) {
    const grpc = await import('@grpc/grpc-js');
    const client = new grpc.Client(address, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
    await new Promise<void>((resolve, reject) => client.waitForReady(Date.now() + 10_000, (err) => (err ? reject(err) : resolve())));
  } else {
    const http2 = await import('node:http2');
    await new Promise<void>((resolve, reject) => http2.connect(`http://${address}`).once('connect', () => resolve()).once('error', reject));
  }
}
process.stdout.write(`ready ${performance.now().toFixed(1)}\n`);
setInterval(() => undefined, 1 << 30);
