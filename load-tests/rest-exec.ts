// REST exec (POST /v1/sandboxes/{name}/exec, JSON) vs gRPC exec (ExecSandbox) latency of `true`,
// on the same sandbox through the same replica (its owner), interleaved in one run so machine
// noise hits both alike. The REST call does what a curl user's does: resolve the name, then the
// same ExecService path; the difference is the HTTP/JSON face (and that name lookup).
//   node load-tests/rest-exec.ts [--iterations 300] [--warmup 20]
import http from 'node:http';
import { parseArgs } from 'node:util';
import { summarise, ms, type Summary } from './stats.ts';
import { COMMON_OPTIONS, emitReport, fixed, now, onCleanup, runMain, type BenchReport } from './bench.ts';
import { startEnv } from './env.ts';
import { execOnce } from './exec-client.ts';
import { createSandbox } from '../test/harness/sandbox.ts';
import { openShellClient } from '../test/harness/grpc-client.ts';
import { runCli } from '../test/harness/cluster.ts';

export interface RestExecOptions {
  iterations: number;
  warmup: number;
}

/** One REST exec of `true` over a kept-alive connection (as any HTTP client library keeps one). */
function restExecOnce(agent: http.Agent, url: URL, token: string): Promise<number> {
  const body = JSON.stringify({ argv: ['true'] });
  const t0 = now();
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      { method: 'POST', agent, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          if (res.statusCode !== 200) return reject(new Error(`REST exec answered ${res.statusCode}: ${text}`));
          const out = JSON.parse(text) as { exit_code: number };
          if (out.exit_code !== 0) return reject(new Error(`true exited ${out.exit_code}`));
          resolve(now() - t0);
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

export async function run(opts: RestExecOptions): Promise<BenchReport> {
  const t0 = now();
  const { cluster } = await startEnv({ replicas: 1 });
  const replica = cluster.replicas[0]!;
  const sandbox = await createSandbox(replica.grpcAddress, 'bench-rest-exec');
  onCleanup('sandbox bench-rest-exec', () => runCli(['sandbox', 'delete', sandbox.name], { gateway: replica.grpcAddress }));
  const grpc = openShellClient(replica.grpcAddress);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  onCleanup('clients', () => {
    grpc.close();
    agent.destroy();
  });
  const url = new URL(`${replica.httpUrl}/v1/sandboxes/${sandbox.name}/exec`);
  const rest = () => restExecOnce(agent, url, cluster.token);
  const viaGrpc = () => execOnce(grpc, sandbox.id);
  for (let i = 0; i < opts.warmup; i++) {
    await viaGrpc();
    await rest();
  }
  const g: number[] = [];
  const r: number[] = [];
  // ABBA: pairs alternate which goes first, so what the second inherits from the first does not bias one side.
  for (let i = 0; i < opts.iterations; i++) {
    if (i % 2 === 0) {
      g.push(await viaGrpc());
      r.push(await rest());
    } else {
      r.push(await rest());
      g.push(await viaGrpc());
    }
  }
  const sg = summarise(g);
  const sr = summarise(r);
  const paired = summarise(r.map((v, i) => v - g[i]!));
  const row = (label: string, s: Pick<Summary, 'p50' | 'p90' | 'p99' | 'mean'>) => [label, ms(s.p50), ms(s.p90), ms(s.p99), ms(s.mean)];
  return {
    id: 'rest-exec',
    title: 'HTTP API: REST exec vs gRPC exec (issue 14)',
    command: `node load-tests/rest-exec.ts --iterations ${opts.iterations} --warmup ${opts.warmup}`,
    tables: [
      {
        caption: `exec latency of \`true\` on one sandbox through its owner replica, ${opts.iterations} each after ${opts.warmup} warm-up pairs, interleaved ABBA; local driver; REST over a kept-alive HTTP/1.1 connection, gRPC over its HTTP/2 channel`,
        headers: ['path', 'p50', 'p90', 'p99', 'mean'],
        rows: [
          row('gRPC ExecSandbox', sg),
          row('REST POST /v1/sandboxes/{name}/exec', sr),
          row('REST − gRPC, paired difference (same ABBA pair)', paired),
        ],
      },
      {
        caption: 'ratios (REST / gRPC latency; 1.00 = the same)',
        headers: ['', 'p50', 'p99', 'mean'],
        rows: [['REST / gRPC', fixed(sr.p50 / sg.p50), fixed(sr.p99 / sg.p99), fixed(sr.mean / sg.mean)]],
      },
    ],
    notes: ['the REST call resolves the sandbox name (GetSandbox\'s lookup) before the same ExecService path; gRPC ExecSandbox is given the id'],
    durationMs: now() - t0,
  };
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: { iterations: { type: 'string', default: '300' }, warmup: { type: 'string', default: '20' }, ...COMMON_OPTIONS },
  });
  await runMain(async () => {
    const report = await run({ iterations: Number(values.iterations), warmup: Number(values.warmup) });
    emitReport(report, values['report-json']);
  });
}
