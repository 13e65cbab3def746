// Target `http`: the HTTP port (/healthz, /readyz, /metrics, unknown paths) over raw TCP:
// malformed request lines, bad methods, huge and malformed headers, request-smuggling shapes,
// pipelined garbage between valid requests, other protocols' first bytes.
import { exchange } from './raw.ts';
import { bytes, chance, int, junkString, pick, skewedLength, type Rng } from './rng.ts';
import type { FuzzTarget } from './target.ts';
import type { Tally } from './tally.ts';

const PATHS = ['/healthz', '/readyz', '/metrics', '/', '/nope', '/healthz/../metrics', '/%2e%2e/%2e%2e/etc/passwd', '/healthz?x=' + 'y'.repeat(100), '//metrics', '/metrics#frag', '*'];

const valid = (path: string) => `GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`;

function request(rng: Rng): { kind: string; data: Buffer[] } {
  const path = pick(rng, PATHS);
  switch (int(rng, 0, 17)) {
    case 0:
      return { kind: 'valid', data: [Buffer.from(valid(path))] };
    case 1:
      return { kind: 'random-bytes', data: [bytes(rng, int(rng, 1, skewedLength(rng, 8192) + 1))] };
    case 2:
      return { kind: 'bad-method', data: [Buffer.from(`${pick(rng, ['FOO', 'get', 'G\u0001T', 'CONNECT', 'TRACE', 'DELETE', 'PRI', 'OPTIONS', 'PROPFIND', 'X'.repeat(5000)])} ${path} HTTP/1.1\r\nHost: x\r\n\r\n`, 'latin1')] };
    case 3:
      return { kind: 'bad-version', data: [Buffer.from(`GET ${path} ${pick(rng, ['HTTP/9.9', 'HTTP/1', 'HTTP/1.1.1', 'HTTPS/1.1', '', 'HTTP/0.9', 'HTTP/2.0'])}\r\nHost: x\r\n\r\n`)] };
    case 4:
      return { kind: 'long-url', data: [Buffer.from(`GET /${'a'.repeat(pick(rng, [9000, 70_000, 1_000_000]))} HTTP/1.1\r\nHost: x\r\n\r\n`)] };
    case 5: {
      const size = pick(rng, [9000, 17_000, 100_000, 1_000_000]);
      return { kind: 'huge-header', data: [Buffer.from(`GET ${path} HTTP/1.1\r\nHost: x\r\nX-Big: ${'b'.repeat(size)}\r\n\r\n`)] };
    }
    case 6: {
      const n = pick(rng, [100, 1000, 5000]);
      let h = '';
      for (let i = 0; i < n; i++) h += `X-${i}: v\r\n`;
      return { kind: 'many-headers', data: [Buffer.from(`GET ${path} HTTP/1.1\r\nHost: x\r\n${h}\r\n`)] };
    }
    case 7:
      return {
        kind: 'bad-header-line',
        data: [Buffer.from(`GET ${path} HTTP/1.1\r\n${pick(rng, ['NoColon', ' Host: x', 'Host : x', 'X: a\r\n b', 'X\u0000Y: z', 'X: \u0000', ': empty-name', 'Host: x\nBare: lf'])}\r\n\r\n`, 'latin1')],
      };
    case 8:
      return {
        kind: 'smuggling',
        data: [
          Buffer.from(
            pick(rng, [
              `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n`,
              `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!`,
              `POST ${path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n`,
              `POST ${path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n`,
              `POST ${path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n`,
              `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n`,
              `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n`,
            ]),
          ),
        ],
      };
    case 9: {
      // Valid, garbage, valid: the garbage must not reach past its own request.
      const parts = [valid(path), junkString(rng, int(rng, 1, 300)) + '\r\n\r\n', valid('/healthz')];
      return { kind: 'pipelined-garbage', data: [Buffer.from(parts.join(''), 'latin1')] };
    }
    case 10: {
      const n = int(rng, 2, 50);
      return { kind: 'pipelined-valid', data: [Buffer.from(Array.from({ length: n }, () => valid(pick(rng, PATHS))).join(''))] };
    }
    case 11:
      return { kind: 'h2-preface', data: [Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), bytes(rng, int(rng, 0, 64))] };
    case 12:
      return { kind: 'tls-hello', data: [Buffer.concat([Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]), bytes(rng, 200)])] };
    case 13:
      return { kind: 'truncated', data: [Buffer.from(valid(path).slice(0, int(rng, 1, 20)))] };
    case 14:
      return { kind: 'absolute-uri', data: [Buffer.from(`GET http://evil.example${path} HTTP/1.1\r\nHost: evil\r\n\r\n`)] };
    case 15:
      return { kind: 'upgrade', data: [Buffer.from(`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: ${pick(rng, ['h2c', 'websocket', 'x'])}\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n`)] };
    case 16:
      return { kind: 'body-on-get', data: [Buffer.from(`GET ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: ${int(rng, 0, 100_000)}\r\n\r\n`), bytes(rng, int(rng, 0, 4096))] };
    default: {
      const s = valid(path);
      const chunks: Buffer[] = [];
      let at = 0;
      while (at < s.length) {
        const n = int(rng, 1, 5);
        chunks.push(Buffer.from(s.slice(at, at + n)));
        at += n;
      }
      return { kind: 'fragmented', data: chunks };
    }
  }
}

/** The status codes of every response in the bytes (pipelining gives several). */
export function statuses(received: Buffer): string[] {
  return [...received.toString('latin1').matchAll(/HTTP\/1\.[01] (\d{3})/g)].map((m) => m[1]!);
}

export function httpTarget(tally: Tally): FuzzTarget {
  return {
    name: 'http',
    async send(rng, _index, replica, ctx) {
      const req = request(rng);
      tally.note(req.kind);
      const ex = await exchange({ host: replica.host, port: replica.httpPort, chunks: req.data, halfClose: !chance(rng, 0.05), timeoutMs: ctx.timeoutMs });
      const codes = statuses(ex.received);
      if (!codes.length && !ex.closed) tally.note(`timeout-on:${req.kind}`);
      if (codes.length) {
        // A pipeline's statuses, de-duplicated in order (200,200,400 → "200,400").
        const uniq = codes.filter((c, i) => i === 0 || codes[i - 1] !== c);
        return `http ${uniq.slice(0, 4).join(',')}${uniq.length > 4 ? ',…' : ''}`;
      }
      if (ex.closed) return `closed (no response${ex.error ? `, ${ex.error}` : ''})`;
      return 'timeout (open, no response)';
    },
  };
}
