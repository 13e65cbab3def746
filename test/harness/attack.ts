// Tools for the isolation attack suites (issue 12): the probes a workload runs to try an attack
// (shell and Node scripts passed as argv, so they run the same through `sandbox exec`, an SSH
// shell and a main process), a test network namespace with servers in it (the only place egress
// may reach), and where a sandbox's workload cgroup is on the host.
// Nothing here decides whether an attack worked: the probes report what happened, the tests judge.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { readFileSync, existsSync } from 'node:fs';
import dgram from 'node:dgram';
import net from 'node:net';
import { waitFor } from './wait.ts';

// ---- running things ----------------------------------------------------------------------

export interface ProcessResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: Buffer;
  stderr: string;
}

/** Runs a host program to completion (ssh, ip, ...), collecting its output; rejects on timeout. */
/** `env`: the program's environment (default: this process's), e.g. ssh whose ProxyCommand needs SANDGATE_TOKEN. */
export function runProcess(cmd: string, args: string[], opts: { input?: Buffer | string; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {}): Promise<ProcessResult> {
  return new Promise((resolve, reject) => {
    const proc = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'], env: opts.env ?? process.env });
    const out: Buffer[] = [];
    let err = '';
    proc.stdout.on('data', (c: Buffer) => out.push(c));
    proc.stderr.on('data', (c: Buffer) => (err += c.toString()));
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`${cmd} ${args.join(' ').slice(0, 300)} timed out; stderr: ${err}`));
    }, opts.timeoutMs ?? 60_000);
    proc.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    proc.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout: Buffer.concat(out), stderr: err });
    });
    proc.stdin.on('error', () => undefined);
    proc.stdin.end(opts.input ?? '');
  });
}

/** One shell word (single-quoted unless plainly safe). */
export function shq(word: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

// ---- probes the workload runs --------------------------------------------------------------

/**
 * A POSIX sh prelude: `attempt NAME CMD...` runs CMD and prints `NAME=SUCCEEDED <output>` or
 * `NAME=blocked <output>` (the first 300 bytes of its stdout+stderr on one line), so a failing
 * test shows the real evidence (the shadow line read, or the real error).
 */
export const ATTEMPT_PRELUDE = [
  'attempt() {',
  '  n=$1; shift',
  '  if out=$("$@" 2>&1); then r=SUCCEEDED; else r=blocked; fi',
  `  printf '%s=%s %s\\n' "$n" "$r" "$(printf '%s' "$out" | head -c 300 | tr '\\n' ' ')"`,
  '}',
].join('\n');

/** Parses `NAME=VALUE` lines (what ATTEMPT_PRELUDE scripts print) into a map. */
export function parseAttempts(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const i = line.indexOf('=');
    if (i > 0 && /^[a-z_0-9]+$/.test(line.slice(0, i))) out[line.slice(0, i)] = line.slice(i + 1);
  }
  return out;
}

/**
 * The identity and host-secret attacks of issue 12, as one sh script: the workload's ids and
 * capabilities, then root-only files, the credential, the driver's state, host control sockets,
 * host state under /var, privilege regain. Every attempt line must read `blocked`.
 */
export function identityAttackScript(opts: { stateDir: string; hostVarFile: string }): string {
  return [
    ATTEMPT_PRELUDE,
    'echo "uid=$(id -u)"',
    'echo "gid=$(id -g)"',
    'echo "groups=$(id -G)"',
    // Any non-zero effective or permitted capability set means the workload kept privileges.
    `echo "caps=$(grep -E '^Cap(Eff|Prm)' /proc/self/status | tr '\\t\\n' '  ')"`,
    `echo "nonewprivs=$(grep -E '^NoNewPrivs' /proc/self/status | tr -d ' \\t' | cut -d: -f2)"`,
    `echo "env_b64=$(env | base64 | tr -d '\\n')"`,
    'attempt shadow cat /etc/shadow',
    'attempt gshadow cat /etc/gshadow',
    'attempt root_home ls -A /root',
    'attempt credential cat /run/sandgate/credential',
    // Every file under /run that can be read at all (the test looks for the credential in it).
    `echo "run_files_b64=$(find /run -type f 2>/dev/null | while read -r f; do cat "$f" 2>/dev/null; done | base64 | tr -d '\\n')"`,
    `attempt state_dir ls -A ${shq(`${opts.stateDir}/sandboxes`)}`,
    `attempt state_credentials sh -c ${shq(`cat ${shq(opts.stateDir)}/sandboxes/*/credential`)}`,
    "attempt docker_socket sh -c 'test -e /var/run/docker.sock || test -e /run/docker.sock'",
    // A world-readable host file on a mount under /var (where other runtimes keep containers).
    `attempt host_var cat ${shq(opts.hostVarFile)}`,
    "attempt write_etc sh -c 'echo x >> /etc/passwd'",
    'attempt setuid_root setpriv --reuid 0 --regid 0 --clear-groups id -u',
    'attempt nsenter_pid1 nsenter -t 1 -m -n -p true',
    "attempt remount_rw mount -o remount,rw /",
    "attempt kmsg sh -c 'head -c 100 /dev/kmsg'",
  ].join('\n');
}

/** Lines of `attempt` names identityAttackScript prints, each of which must be `blocked`. */
export const IDENTITY_ATTEMPTS = [
  'shadow',
  'gshadow',
  'root_home',
  'credential',
  'state_dir',
  'state_credentials',
  'docker_socket',
  'host_var',
  'write_etc',
  'setuid_root',
  'nsenter_pid1',
  'remount_rw',
  'kmsg',
] as const;

/** Node prelude for the probe scripts: arguments work the same under `node -e S a b` and `node - a b`. */
const ARGS = "const args = process.argv[1] === '-' ? process.argv.slice(2) : process.argv.slice(1);";

/**
 * TCP connect probe. Args: JSON `[{host, port, label?}]`, timeout ms. Prints JSON, one result per
 * target: `connected` (with the first bytes the server sent), `error` (with errno code) or
 * `timeout` (a hang: the connection neither opened nor failed in time).
 */
export const TCP_PROBE = `${ARGS}
const net = require('node:net');
const targets = JSON.parse(args[0]);
const limit = Number(args[1] || 1000);
Promise.all(targets.map((t) => new Promise((resolve) => {
  const t0 = Date.now();
  const s = net.connect({ host: t.host, port: t.port });
  const timer = setTimeout(() => { s.destroy(); resolve({ ...t, result: 'timeout', ms: Date.now() - t0 }); }, limit);
  s.on('connect', () => {
    clearTimeout(timer);
    let data = '';
    s.on('data', (d) => (data += d.toString('latin1')));
    if (t.send) s.write(t.send);
    setTimeout(() => { s.destroy(); resolve({ ...t, result: 'connected', data: data.slice(0, 300), ms: Date.now() - t0 }); }, 300);
  });
  s.on('error', (e) => { clearTimeout(timer); resolve({ ...t, result: 'error', code: e.code, message: e.message, ms: Date.now() - t0 }); });
}))).then((r) => process.stdout.write(JSON.stringify(r) + '\\n'));
`;

/**
 * UDP probe. Args: JSON `[{host, port, label}]`, wait ms. Sends a datagram to each target and
 * reports `answered` (with the reply), `error` (send failed: the errno) or `silent` (no reply in time).
 */
export const UDP_PROBE = `${ARGS}
const dgram = require('node:dgram');
const targets = JSON.parse(args[0]);
const limit = Number(args[1] || 1000);
Promise.all(targets.map((t) => new Promise((resolve) => {
  const s = dgram.createSocket(t.host.includes(':') ? 'udp6' : 'udp4');
  const done = (r) => { clearTimeout(timer); try { s.close(); } catch {} resolve({ ...t, ...r }); };
  const timer = setTimeout(() => done({ result: 'silent' }), limit);
  s.on('message', (m) => done({ result: 'answered', data: m.toString('latin1').slice(0, 200) }));
  s.on('error', (e) => done({ result: 'error', code: e.code }));
  s.send('ping', t.port, t.host, (e) => { if (e) done({ result: 'error', code: e.code }); });
}))).then((r) => process.stdout.write(JSON.stringify(r) + '\\n'));
`;

export interface UdpProbeResult {
  host: string;
  port: number;
  label: string;
  result: 'answered' | 'error' | 'silent';
  code?: string;
  data?: string;
}

/** A UDP echo server on the host (answers every datagram with `banner`). */
export function hostUdpEcho(host: string, banner: string): Promise<{ port: number; close(): Promise<void> }> {
  return new Promise((resolve, reject) => {
    const sock = dgram.createSocket('udp4');
    sock.on('error', reject);
    sock.on('message', (_m, rinfo) => sock.send(banner, rinfo.port, rinfo.address));
    sock.bind(0, host, () => {
      resolve({ port: sock.address().port, close: () => new Promise<void>((r) => sock.close(() => r())) });
    });
  });
}

export interface TcpTarget {
  host: string;
  port: number;
  label: string;
  /** Bytes to send once connected (e.g. a RESP command). */
  send?: string;
}

export interface TcpProbeResult extends TcpTarget {
  result: 'connected' | 'error' | 'timeout';
  code?: string;
  message?: string;
  data?: string;
  ms: number;
}

/**
 * /proc probe: for every other process in the sandbox, its uid and what of its environ, fds
 * (targets and, for files, contents) and memory could be read; memory is searched for a needle
 * given hex-encoded (so no process's argv holds it in clear, not even the shell that started us).
 * Also lists the probe's own fds (an inherited descriptor would show there).
 */
export const PROC_PROBE = `${ARGS}
const fs = require('node:fs');
const needle = args[0] ? Buffer.from(args[0], 'hex') : null;
const me = process.pid;
const out = { self: me, uid: process.getuid(), procs: [], selfFds: [] };
const readFd = (p) => {
  const h = fs.openSync(p, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
  try { const b = Buffer.alloc(4096); const n = fs.readSync(h, b, 0, 4096, null); return b.subarray(0, n).toString('latin1'); }
  finally { fs.closeSync(h); }
};
for (const e of fs.readdirSync('/proc')) {
  if (!/^\\d+$/.test(e) || Number(e) === me) continue;
  const pid = Number(e);
  const p = { pid };
  try { const st = fs.readFileSync('/proc/' + pid + '/status', 'utf8'); p.uid = Number(/Uid:\\s+(\\d+)/.exec(st)[1]); p.name = /Name:\\s+(.*)/.exec(st)[1]; } catch (err) { p.statusErr = err.code; }
  try { p.cmdline = fs.readFileSync('/proc/' + pid + '/cmdline', 'latin1').split('\\0').join(' ').slice(0, 300); } catch (err) { p.cmdlineErr = err.code; }
  try { p.environ = fs.readFileSync('/proc/' + pid + '/environ', 'latin1').split('\\0').join('\\n'); } catch (err) { p.environErr = err.code; }
  try {
    p.fds = [];
    for (const fd of fs.readdirSync('/proc/' + pid + '/fd')) {
      const f = { fd };
      try { f.target = fs.readlinkSync('/proc/' + pid + '/fd/' + fd); } catch (err) { f.err = err.code; }
      if (f.target && f.target.startsWith('/') && !f.target.startsWith('/dev/')) {
        try { f.content = readFd('/proc/' + pid + '/fd/' + fd); } catch (err) { f.readErr = err.code; }
      }
      p.fds.push(f);
    }
  } catch (err) { delete p.fds; p.fdErr = err.code; }
  try {
    const maps = fs.readFileSync('/proc/' + pid + '/maps', 'utf8');
    const h = fs.openSync('/proc/' + pid + '/mem', 'r');
    p.memReadable = true;
    let budget = 128 * 1024 * 1024;
    p.memHasNeedle = false;
    if (needle) {
      const buf = Buffer.alloc(1024 * 1024);
      for (const line of maps.split('\\n')) {
        const m = /^([0-9a-f]+)-([0-9a-f]+) r/.exec(line);
        if (!m || line.includes('[vvar]') || line.includes('[vsyscall]')) continue;
        for (let a = parseInt(m[1], 16), z = parseInt(m[2], 16); a < z && budget > 0; a += buf.length) {
          let n = 0;
          try { n = fs.readSync(h, buf, 0, Math.min(buf.length, z - a), a); } catch { break; }
          budget -= n;
          if (buf.subarray(0, n).includes(needle)) p.memHasNeedle = true;
        }
      }
    }
    fs.closeSync(h);
  } catch (err) { p.memErr = err.code; }
  out.procs.push(p);
}
for (const fd of fs.readdirSync('/proc/self/fd')) {
  const f = { fd };
  try { f.target = fs.readlinkSync('/proc/self/fd/' + fd); } catch (err) { f.err = err.code; }
  if (f.target && f.target.startsWith('/') && !f.target.startsWith('/dev/') && !f.target.startsWith('/proc/')) {
    try { f.content = readFd('/proc/self/fd/' + fd); } catch (err) { f.readErr = err.code; }
  }
  out.selfFds.push(f);
}
process.stdout.write(JSON.stringify(out) + '\\n');
`;

export interface ProcProbeResult {
  self: number;
  uid: number;
  procs: {
    pid: number;
    uid?: number;
    name?: string;
    cmdline?: string;
    environ?: string;
    environErr?: string;
    fds?: { fd: string; target?: string; content?: string }[];
    fdErr?: string;
    memReadable?: boolean;
    memHasNeedle?: boolean;
    memErr?: string;
  }[];
  selfFds: { fd: string; target?: string; content?: string }[];
}

/** A TCP server (Node) that greets each connection with `banner` and echoes; args: host, port, banner. */
export const BANNER_SERVER = `${ARGS}
const net = require('node:net');
const [host, port, banner] = args;
net.createServer((s) => { s.on('error', () => {}); s.write(banner + '\\n'); s.pipe(s); }).listen(Number(port), host, () => console.log('listening ' + port));
`;

/** An HTTP server (Node) answering every request with `<banner> <port>`; args: host, banner, port... */
export const HTTP_SERVER = `${ARGS}
const http = require('node:http');
const [host, banner, ...ports] = args;
for (const p of ports) http.createServer((req, res) => res.end(banner + ' ' + p + '\\n')).listen(Number(p), host, () => console.log('listening ' + p));
`;

// ---- a test network namespace (the only non-loopback place traffic may go) ----------------

export interface EgressNet {
  ns: string;
  /** The namespace's two addresses (each the far end of a /30 on the veth) and the host's ends. */
  serverIp: string;
  otherIp: string;
  hostIp: string;
  /** HTTP ports the servers in the namespace listen on (all addresses). */
  ports: number[];
  banner: string;
  stop(): Promise<void>;
}

function ip(args: string[]): string {
  return execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/**
 * Creates a network namespace joined to the host by a veth pair with two /30s in 10.200-254.x.x
 * (a pair not already on the host), and runs an HTTP server in it on each port. The caller must
 * `stop()` it (afterAll): the server is killed and the namespace (with its veth) deleted.
 */
export async function startEgressNet(ports: number[], banner: string): Promise<EgressNet> {
  const tag = `${process.pid % 10000}${randomInt(100, 999)}`;
  const ns = `sgatk${tag}`;
  const hostIf = `sgah${tag}`;
  const nsIf = `sgan${tag}`;
  const inUse = ip(['-4', '-o', 'addr', 'show']);
  let a = 0;
  let b = 0;
  for (;;) {
    a = randomInt(200, 255);
    b = randomInt(0, 256);
    if (!inUse.includes(` 10.${a}.${b}.`)) break;
  }
  const net4 = (last: number) => `10.${a}.${b}.${last}`;
  let server: ChildProcess | null = null;
  const stop = async () => {
    if (server && server.exitCode === null && server.signalCode === null) {
      const exited = new Promise((r) => server!.once('exit', r));
      server.kill('SIGKILL');
      await exited;
    }
    try {
      ip(['netns', 'del', ns]);
    } catch {
      // never created
    }
    try {
      ip(['link', 'del', hostIf]);
    } catch {
      // gone with the namespace
    }
  };
  try {
    ip(['netns', 'add', ns]);
    ip(['link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf]);
    ip(['link', 'set', nsIf, 'netns', ns]);
    ip(['addr', 'add', `${net4(1)}/30`, 'dev', hostIf]);
    ip(['addr', 'add', `${net4(5)}/30`, 'dev', hostIf]);
    ip(['link', 'set', hostIf, 'up']);
    ip(['netns', 'exec', ns, 'ip', 'addr', 'add', `${net4(2)}/30`, 'dev', nsIf]);
    ip(['netns', 'exec', ns, 'ip', 'addr', 'add', `${net4(6)}/30`, 'dev', nsIf]);
    ip(['netns', 'exec', ns, 'ip', 'link', 'set', nsIf, 'up']);
    ip(['netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up']);
    server = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', HTTP_SERVER, '0.0.0.0', banner, ...ports.map(String)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let log = '';
    server.stdout!.on('data', (c: Buffer) => (log += c.toString()));
    server.stderr!.on('data', (c: Buffer) => (log += c.toString()));
    // Reachable from the host (the supervisor's side): every port, on both addresses.
    await waitFor(`test servers in ${ns}`, async () => {
      if (server!.exitCode !== null) throw new Error(`server in ${ns} exited: ${log}`);
      for (const host of [net4(2), net4(6)]) {
        for (const p of ports) {
          const res = await fetch(`http://${host}:${p}/`).catch(() => null);
          if (!res || !(await res.text()).startsWith(banner)) return false;
        }
      }
      return true;
    }, 20_000, 100);
  } catch (err) {
    await stop();
    throw err;
  }
  return { ns, serverIp: net4(2), otherIp: net4(6), hostIp: net4(1), ports, banner, stop };
}

// ---- cgroups ---------------------------------------------------------------------------

/**
 * The cgroup directory (on the host) of `pid` for one controller: from /proc/PID/cgroup (v1 lines
 * `N:ctrl[,ctrl]:/path`, v2 `0::/path`) and the mount of that hierarchy.
 */
export function cgroupDirOf(pid: number, controller: 'memory' | 'cpu' | 'cpuacct' | 'pids'): string {
  const lines = readFileSync(`/proc/${pid}/cgroup`, 'utf8').trim().split('\n');
  for (const line of lines) {
    const [, ctrls, rel] = line.split(':', 3) as [string, string, string];
    if (ctrls.split(',').includes(controller)) {
      for (const base of [`/sys/fs/cgroup/${ctrls}`, `/sys/fs/cgroup/${controller}`]) {
        if (existsSync(base)) return `${base}${rel}`;
      }
    }
  }
  const v2 = lines.find((l) => l.startsWith('0::'));
  if (v2 && existsSync('/sys/fs/cgroup/cgroup.controllers')) return `/sys/fs/cgroup${v2.slice(3)}`;
  throw new Error(`no ${controller} cgroup for pid ${pid}: ${lines.join(' | ')}`);
}

/** CPU time used by a cgroup so far, in nanoseconds (v1 cpuacct.usage, v2 cpu.stat usage_usec). */
export function cgroupCpuNanos(dir: string): number {
  if (existsSync(`${dir}/cpuacct.usage`)) return Number(readFileSync(`${dir}/cpuacct.usage`, 'utf8').trim());
  const m = /usage_usec (\d+)/.exec(readFileSync(`${dir}/cpu.stat`, 'utf8'));
  if (!m) throw new Error(`no usage in ${dir}/cpu.stat`);
  return Number(m[1]) * 1000;
}

/** A cgroup file's content, or `<error>` (for failure messages). */
export function cgroupFile(dir: string, file: string): string {
  try {
    return readFileSync(`${dir}/${file}`, 'utf8').trim();
  } catch (err) {
    return `<${(err as Error).message}>`;
  }
}

// ---- host-side listeners ---------------------------------------------------------------

/** A TCP server on the host that greets with `banner` (an "any other host port" target). */
export function hostBannerServer(host: string, banner: string): Promise<{ port: number; close(): Promise<void> }> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer((s) => {
      s.on('error', () => undefined);
      s.end(`${banner}\n`);
    });
    srv.on('error', reject);
    srv.listen(0, host, () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      resolve({ port, close: () => new Promise<void>((r) => srv.close(() => r())) });
    });
  });
}
