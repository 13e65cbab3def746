// One idle Node process of load-tests/supervisor-floor.ts: imports the modules named on its command
// line, then, when given a port, holds a connection to the benchmark's HTTP/2 server the way a
// supervisor holds its control session (a grpc-js channel when grpc-js is among the modules, else
// a plain node:http2 session), over TLS verified against CA_FILE when given `tls:PORT:CA_FILE`.
// With FLOOR_CONNECTIONS=N it holds N such connections, each its own channel: one process serving
// N sandboxes, as a per-host agent would. Prints `ready <ms since the process began>` and idles
// until killed.
//   node [flags] load-tests/supervisor-floor-child.ts PORT|tls:PORT:CA_FILE|-|fill MODULE...
// `fill` writes the compile cache (NODE_COMPILE_CACHE) and exits: Node writes it only at a normal
// exit, and the idle ones are killed.
import fs from 'node:fs';

const [target = '-', ...modules] = process.argv.slice(2);
for (const m of modules) await import(m);
if (target === 'fill') {
  (await import('node:module')).flushCompileCache();
  process.exit(0);
}
if (target !== '-') {
  const [, port, caFile] = /^(?:tls:)?(\d+)(?::(.+))?$/.exec(target) ?? [];
  if (!port) throw new Error(`bad target ${target}`);
  const address = `127.0.0.1:${port}`;
  const ca = caFile ? fs.readFileSync(caFile) : undefined;
  const connections = Number(process.env.FLOOR_CONNECTIONS ?? '1');
  if (modules.includes('@grpc/grpc-js')) {
    const grpc = await import('@grpc/grpc-js');
    for (let i = 0; i < connections; i++) {
      const credentials = ca ? grpc.credentials.createSsl(ca) : grpc.credentials.createInsecure();
      const client = new grpc.Client(address, credentials, { 'grpc.use_local_subchannel_pool': 1, ...(ca ? { 'grpc.ssl_target_name_override': 'localhost' } : {}) });
      await new Promise<void>((resolve, reject) => client.waitForReady(Date.now() + 10_000, (err) => (err ? reject(err) : resolve())));
    }
  } else {
    const http2 = await import('node:http2');
    const session = ca ? http2.connect(`https://${address}`, { ca, servername: 'localhost' }) : http2.connect(`http://${address}`);
    await new Promise<void>((resolve, reject) => session.once('connect', () => resolve()).once('error', reject));
  }
}
process.stdout.write(`ready ${performance.now().toFixed(1)}\n`);
setInterval(() => undefined, 1 << 30);
