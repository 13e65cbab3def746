// The native spawn (native/sandgate-spawn.c, loaded by workload/native-spawn.ts): real processes
// started through the addon, checked for what Node's spawn gives a spare wrapper and an exec on
// pipes (output, exit, signals, its own session, default signal dispositions, no inherited
// descriptors, exactly the environment given), and, under strace, that starting one does not
// fork the calling process; then the same for a process on a terminal (what node-pty gives).
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { loadNativeSpawn, NATIVE_SPAWN_ADDON, type NativeSpawn, type PipedChild } from '../src/workload/native-spawn.ts';
import { loadNativePty, type NativePtySpawn, type Terminal } from '../src/workload/native-pty.ts';

let nativeSpawn: NativeSpawn;

beforeAll(() => {
  if (!fs.existsSync(NATIVE_SPAWN_ADDON)) throw new Error(`the native spawn addon was not built: ${NATIVE_SPAWN_ADDON} (npm install runs apps/supervisor/native/build.sh)`);
  const loaded = loadNativeSpawn();
  if (!loaded) throw new Error(`${NATIVE_SPAWN_ADDON} exists but does not load`);
  nativeSpawn = loaded;
});

interface Ran {
  code: number | null;
  signal: NodeJS.Signals | null;
  out: string;
  err: string;
  /** What had arrived on stdout when 'exit' was emitted, and the order of the two events. */
  events: string[];
}

function collect(child: PipedChild): Promise<Ran> {
  return new Promise((resolve) => {
    let out = '';
    let err = '';
    const events: string[] = [];
    child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (err += c.toString()));
    child.once('exit', () => events.push('exit'));
    child.once('close', (code: number | null, signal: NodeJS.Signals | null) => {
      events.push('close');
      resolve({ code, signal, out, err, events });
    });
  });
}

const sh = (script: string, env: Record<string, string> = { PATH: '/usr/bin:/bin' }) => nativeSpawn('/bin/sh', ['sh', '-c', script], env, 3);

describe('the native spawn (posix_spawn through the sandgate-spawn addon)', () => {
  it("gives the command's output, its exit status, and 'close' only after every byte of its output", async () => {
    // 4 MiB and an immediate exit: the exit is reaped before the output is read.
    const r = await collect(sh('head -c 4194304 /dev/zero | tr "\\0" x; echo done >&2; exit 7'));
    expect(r.code).toBe(7);
    expect(r.signal).toBeNull();
    expect(r.out.length).toBe(4 * 1024 * 1024);
    expect(r.err).toBe('done\n');
    expect(r.events).toEqual(['exit', 'close']);
  });

  it('reads stdin until its end', async () => {
    const child = nativeSpawn('/bin/cat', ['cat'], {}, 3);
    const done = collect(child);
    child.stdin!.write('one\n');
    child.stdin!.end('two\n');
    const r = await done;
    expect(r).toMatchObject({ code: 0, out: 'one\ntwo\n' });
  });

  it('reports a death by signal by its name, as Node does', async () => {
    const child = nativeSpawn('/bin/sleep', ['sleep', '30'], {}, 3);
    const done = collect(child);
    process.kill(child.pid!, 'SIGTERM');
    const r = await done;
    expect(r.code).toBeNull();
    expect(r.signal).toBe('SIGTERM');
    expect(child.exitCode).toBeNull();
    expect(child.signalCode).toBe('SIGTERM');
  });

  it("starts it in its own session and group, with default signal dispositions but glibc's own, nothing blocked, no descriptor of ours and exactly the environment given", async () => {
    // Node ignores SIGPIPE: a child that inherited that would not die writing to a closed pipe.
    const stray = fs.openSync('/etc/hostname', 'r'); // close-on-exec, as everything Node opens
    try {
      // The masks are read by the shell itself (a builtin loop, no child): dash blocks every
      // signal while it vforks a command, so a grep of the shell's status could catch it so.
      const child = sh('while IFS= read -r l; do case "$l" in SigIgn*|SigBlk*) echo "$l";; esac; done < /proc/$$/status; echo "sid $(cut -d" " -f6 /proc/$$/stat) pgid $(cut -d" " -f5 /proc/$$/stat)"; ls -l /proc/$$/fd; env', {
        PATH: '/usr/bin:/bin',
        ONLY: 'this',
      });
      const r = await collect(child);
      expect(r.code).toBe(0);
      expect(r.out).toContain(`sid ${child.pid} pgid ${child.pid}\n`);
      // glibc's posix_spawn leaves its two internal signals (32, 33) ignored; sandgate-launch,
      // what the supervisor starts this way, resets them (launcher.test.ts checks the workload's).
      expect(r.out).toMatch(/^SigIgn:\s+0+180000000$/m);
      expect(r.out).toMatch(/^SigBlk:\s+0+$/m);
      const lines = r.out.split('\n');
      // 0-2 are the sockets; dash keeps one descriptor of its own (251, as under Node's spawn).
      // ls runs alone, not in a pipeline: while the shell sets a pipeline up it holds the pipe
      // itself, and its first command could list it.
      const fds = lines.flatMap((l) => {
        const link = / (\d+) -> (.*)$/.exec(l);
        return link && l.startsWith('l') ? [`fd ${link[1]} ${link[2]}`] : [];
      });
      expect(fds.filter((l) => l.includes('socket:')).map((l) => l.split(' ')[1])).toEqual(['0', '1', '2']);
      expect(fds.filter((l) => !l.includes('socket:') && !/^fd \d+ \/dev\/(null|pts\/\d+|tty)$/.test(l) && !l.endsWith('/bin/sh') && !l.startsWith('fd 251 '))).toEqual([]);
      expect(r.out).not.toContain('/etc/hostname');
      const env = lines.filter((l) => /^[A-Z_]+=/.test(l) && !l.startsWith('PWD='));
      expect(env.sort()).toEqual(['ONLY=this', 'PATH=/usr/bin:/bin']);
    } finally {
      fs.closeSync(stray);
    }
  });

  it('throws what went wrong when the program cannot start, and leaves no descriptor open', () => {
    const before = fs.readdirSync('/proc/self/fd').length;
    let thrown: (Error & { errno?: number }) | undefined;
    try {
      nativeSpawn('/nonexistent/program', ['x'], {}, 4);
    } catch (err) {
      thrown = err as Error & { errno?: number };
    }
    expect(thrown?.message).toMatch(/\/nonexistent\/program: No such file or directory/);
    expect(thrown?.errno).toBe(os.constants.errno.ENOENT);
    expect(fs.readdirSync('/proc/self/fd').length).toBe(before);
  });

  it('does not fork the calling process: the child is cloned with CLONE_VM | CLONE_VFORK (strace)', () => {
    const strace = spawnSync('strace', ['-V'], { encoding: 'utf8' });
    if (strace.status !== 0) throw new Error('strace is needed for this test (Debian package strace)');
    const trace = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'sg-native-spawn-')), 'trace');
    const nativeSpawnModule = path.resolve(import.meta.dirname, '../src/workload/native-spawn.ts');
    execFileSync('strace', ['-f', '-e', 'trace=clone,clone3,fork,vfork', '-o', trace, process.execPath, '--input-type=module', '-e',
      `const { loadNativeSpawn } = await import(${JSON.stringify(nativeSpawnModule)});
       const keep = setInterval(() => {}, 1000);
       const child = loadNativeSpawn()('/bin/true', ['true'], {}, 3);
       child.on('close', (code) => { clearInterval(keep); process.exitCode = code; });`,
    ], { stdio: 'ignore', timeout: 30_000 });
    const calls = fs.readFileSync(trace, 'utf8').split('\n').filter((l) => /\b(clone3?|v?fork)\(/.test(l));
    fs.rmSync(path.dirname(trace), { recursive: true, force: true });
    // Node's own threads are clones too (CLONE_THREAD); the child must be a vfork-like one, and
    // nothing may be a fork (a clone that shares neither memory nor thread group).
    expect(calls.some((l) => l.includes('CLONE_VM') && l.includes('CLONE_VFORK'))).toBe(true);
    expect(calls.filter((l) => !l.includes('CLONE_VM'))).toEqual([]);
  });
});

describe('a terminal started through posix_spawn (spawnPty, native-pty.ts)', () => {
  let spawnPty: NativePtySpawn;
  beforeAll(() => {
    const loaded = loadNativePty();
    if (!loaded) throw new Error(`${NATIVE_SPAWN_ADDON} has no spawnPty`);
    spawnPty = loaded;
  });

  const PATH_ONLY = { PATH: '/usr/bin:/bin' };
  interface Ended {
    out: string;
    exit: { exitCode: number; signal: number };
  }
  const ended = (term: Terminal): Promise<Ended> =>
    new Promise((resolve) => {
      let out = '';
      term.onData((d) => (out += d.toString()));
      term.onExit((exit) => resolve({ out, exit }));
    });

  it('runs the process on a terminal it controls, in its own session, at the size asked, in cwd; input, output and the exit status go through', async () => {
    const term = spawnPty('/bin/sh', ['sh', '-c', 'tty; stty size; pwd; cut -d" " -f6,7 /proc/$$/stat; echo ready; read line; echo "got $line"; exit 3'], PATH_ONLY, { cwd: '/tmp', cols: 100, rows: 30 });
    const done = ended(term);
    let seen = '';
    term.onData((d) => {
      seen += d.toString();
      if (seen.endsWith('ready\r\n')) term.write('hello\n');
    });
    const { out, exit } = await done;
    const lines = out.split('\r\n');
    expect(lines[0]).toMatch(/^\/dev\/pts\/\d+$/);
    expect(lines[1]).toBe('30 100');
    expect(lines[2]).toBe('/tmp');
    // Session id = its pid (setsid), and a controlling terminal (tty_nr not 0).
    const [sid, ttyNr] = lines[3]!.split(' ').map(Number);
    expect(sid).toBe(term.pid);
    expect(ttyNr).not.toBe(0);
    expect(out).toContain('hello\r\ngot hello\r\n'); // echoed by the line discipline, then read
    expect(exit).toEqual({ exitCode: 3, signal: 0 });
  });

  it("resizes the terminal (the process's foreground group gets SIGWINCH) and reports a death by signal", async () => {
    const term = spawnPty('/bin/sh', ['sh', '-c', 'trap "stty size; kill -TERM $$" WINCH; echo ready; while :; do sleep 0.05; done'], PATH_ONLY, { cwd: '/', cols: 80, rows: 24 });
    const done = ended(term);
    let seen = '';
    term.onData((d) => {
      seen += d.toString();
      if (seen === 'ready\r\n') term.resize(132, 43);
    });
    const { out, exit } = await done;
    expect(out).toContain('43 132\r\n');
    expect(exit).toEqual({ exitCode: 0, signal: os.constants.signals.SIGTERM });
  });

  it('reports the exit while something the process left behind still holds the terminal open', async () => {
    const term = spawnPty('/bin/sh', ['sh', '-c', 'sleep 30 & echo "left $!"'], PATH_ONLY, { cwd: '/', cols: 80, rows: 24 });
    const { out, exit } = await ended(term);
    expect(exit).toEqual({ exitCode: 0, signal: 0 });
    const left = Number(/left (\d+)/.exec(out)?.[1]);
    // Still running when the exit came: the report did not wait for it.
    expect(fs.existsSync(`/proc/${left}`)).toBe(true);
    process.kill(left, 'SIGKILL');
  });

  it('keeps the output it holds while paused: the exit waits for it, however long the pause', async () => {
    // 2 KiB (less than a terminal buffers, so the process exits while nothing is read), then the
    // exit; nothing is read for a second.
    const term = spawnPty('/bin/sh', ['sh', '-c', 'head -c 2048 /dev/zero | tr "\\0" x'], PATH_ONLY, { cwd: '/', cols: 80, rows: 24 });
    term.pause();
    const done = ended(term);
    // The process's own exit is told at once (the exec's tree kill hangs on it), the output held.
    let processExited = false;
    term.onProcessExit!(() => (processExited = true));
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect(fs.existsSync(`/proc/${term.pid}`), 'the process exited (and was reaped) during the pause').toBe(false);
    expect(processExited).toBe(true);
    term.resume();
    const { out, exit } = await done;
    expect(exit).toEqual({ exitCode: 0, signal: 0 });
    expect(out.length).toBe(2048);
  });

  it('never blocks the event loop on a full terminal: input the process does not read is queued', async () => {
    const term = spawnPty('/bin/sleep', ['sleep', '30'], PATH_ONLY, { cwd: '/', cols: 80, rows: 24 });
    const done = ended(term);
    term.write(Buffer.alloc(1024 * 1024, 'x')); // far more than a terminal's input buffer holds
    // A blocking write would hold the event loop until the process ends: this timer would then
    // find it dead.
    const stateOnTick = await new Promise<string>((resolve) => setTimeout(() => resolve(fs.readFileSync(`/proc/${term.pid}/stat`, 'utf8').split(' ')[2]!), 1));
    process.kill(term.pid, 'SIGKILL');
    const { exit } = await done;
    expect(stateOnTick).not.toBe('Z');
    expect(exit).toEqual({ exitCode: 0, signal: os.constants.signals.SIGKILL });
  });

  it("never writes into another terminal: input for a closed one is dropped, even when the next took its descriptor's number", async () => {
    const first = spawnPty('/bin/sleep', ['sleep', '30'], PATH_ONLY, { cwd: '/', cols: 80, rows: 24 });
    const firstEnded = ended(first);
    // Closed now (its 'close' event comes later), and the next terminal takes the lowest free
    // number: the one the first one's master had.
    first.destroy();
    const next = spawnPty('/bin/sh', ['sh', '-c', 'echo ready; read line; echo "got:$line"'], PATH_ONLY, { cwd: '/', cols: 80, rows: 24 });
    const done = ended(next);
    first.write('leaked\n');
    first.resize(10, 10);
    let seen = '';
    next.onData((d) => {
      seen += d.toString();
      if (seen.endsWith('ready\r\n')) next.write('mine\n');
    });
    const { out } = await done;
    expect(out).toContain('got:mine\r\n');
    expect(out).not.toContain('leaked');
    expect((await firstEnded).exit.signal).toBe(os.constants.signals.SIGHUP);
  });

  it('hangs up its process when destroyed, but signals nothing once the process was reaped (its pid may be reused)', async () => {
    const running = spawnPty('/bin/sleep', ['sleep', '30'], PATH_ONLY, { cwd: '/', cols: 80, rows: 24 });
    const hungUp = ended(running);
    running.destroy();
    expect((await hungUp).exit.signal).toBe(os.constants.signals.SIGHUP);

    const done = spawnPty('/bin/true', ['true'], PATH_ONLY, { cwd: '/', cols: 80, rows: 24 });
    await ended(done);
    const kill = process.kill;
    const signalled: number[] = [];
    process.kill = ((pid: number, signal?: string | number) => {
      signalled.push(pid);
      return kill.call(process, pid, signal);
    }) as typeof process.kill;
    try {
      done.destroy();
    } finally {
      process.kill = kill;
    }
    expect(signalled).toEqual([]);
  });

  it('throws what went wrong when the process cannot start, and leaves no descriptor open', () => {
    const before = fs.readdirSync('/proc/self/fd').length;
    let thrown: (Error & { errno?: number }) | undefined;
    try {
      spawnPty('/bin/true', ['true'], PATH_ONLY, { cwd: '/nonexistent/dir', cols: 80, rows: 24 });
    } catch (err) {
      thrown = err as Error & { errno?: number };
    }
    expect(thrown?.message).toMatch(/cannot start the process on its terminal: No such file or directory/);
    expect(thrown?.errno).toBe(os.constants.errno.ENOENT);
    expect(fs.readdirSync('/proc/self/fd').length).toBe(before);
  });

  it('does not fork the calling process (strace), unlike node-pty', () => {
    const strace = spawnSync('strace', ['-V'], { encoding: 'utf8' });
    if (strace.status !== 0) throw new Error('strace is needed for this test (Debian package strace)');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sg-native-pty-'));
    const nativePtyModule = path.resolve(import.meta.dirname, '../src/workload/native-pty.ts');
    const forks = (script: string): string[] => {
      const trace = path.join(dir, 'trace');
      execFileSync('strace', ['-f', '-e', 'trace=clone,clone3,fork,vfork', '-o', trace, process.execPath, '--input-type=module', '-e', script], {
        stdio: 'ignore',
        timeout: 30_000,
        cwd: path.resolve(import.meta.dirname, '..'),
      });
      const calls = fs.readFileSync(trace, 'utf8').split('\n').filter((l) => /\b(clone3?|v?fork)\(/.test(l));
      // Node's own threads are clones too (CLONE_THREAD, so CLONE_VM): a fork shares no memory.
      return calls.filter((l) => !l.includes('CLONE_VM'));
    };
    try {
      const native = forks(
        `const { loadNativePty } = await import(${JSON.stringify(nativePtyModule)});
         const term = loadNativePty()('/bin/true', ['true'], {}, { cwd: '/', cols: 80, rows: 24 });
         term.onExit(({ exitCode }) => { process.exitCode = exitCode; });`,
      );
      expect(native).toEqual([]);
      // The same through node-pty: a fork. (Shows this check sees one.)
      const nodePty = forks(
        `const { createRequire } = await import('node:module');
         const pty = createRequire(${JSON.stringify(nativePtyModule)})('node-pty');
         const term = pty.spawn('/bin/true', [], { cwd: '/', cols: 80, rows: 24, env: {} });
         term.onExit(({ exitCode }) => { process.exitCode = exitCode; });`,
      );
      expect(nodePty.length).toBeGreaterThan(0);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
