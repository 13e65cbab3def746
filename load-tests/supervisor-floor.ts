// Issue 16, item 2: how low a per-sandbox supervisor written in Node can go. Many idle Node
// processes side by side, as on a host full of sandboxes, each started with the supervisor's
// flags (SUPERVISOR_NODE_FLAGS) and a warm compile cache, each holding one connection to an HTTP/2
// server like a supervisor's control session, with more of the supervisor's start loaded in each
// kind: a bare Node, then node:http2, protobufjs with sandgate's descriptor, pino and the logger,
// all of the supervisor's modules, and those over TLS (as `sandgate up` runs); and the same with
// grpc-js, which the supervisor used before fcebe7f. Per kind:
// the proportional set size (PSS, /proc/PID/smaps_rollup) and its anonymous part after they
// idled, and the start (from the process's beginning to its modules loaded and its connection
// up). Kinds are started round-robin, one process at a time, so their starts are side by side
// too. Beside them, the other shape: one process with the whole supervisor loaded holding a
// connection for each of many sandboxes.
//   node load-tests/supervisor-floor.ts [--per-kind 20] [--settle-seconds 10] [--agent-connections 100]
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { SUPERVISOR_NODE_FLAGS } from '@sandgate/compute';
import { createCertificateAuthority } from '@sandgate/pki';
import { COMMON_OPTIONS, emitReport, fixed, mib, now, onCleanup, runMain, withTimeout, type BenchReport } from './bench.ts';
import { smapsRollup } from './env.ts';
import { ms, summarise } from './stats.ts';

const { values } = parseArgs({
  options: {
    'per-kind': { type: 'string', default: '20' },
    'settle-seconds': { type: 'string', default: '10' },
    'agent-connections': { type: 'string', default: '100' },
    ...COMMON_OPTIONS,
  },
});
const perKind = Number(values['per-kind']);
const settleSeconds = Number(values['settle-seconds']);
const agentConnections = Number(values['agent-connections']);

const here = path.dirname(fileURLToPath(import.meta.url));
const CHILD = path.join(here, 'supervisor-floor-child.ts');
const SUPERVISOR_MAIN = path.join(here, '..', 'apps', 'supervisor', 'src', 'supervisor-main.ts');

interface Kind {
  label: string;
  modules: string[];
  connect: boolean;
  tls?: boolean;
}
// Each kind adds to the one before, in the order the supervisor's start loads them. The
// supervisor speaks gRPC over node:http2 itself (since fcebe7f); the last kind is the one before,
// with a grpc-js channel instead of the plain session, for the comparison in the same run.
// Since 2026-12-07 the supervisor's codecs are static (no protobufjs reflection, no descriptor),
// loaded as its main.ts loads them (protobufjs without long.js: without-long.ts first), and its
// logger writes its lines without pino.
const WITHOUT_LONG = path.join(here, '..', 'apps', 'supervisor', 'src', 'without-long.ts');
const CODECS = [WITHOUT_LONG, '@sandgate/protocols/supervisor-wire'];
const PROTOCOLS_LOGGER_SUPERVISOR = [...CODECS, '@sandgate/telemetry/line-log', SUPERVISOR_MAIN];
const KINDS: Kind[] = [
  { label: 'Node alone, no connection', modules: [], connect: false },
  { label: '+ an HTTP/2 session (node:http2)', modules: [], connect: true },
  { label: "+ the supervisor's static codecs (@sandgate/protocols/supervisor-wire)", modules: CODECS, connect: true },
  { label: "+ the supervisor's logger (@sandgate/telemetry/line-log)", modules: [...CODECS, '@sandgate/telemetry/line-log'], connect: true },
  { label: "+ the rest of the supervisor's modules (supervisor-main.ts)", modules: PROTOCOLS_LOGGER_SUPERVISOR, connect: true },
  // `sandgate up` serves TLS, so its supervisors dial it over TLS.
  { label: '+ TLS on the connection (as `sandgate up` runs): the supervisor', modules: PROTOCOLS_LOGGER_SUPERVISOR, connect: true, tls: true },
  { label: 'the same with grpc-js (its channel instead of the session), as before fcebe7f', modules: ['@grpc/grpc-js', ...PROTOCOLS_LOGGER_SUPERVISOR], connect: true, tls: true },
];
/** The kind that models today's supervisor: the agent shape loads the same. */
const SUPERVISOR_KIND = 5;

interface Started {
  kind: number;
  child: ChildProcess;
  readyMs: number;
}

interface Servers {
  port: number;
  tlsPort: number;
  caFile: string;
}

function childArgs(target: string, kind: Kind): string[] {
  return [...SUPERVISOR_NODE_FLAGS, CHILD, target, ...kind.modules];
}

function startChild(kind: Kind, servers: Servers, cacheDir: string, connections = 1): Promise<{ child: ChildProcess; readyMs: number }> {
  const target = !kind.connect ? '-' : kind.tls ? `tls:${servers.tlsPort}:${servers.caFile}` : String(servers.port);
  const child = spawn(process.execPath, childArgs(target, kind), {
    env: { PATH: process.env.PATH, NODE_COMPILE_CACHE: cacheDir, FLOOR_CONNECTIONS: String(connections) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return withTimeout(
    new Promise((resolve, reject) => {
      let out = '';
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /^ready (\S+)\n/.exec(out);
        if (m) resolve({ child, readyMs: Number(m[1]) });
      });
      child.once('exit', (code) => reject(new Error(`a '${kind.label}' process exited (${code}) before it was ready`)));
    }),
    30_000,
    `'${kind.label}' ready`,
  );
}

async function main(): Promise<void> {
  const started = now();
  const cacheDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-floor-cache-'));
  onCleanup('compile cache', () => fs.rmSync(cacheDir, { recursive: true, force: true }));
  const ca = await createCertificateAuthority('supervisor-floor CA');
  const serverCert = await ca.issue({ commonName: 'localhost', dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'], usage: 'server' });
  const caFile = path.join(cacheDir, 'ca.pem');
  fs.writeFileSync(caFile, ca.cert);
  const listen = async (server: http2.Http2Server | http2.Http2SecureServer): Promise<number> => {
    server.on('session', (s) => s.on('error', () => undefined));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    onCleanup('http2 server', () => new Promise((resolve) => server.close(resolve)));
    return (server.address() as AddressInfo).port;
  };
  const servers: Servers = {
    port: await listen(http2.createServer()),
    tlsPort: await listen(http2.createSecureServer({ cert: serverCert.cert, key: serverCert.key })),
    caFile,
  };
  const children: Started[] = [];
  onCleanup('processes', () => {
    for (const c of children) c.child.kill('SIGKILL');
  });

  // Fill the cache (under the same flags, as the drivers do), then start every kind round-robin.
  const fullest = KINDS[KINDS.length - 1]!;
  const supervisorKind = KINDS[SUPERVISOR_KIND]!;
  const fill = spawnSync(process.execPath, childArgs('fill', fullest), { env: { PATH: process.env.PATH, NODE_COMPILE_CACHE: cacheDir }, stdio: 'inherit' });
  if (fill.status !== 0) throw new Error(`filling the compile cache failed (${fill.status ?? fill.signal})`);
  for (let i = 0; i < perKind; i++) {
    for (const [k, kind] of KINDS.entries()) children.push({ kind: k, ...(await startChild(kind, servers, cacheDir)) });
  }
  // The other shape: one process with the whole supervisor loaded, holding a TLS connection for
  // each of many sandboxes, as one agent per host would. A lower bound for such an agent: it
  // holds none of a sandbox's other state (output journals, exec channels).
  const agent = await startChild(supervisorKind, servers, cacheDir, agentConnections);
  children.push({ kind: -1, ...agent });
  await new Promise((r) => setTimeout(r, settleSeconds * 1000));
  const agentPss = await smapsRollup(agent.child.pid!);
  const prints = await Promise.all(
    children.map(async (c) => ({ kind: c.kind, readyMs: c.readyMs, pss: await smapsRollup(c.child.pid!), anon: await smapsRollup(c.child.pid!, 'Pss_Anon') })),
  );

  const signed = (v: number, format: (x: number) => string) => `${v < 0 ? '−' : '+'}${format(Math.abs(v))}`;
  let previous: { pss: number; ready: number } | undefined;
  let supervisorPss = NaN;
  const rows = KINDS.map((kind, k) => {
    const mine = prints.filter((p) => p.kind === k);
    const pss = summarise(mine.map((p) => p.pss)).p50;
    const anon = summarise(mine.map((p) => p.anon)).p50;
    const ready = summarise(mine.map((p) => p.readyMs)).p50;
    const row = [kind.label, mib(pss), mib(anon), previous ? signed(pss - previous.pss, mib) : '', ms(ready), previous ? signed(ready - previous.ready, ms) : ''];
    previous = { pss, ready };
    if (k === SUPERVISOR_KIND) supervisorPss = pss;
    return row;
  });
  const report: BenchReport = {
    id: 'supervisor-floor',
    title: 'How low a Node supervisor can go: idle Node processes with more of the supervisor loaded',
    command: `node load-tests/supervisor-floor.ts --per-kind ${perKind} --settle-seconds ${settleSeconds} --agent-connections ${agentConnections}`,
    tables: [
      {
        caption: `${perKind} idle processes of each kind side by side (${perKind * KINDS.length} in all), Node flags \`${SUPERVISOR_NODE_FLAGS.join(' ')}\`, warm compile cache, idle ${settleSeconds} s; median per process. Start: from the process's beginning to its modules loaded and its connection up (\`performance.now()\`)`,
        headers: ['each process', 'PSS', '… of it anonymous', 'PSS added', 'start', 'start added'],
        rows,
      },
      {
        caption: `One process with the whole supervisor loaded holding ${agentConnections} TLS connections (each its own HTTP/2 session), as one agent per host serving ${agentConnections} sandboxes would; started with the others, same flags and cache`,
        headers: ['process', 'PSS', 'per connection', "against one process per sandbox (the supervisor's row above)"],
        rows: [[`${agentConnections} connections in one process`, mib(agentPss), mib(agentPss / agentConnections), fixed(agentPss / agentConnections / supervisorPss, 3)]],
      },
    ],
    notes: [`the issue's target is 15 MiB for all of a sandbox's processes besides its workload; the native netns agent, the spare exec wrapper and bwrap add ~0.5 MiB (pool-footprint)`],
    durationMs: now() - started,
  };
  emitReport(report, values['report-json']);
}

await runMain(main);
