// The supervisor confining its workload, attacked for real: a supervisor started as the drivers
// start it (SANDGATE_WORKLOAD_UID/GID, network isolation, workload cgroups, a policy) against the
// fake gateway; execs, SSH and ForwardTcp try to get out, and an egress target lives in a network
// namespace this test creates (veth pair on 10.247.x.0/30), never anywhere else.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Duplex } from 'node:stream';
import ssh2 from 'ssh2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeMessage, messageType, type GatewayMessage, type TcpFrame } from '@sandgate/protocols';
import { NATIVE_LAUNCHER } from '../src/workload/launcher.ts';
import { FakeGateway, freePort, killTagged, startSupervisor, taggedPids, waitFor, type ExecConn, type SupervisorHandle, type TcpConn } from './helpers.ts';

const UID = 10001;
const PREFIX = `w${process.pid}-${randomUUID().slice(0, 8)}-`;
let seq = 0;
const newId = () => `${PREFIX}${++seq}`;
const NODE = process.execPath;
const TAG = `sgwl${process.pid % 100000}`;

function sh(cmd: string, args: string[]): string {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function requireTools(): void {
  if (process.getuid?.() !== 0) throw new Error('workload tests must run as root (they create a netns, cgroups and drop to uid 10001)');
  for (const t of ['unshare', 'nsenter', 'setpriv', 'ip', 'curl']) {
    try {
      sh('sh', ['-c', `command -v ${t}`]);
    } catch {
      throw new Error(`workload tests need ${t} on PATH`);
    }
  }
}

const policyType = messageType('openshell.sandbox.v1.SandboxPolicy');
function policyBytes(endpoints: Array<{ host?: string; port?: number; ports?: number[]; allowed_ips?: string[] }>): Buffer {
  return encodeMessage(policyType, { version: 1, network_policies: { lab: { name: 'lab', endpoints } } });
}

/** A node one-liner run as the workload: connects to host:port and prints `OK <data>` or `ERR <code>`. */
function probe(host: string, port: number): string[] {
  const script = `
    const s = require('net').connect(${port}, ${JSON.stringify(host)});
    let d = '';
    const t = setTimeout(() => { console.log('TIMEOUT'); process.exit(0); }, 5000);
    s.on('data', (c) => (d += c));
    s.on('end', () => { clearTimeout(t); console.log('OK ' + d.trim()); });
    s.on('error', (e) => { clearTimeout(t); console.log('ERR ' + e.code); });`;
  return [NODE, '-e', script];
}

/** A TcpChannel seen from the gateway side as a socket, for an SSH client. */
function tcpStream(conn: TcpConn): Duplex {
  const d = new Duplex({
    read() {},
    write(chunk: Buffer, _enc, cb) {
      conn.call.write({ data: chunk }, cb);
    },
    final(cb) {
      conn.call.write({ eof: {} });
      cb();
    },
  });
  for (const c of conn.chunks) d.push(c);
  conn.call.on('data', (f: TcpFrame) => {
    if (f.data) d.push(f.data);
    if (f.eof) d.push(null);
  });
  conn.call.on('end', () => d.push(null));
  return d;
}

describe('workload confinement (uid, network namespace, egress proxy, cgroups)', () => {
  let gw: FakeGateway;
  let sup: SupervisorHandle;
  let dir: string;
  let home: string;
  let credFile: string;
  const cgroups: string[] = [];
  const netns = `${TAG}`;
  const vethHost = `${TAG}h`;
  const vethNs = `${TAG}n`;
  let subnet = '';
  let egressIp = '';
  let egressServer: ChildProcess | undefined;
  let hostServer: net.Server | undefined;
  let hostPort = 0;
  /** The same kind of service on the host's side of the veth pair: one of the host's own addresses. */
  let hostIfServer: net.Server | undefined;
  let hostIfPort = 0;
  let innerPort = 0;
  let innerExec: ExecConn | undefined;
  let controlMessages: () => Array<Record<string, unknown>>;

  const run = async (argv: string[], extra: Record<string, unknown> = {}) => {
    const exec = await gw.openExec({ exec_id: newId(), argv, workdir: home, ...extra });
    const exit = await exec.waitExit(20_000);
    return { exec, exit, out: exec.stdout(), err: exec.stderr() };
  };

  beforeAll(async () => {
    requireTools();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-wl-'));
    fs.chmodSync(dir, 0o755);
    // The credential as the drivers leave it: root's, 0600, in a directory anyone can traverse.
    credFile = path.join(dir, 'credential');
    fs.writeFileSync(credFile, 'wl-secret-credential\n', { mode: 0o600 });
    home = path.join(dir, 'home');
    fs.mkdirSync(home, { mode: 0o700 });
    fs.chownSync(home, UID, UID);

    // Workload cgroups (v1 here): memory with a limit for the OOM test, pids with a cap.
    for (const ctl of ['memory', 'pids']) {
      const d = `/sys/fs/cgroup/${ctl}/${TAG}`;
      fs.mkdirSync(d);
      cgroups.push(d);
    }
    fs.writeFileSync(`${cgroups[0]}/memory.limit_in_bytes`, String(256 * 1024 * 1024));
    fs.writeFileSync(`${cgroups[1]}/pids.max`, '512');

    // The egress target: a network namespace of our own, reachable from the host over a veth pair.
    const used = sh('ip', ['-o', '-4', 'addr']);
    const third = [...Array(200).keys()].map((i) => (process.pid + i) % 250).find((n) => !used.includes(`10.247.${n}.`))!;
    subnet = `10.247.${third}`;
    egressIp = `${subnet}.2`;
    sh('ip', ['netns', 'add', netns]);
    sh('ip', ['link', 'add', vethHost, 'type', 'veth', 'peer', 'name', vethNs]);
    sh('ip', ['link', 'set', vethNs, 'netns', netns]);
    sh('ip', ['addr', 'add', `${subnet}.1/30`, 'dev', vethHost]);
    sh('ip', ['link', 'set', vethHost, 'up']);
    sh('ip', ['netns', 'exec', netns, 'ip', 'addr', 'add', `${egressIp}/30`, 'dev', vethNs]);
    sh('ip', ['netns', 'exec', netns, 'ip', 'link', 'set', vethNs, 'up']);
    sh('ip', ['netns', 'exec', netns, 'ip', 'link', 'set', 'lo', 'up']);
    const serverScript = `
      const http = require('http');
      for (const p of [8080, 8081]) http.createServer((q, s) => s.end('egress-ok ' + p + '\\n')).listen(p, ${JSON.stringify(egressIp)});
      setTimeout(() => console.log('ready'), 100);`;
    egressServer = spawn('ip', ['netns', 'exec', netns, NODE, '-e', serverScript], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve, reject) => {
      egressServer!.stdout!.once('data', () => resolve());
      egressServer!.once('exit', (code) => reject(new Error(`egress server exited ${code}`)));
    });

    // A host-loopback service the workload must never reach (stands for the gateway, Redis…).
    hostServer = net.createServer((c) => c.end('host-secret\n'));
    await new Promise<void>((r) => hostServer!.listen(0, '127.0.0.1', r));
    hostPort = (hostServer.address() as net.AddressInfo).port;
    hostIfServer = net.createServer((c) => c.end('host-secret\n'));
    await new Promise<void>((r) => hostIfServer!.listen(0, `${subnet}.1`, r));
    hostIfPort = (hostIfServer.address() as net.AddressInfo).port;

    gw = await new FakeGateway({ heartbeatIntervalMs: 500 }).start();
    sup = startSupervisor({
      endpoints: [gw.address],
      sandboxId: 'sb-workload',
      // Its stdin's kind and how much it reads there: the main process starts in a spare wrapper.
      // Its open descriptors too (`ls` holds 3 for the listing): nothing of the spare's is left.
      mainArgv: ['sh', '-c', 'echo "main uid $(id -u)"; echo "main stdin $(readlink /proc/self/fd/0 | cut -d: -f1) $(cat | wc -c)"; echo "main fds $(ls /proc/self/fd | tr "\\n" " ")"; exec sleep 1000'],
      env: {
        SANDGATE_CREDENTIAL_FILE: credFile,
        SANDGATE_WORKLOAD_UID: String(UID),
        SANDGATE_WORKLOAD_GID: String(UID),
        SANDGATE_NETWORK_ISOLATION: '1',
        SANDGATE_WORKLOAD_CGROUPS: cgroups.join(':'),
        SANDGATE_POLICY: policyBytes([{ host: egressIp, port: 8080 }]).toString('base64'),
        HOME: home,
        PATH: '/usr/local/bin:/usr/bin:/bin',
      },
    });
    await gw.waitHello(1, 20_000);
    controlMessages = () => gw.controls.flatMap((c) => c.messages as Array<Record<string, unknown>>);
  }, 60_000);

  afterAll(async () => {
    await sup?.stop();
    gw?.stop();
    killTagged(PREFIX);
    hostServer?.close();
    hostIfServer?.close();
    egressServer?.kill('SIGKILL');
    try {
      execFileSync('ip', ['netns', 'del', netns], { stdio: 'ignore' });
    } catch {
      // not created
    }
    try {
      execFileSync('ip', ['link', 'del', vethHost], { stdio: 'ignore' });
    } catch {
      // went with the namespace
    }
    for (const d of cgroups) {
      // Processes leave a cgroup as they die; give the last ones a moment.
      await waitFor(`${d} empty`, () => fs.readFileSync(`${d}/cgroup.procs`, 'utf8').trim() === '', 5000).catch(() => undefined);
      try {
        fs.rmdirSync(d);
      } catch {
        // still busy; nothing else to do
      }
    }
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  it('runs execs, PTY execs and the main process as the workload uid, without capabilities or a way back to root', async () => {
    const { out, exit } = await run(['sh', '-c', 'id -u; id -G; grep -E "^(Uid|Gid|CapEff|CapPrm|NoNewPrivs)" /proc/self/status']);
    expect(exit.exit_code ?? 0).toBe(0);
    const lines = out.trim().split('\n');
    expect(lines[0]).toBe(String(UID));
    expect(lines[1]).toBe(String(UID));
    expect(out).toMatch(new RegExp(`Uid:\\s+${UID}\\s+${UID}\\s+${UID}\\s+${UID}`));
    expect(out).toMatch(new RegExp(`Gid:\\s+${UID}\\s+${UID}\\s+${UID}\\s+${UID}`));
    expect(out).toMatch(/CapEff:\s+0+\n/);
    expect(out).toMatch(/CapPrm:\s+0+\n/);
    expect(out).toMatch(/NoNewPrivs:\s+1/);

    const ptyExec = await run(['id', '-u'], { tty: true });
    expect(ptyExec.out.trim()).toBe(String(UID));

    await waitFor('main process output', () => sup.stdout().includes(`main uid ${UID}`), 10_000);
    // Through the native wrapper (built at npm install), not the shell chain.
    expect(sup.logs().find((l) => l.msg === 'workload confined')?.launcher).toBe(NATIVE_LAUNCHER);
    // Its spare wrappers started by the addon (posix_spawn), not by forks of the supervisor.
    expect(sup.logs().find((l) => l.msg === 'workload confined')?.spare_spawner).toBe('posix_spawn');
    // And its terminals (the PTY exec above) by the addon too, not by node-pty's fork.
    expect(sup.logs().find((l) => l.msg === 'workload confined')?.pty_spawner).toBe('posix_spawn');
    // The main process too: it took a spare (a socket for stdin, where Node's spawn gives
    // /dev/null), whose stdin the supervisor ended at once (`cat` read nothing and returned).
    await waitFor('main process stdin and descriptor lines', () => sup.stdout().includes('main fds '), 10_000);
    expect(sup.stdout()).toContain('main stdin socket 0\n');
    expect(sup.stdout()).toContain('main fds 0 1 2 3 \n');
  });

  it('keeps exec semantics: workdir, HOME, the exec tag, exit codes, signals, spawn errors', async () => {
    const r = await run(['sh', '-c', 'echo "$HOME"; pwd; echo data > f && cat f; echo "$SANDGATE_EXEC_ID"; exit 3']);
    expect(r.exit.exit_code ?? 0).toBe(3);
    expect(r.out).toBe(`${home}\n${home}\ndata\n${r.exec.attach!.exec_id}\n`);

    const killed = await run(['sh', '-c', 'kill -9 $$']);
    expect(killed.exit.exit_code ?? 0).toBe(137);
    expect(killed.exit.signal).toBe(9);
    expect(killed.err).not.toMatch(/out-of-memory/);

    const notFound = await run(['definitely-not-a-command-xyz']);
    expect(notFound.exit.exit_code ?? 0).toBe(127);
    expect(notFound.err).toBe('definitely-not-a-command-xyz: command not found\n');

    // What root may run or enter but the workload may not is refused like a shell would refuse it.
    const priv = path.join(dir, 'root-only');
    fs.mkdirSync(priv, { mode: 0o700 });
    fs.writeFileSync(path.join(priv, 'tool'), '#!/bin/sh\necho ran\n', { mode: 0o755 });
    fs.writeFileSync(path.join(dir, 'root-tool'), '#!/bin/sh\necho ran\n', { mode: 0o700 });
    for (const file of [path.join(priv, 'tool'), path.join(dir, 'root-tool')]) {
      const denied = await run([file]);
      expect(denied.exit.exit_code ?? 0).toBe(126);
      expect(denied.err).toBe(`${file}: Permission denied\n`);
    }
    const badCwd = await run(['true'], { workdir: priv });
    expect(badCwd.exit.exit_code ?? 0).toBe(126);
    expect(badCwd.err).toBe(`true: ${priv}: Permission denied\n`);

    // A user environment that would hijack a root process is only applied after the uid drop.
    const hijack = await run(['/bin/sh', '-c', 'echo "$LD_PRELOAD"; /usr/bin/id -u'], { env: { LD_PRELOAD: '/nonexistent/evil.so', PATH: '/nowhere' } });
    expect(hijack.exit.exit_code ?? 0).toBe(0);
    expect(hijack.out).toContain(`/nonexistent/evil.so\n${UID}\n`);
  });

  it('kills a confined exec tree at its timeout', async () => {
    const r = await run(['sh', '-c', 'sleep 100 & sleep 100'], { timeout_seconds: 1 });
    expect(r.exit.timed_out).toBe(true);
    expect(r.exit.exit_code ?? 0).toBe(124);
    expect(taggedPids(r.exec.attach!.exec_id!)).toEqual([]);
  });

  it('gives the workload no way to the credential: not the file, not the supervisor environment, not an inherited fd', async () => {
    const cat = await run(['cat', credFile]);
    expect(cat.exit.exit_code ?? 0).not.toBe(0);
    expect(cat.err).toMatch(/Permission denied/);
    expect(cat.out).not.toContain('wl-secret');

    const environ = await run(['cat', `/proc/${sup.child.pid}/environ`]);
    expect(environ.exit.exit_code ?? 0).not.toBe(0);
    expect(environ.out).not.toContain('SANDGATE_CREDENTIAL_FILE');

    // Every descriptor the supervisor holds (gateway connections, IPC, the proxy) stays with it.
    const fds = await run(['ls', '/proc/self/fd']);
    expect(fds.out.trim().split(/\s+/).map(Number).sort()).toEqual([0, 1, 2, 3]);
    // Nor another exec's terminal: a PTY exec next to a running one gets only its own.
    const other = await gw.openExec({ exec_id: newId(), argv: ['sleep', '30'], tty: true, workdir: home });
    const ptyFds = await run(['ls', '/proc/self/fd'], { tty: true });
    expect(ptyFds.out.trim().split(/\s+/).map(Number).sort()).toEqual([0, 1, 2, 3]);
    other.send({ signal: { signo: 9 } });
    await other.waitExit();
    const env = await run(['env']);
    expect(env.out).not.toMatch(/SANDGATE_(CREDENTIAL|GATEWAY|POLICY|WORKLOAD)/);
    expect(env.out).not.toContain('wl-secret');
  });

  it("cannot reach the host's loopback, directly or through the proxy", async () => {
    const direct = await run(probe('127.0.0.1', hostPort));
    expect(direct.out.trim()).toBe('ERR ECONNREFUSED');
    const viaProxy = await run(['curl', '-sS', '--max-time', '1', '-x', 'http://127.0.0.1:3128', '--noproxy', '', `http://127.0.0.1:${hostPort}/`]);
    expect(viaProxy.out).toMatch(/sandgate: egress refused: .*loopback/);
    expect(viaProxy.out).not.toContain('host-secret');
    const metadata = await run(['curl', '-sS', '--max-time', '1', '-o', '/dev/null', '-w', '%{http_code}', 'http://169.254.169.254/latest/meta-data/']);
    expect(metadata.out).toBe('403');
  });

  it('sends no UDP out of the sandbox either: not to the host loopback, not past the namespace', async () => {
    const dgram = await import('node:dgram');
    const got: string[] = [];
    const sockets = await Promise.all(
      ['127.0.0.1', `${subnet}.1`].map(
        (addr) =>
          new Promise<import('node:dgram').Socket>((resolve) => {
            const u = dgram.createSocket('udp4');
            u.on('message', (m) => got.push(`${addr}: ${m}`));
            u.bind(0, addr, () => resolve(u));
          }),
      ),
    );
    try {
      const [lo, veth] = sockets.map((u) => u.address().port);
      const script = `
        const d = require('dgram');
        const send = (host, port) => new Promise((r) => { const s = d.createSocket('udp4'); s.send('escape', port, host, (e) => { console.log(host + ' ' + (e ? e.code : 'sent')); s.close(); r(); }); });
        send('127.0.0.1', ${lo}).then(() => send('${subnet}.1', ${veth}));`;
      const r = await run([NODE, '-e', script]);
      // Loopback is the sandbox's own (nobody listens there); the host side has no route at all.
      expect(r.out).toBe(`127.0.0.1 sent\n${subnet}.1 ENETUNREACH\n`);
      await new Promise((res) => setTimeout(res, 300));
      expect(got).toEqual([]);
    } finally {
      for (const u of sockets) u.close();
    }
  });

  it('serves the sandbox its own loopback: an exec, ForwardTcp and ssh -L reach a server another exec started', async () => {
    innerPort = await freePort();
    const server = `require('net').createServer((c) => { c.on('error', () => {}); c.end('inner-banner\\n'); }).listen(${innerPort}, '127.0.0.1', () => console.log('listening'))`;
    innerExec = await gw.openExec({ exec_id: newId(), argv: [NODE, '-e', server], workdir: home });
    await innerExec.waitStdout(/listening/, 10_000);

    expect((await run(probe('127.0.0.1', innerPort))).out.trim()).toBe('OK inner-banner');
    // Not the host's: there, nothing listens on that port.
    const hostSide = await new Promise<string>((resolve) => {
      const s = net.connect(innerPort, '127.0.0.1');
      s.on('connect', () => resolve('connected'));
      s.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
    });
    expect(hostSide).toBe('ECONNREFUSED');

    // ForwardTcp's tcp target: the banner (sent before any byte from us) arrives whole.
    const fwd = await gw.openTcp({ channel_id: newId(), tcp: { host: '127.0.0.1', port: innerPort } });
    expect(typeof fwd).not.toBe('string');
    await (fwd as TcpConn).waitReceived(/inner-banner/);
    // A port only the host has is not reachable that way either.
    const refused = await gw.openTcp({ channel_id: newId(), tcp: { host: '127.0.0.1', port: hostPort } });
    expect(refused).toMatch(/ECONNREFUSED/);

    // SSH: a shell command runs confined, and ssh -L reaches the sandbox's loopback.
    const sshConn = await gw.openTcp({ channel_id: newId(), ssh: {} });
    expect(typeof sshConn).not.toBe('string');
    const client = new ssh2.Client();
    await new Promise<void>((resolve, reject) => {
      client.once('ready', () => resolve());
      client.once('error', reject);
      client.connect({ sock: tcpStream(sshConn as TcpConn) as unknown as never, username: 'sandbox' });
    });
    try {
      const uid = await new Promise<string>((resolve, reject) => {
        client.exec('id -u', (err, stream) => {
          if (err) return reject(err);
          let out = '';
          stream.on('data', (d: Buffer) => (out += d));
          stream.on('close', () => resolve(out.trim()));
        });
      });
      expect(uid).toBe(String(UID));
      const banner = await new Promise<string>((resolve, reject) => {
        client.forwardOut('127.0.0.1', 40000, '127.0.0.1', innerPort, (err, stream) => {
          if (err) return reject(err);
          let out = '';
          stream.on('data', (d: Buffer) => (out += d));
          stream.on('close', () => resolve(out.trim()));
        });
      });
      expect(banner).toBe('inner-banner');
      const hostForward = await new Promise<string>((resolve) => {
        client.forwardOut('127.0.0.1', 40001, '127.0.0.1', hostPort, (err, stream) => {
          if (err) return resolve(`refused: ${err.message}`);
          let out = '';
          stream.on('data', (d: Buffer) => (out += d));
          stream.on('close', () => resolve(out));
        });
      });
      expect(hostForward).toMatch(/^refused/);
    } finally {
      client.end();
    }
    innerExec.send({ signal: { signo: 15 } });
    await innerExec.waitExit();
  });

  it('lets egress out only through the proxy and only where the policy allows, and applies policy updates at once', async () => {
    const url = (port: number) => `http://${egressIp}:${port}/`;
    // No route out of the namespace: a direct connection fails at once (not a hang).
    expect((await run(probe(egressIp, 8080))).out.trim()).toBe('ERR ENETUNREACH');

    // Through the proxy (HTTP_PROXY from the environment): plain requests and CONNECT tunnels.
    const plain = await run(['curl', '-sS', '--max-time', '5', url(8080)]);
    expect(plain.out).toBe('egress-ok 8080\n');
    const tunnel = await run(['curl', '-sS', '-p', '--max-time', '5', url(8080)]);
    expect(tunnel.out).toBe('egress-ok 8080\n');

    // Not allowed: refused by the proxy, with the reason, well within curl's 1 s budget (exit 28 = timeout).
    const refused = await run(['curl', '-sS', '-p', '--max-time', '1', url(8081)]);
    expect(refused.exit.exit_code ?? 0).toBe(56);
    expect(refused.err).toMatch(/403/);
    const refusedPlain = await run(['curl', '-sS', '--max-time', '1', url(8081)]);
    expect(refusedPlain.out).toMatch(`sandgate: egress refused: no network policy allows ${egressIp}:8081`);

    // UpdateConfig: 8081 only. New connections follow at once; the answer names the revision.
    const control = gw.liveControl()!;
    control.call.write({ policy_update: { policy: policyBytes([{ host: '**.nowhere.test', port: 8080 }, { ports: [8081, hostIfPort], allowed_ips: [`${subnet}.0/30`] }]), revision: 2 } } as GatewayMessage);
    await waitFor('policy_applied 2', () => controlMessages().find((m) => (m.policy_applied as { revision?: number } | undefined)?.revision === 2));
    expect(controlMessages().find((m) => (m.policy_applied as { revision?: number } | undefined)?.revision === 2)!.policy_applied).toEqual({ revision: 2 });
    expect((await run(['curl', '-sS', '-p', '--max-time', '5', url(8081)])).out).toBe('egress-ok 8081\n');
    expect((await run(['curl', '-sS', '-p', '--max-time', '1', url(8080)])).exit.exit_code ?? 0).toBe(56);
    // allowed_ips covering an address of the host itself (where the gateway's ports would answer): still refused.
    const hostOwn = await run(['curl', '-sS', '--max-time', '1', `http://${subnet}.1:${hostIfPort}/`]);
    expect(hostOwn.out).toMatch(/sandgate: egress refused: .*address of the sandbox's host|host's own addresses/);
    expect(hostOwn.out).not.toContain('host-secret');

    // Bytes that do not decode: refused with a reason, the previous policy stays.
    control.call.write({ policy_update: { policy: Buffer.from([0xff, 0xff, 0xff]), revision: 3 } } as GatewayMessage);
    const bad = await waitFor('policy_applied 3', () => controlMessages().find((m) => (m.policy_applied as { revision?: number } | undefined)?.revision === 3));
    expect((bad.policy_applied as { error?: string }).error).toBeTruthy();
    expect((await run(['curl', '-sS', '-p', '--max-time', '5', url(8081)])).out).toBe('egress-ok 8081\n');

    // An empty policy denies everything.
    control.call.write({ policy_update: { policy: Buffer.alloc(0), revision: 4 } } as GatewayMessage);
    await waitFor('policy_applied 4', () => controlMessages().find((m) => (m.policy_applied as { revision?: number } | undefined)?.revision === 4));
    expect((await run(['curl', '-sS', '-p', '--max-time', '1', url(8081)])).exit.exit_code ?? 0).toBe(56);
  });

  it('puts every workload process in the workload cgroups and says when the OOM killer ended an exec', async () => {
    const r = await run(['sh', '-c', 'cat /proc/self/cgroup; cat /proc/self/oom_score_adj']);
    expect(r.out).toMatch(new RegExp(`memory:/${TAG}\\n`));
    expect(r.out).toMatch(new RegExp(`pids:/${TAG}\\n`));
    expect(r.out.trim().split('\n').at(-1)).toBe('500');
    // The supervisor itself is not in them.
    expect(fs.readFileSync(`/proc/${sup.child.pid}/cgroup`, 'utf8')).not.toContain(TAG);

    const hog = await run([NODE, '-e', 'const a = []; for (;;) a.push(Buffer.alloc(16 << 20, 1));']);
    expect(hog.exit.exit_code ?? 0).toBe(137);
    expect(hog.err).toContain("sandgate: killed by the out-of-memory killer (the sandbox's memory limit)");
    expect(sup.logs().some((l) => l.msg === 'exec killed by the out-of-memory killer')).toBe(true);
    // The sandbox keeps serving.
    expect((await run(['id', '-u'])).out.trim()).toBe(String(UID));
  });
});
