// A small web app run inside a sandbox (its main process: `node -e SERVICE_APP PORT`; the local
// driver binds the host's node into every sandbox) for the exposed-service tests and benchmark,
// and a client that speaks to a service host through a replica's HTTP port.
import http, { type IncomingHttpHeaders } from 'node:http';

/**
 * Routes: `/` an HTML page whose script (`/app.js`, a subresource) opens a WebSocket to `/ws` and
 * shows the echo in `#status`; `/hello`; `/headers` (what the service received, as JSON);
 * `/stream` (writes `first\n`, then waits for `/release` before `last\n`: proves responses are
 * streamed, not buffered); `/echo` (POST: byte count and SHA-256 of the body); `/big?mb=N` (N MiB,
 * for the throughput benchmark); `/set-cookie` (tries to set the gateway's link cookie);
 * WebSocket upgrades on any path: text frames answered `echo: <text>`, binary echoed.
 * A minimal WebSocket (RFC 6455) by hand: nothing but node's own modules inside the sandbox.
 */
export const SERVICE_APP = String.raw`
const http = require('node:http');
const crypto = require('node:crypto');
const port = Number(process.argv[1] || 8000);
const PAGE = '<!doctype html><html><head><title>sandgate service</title></head><body><p id="status">loading</p><script src="/app.js"></script></body></html>';
const APP_JS = "const ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws');" +
  "ws.onopen = () => ws.send('from the browser');" +
  "ws.onmessage = (e) => { document.getElementById('status').textContent = e.data; };" +
  "ws.onerror = () => { document.getElementById('status').textContent = 'websocket error'; };";
let release;
let released = new Promise((r) => (release = r));
const server = http.createServer((req, res) => {
  const u = new URL(req.url, 'http://x');
  if (u.pathname === '/') { res.setHeader('content-type', 'text/html'); return res.end(PAGE); }
  if (u.pathname === '/app.js') { res.setHeader('content-type', 'text/javascript'); return res.end(APP_JS); }
  if (u.pathname === '/hello') return res.end('hello from the sandbox\n');
  if (u.pathname === '/headers') { res.setHeader('content-type', 'application/json'); return res.end(JSON.stringify(req.headers)); }
  if (u.pathname === '/stream') { res.write('first\n'); released.then(() => res.end('last\n')); return; }
  if (u.pathname === '/release') { release(); released = new Promise((r) => (release = r)); return res.end('released\n'); }
  if (u.pathname === '/echo') {
    const h = crypto.createHash('sha256');
    let n = 0;
    req.on('data', (c) => { h.update(c); n += c.length; });
    req.on('end', () => { res.setHeader('content-type', 'application/json'); res.end(JSON.stringify({ bytes: n, sha256: h.digest('hex') })); });
    return;
  }
  if (u.pathname === '/big') {
    const total = Number(u.searchParams.get('mb') || '1') * 1048576;
    const chunk = Buffer.alloc(65536, 97);
    let sent = 0;
    res.setHeader('content-length', String(total));
    const pump = () => {
      while (sent < total) {
        sent += chunk.length;
        if (!res.write(chunk)) return res.once('drain', pump);
      }
      res.end();
    };
    return pump();
  }
  if (u.pathname === '/set-cookie') { res.setHeader('set-cookie', ['sg_service_link=planted; Path=/', 'app=1; Path=/']); return res.end('ok\n'); }
  res.statusCode = 404;
  res.end('no such page\n');
});
server.on('upgrade', (req, socket) => {
  socket.on('error', () => {});
  const accept = crypto.createHash('sha1').update(req.headers['sec-websocket-key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
  socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ' + accept + '\r\n\r\n');
  let buf = Buffer.alloc(0);
  socket.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    for (;;) {
      if (buf.length < 2) return;
      const op = buf[0] & 15;
      let len = buf[1] & 127;
      let off = 2;
      if (len === 126) { if (buf.length < 4) return; len = buf.readUInt16BE(2); off = 4; }
      else if (len === 127) { if (buf.length < 10) return; len = Number(buf.readBigUInt64BE(2)); off = 10; }
      const masked = (buf[1] & 128) !== 0;
      const mask = masked ? buf.subarray(off, off + 4) : null;
      if (masked) off += 4;
      if (buf.length < off + len) return;
      const payload = Buffer.from(buf.subarray(off, off + len));
      if (mask) for (let i = 0; i < len; i++) payload[i] ^= mask[i & 3];
      buf = buf.subarray(off + len);
      if (op === 8) { socket.end(Buffer.from([0x88, 0])); return; }
      if (op === 1 || op === 2) {
        const reply = op === 1 ? Buffer.from('echo: ' + payload.toString()) : payload;
        let head;
        if (reply.length < 126) head = Buffer.from([0x80 | op, reply.length]);
        else if (reply.length < 65536) { head = Buffer.alloc(4); head[0] = 0x80 | op; head[1] = 126; head.writeUInt16BE(reply.length, 2); }
        else { head = Buffer.alloc(10); head[0] = 0x80 | op; head[1] = 127; head.writeBigUInt64BE(BigInt(reply.length), 2); }
        socket.write(Buffer.concat([head, reply]));
      }
    }
  });
});
server.listen(port, '127.0.0.1', () => console.log('service app listening on ' + port));
`;

export interface ServiceAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** One request to `host` (a service host) through the HTTP listener at `httpUrl`; the body is read whole. */
export function serviceRequest(
  httpUrl: string,
  host: string,
  path: string,
  opts: { method?: string; headers?: Record<string, string>; body?: Buffer | string } = {},
): Promise<ServiceAnswer> {
  const base = new URL(httpUrl);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: base.hostname, port: Number(base.port), method: opts.method ?? 'GET', path, headers: { host, ...opts.headers }, agent: false },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** The host of a service on a replica's HTTP port, as a URL names it: `<label>.openshell.localhost:<port>`. */
export function serviceHost(httpUrl: string, label: string, domain = 'openshell.localhost'): string {
  return `${label}.${domain}:${new URL(httpUrl).port}`;
}
