// An exec's process tree, checked machine-wide through /proc like `ps` would: by command line (every
// sleep of a test case ends in `.<token>`) and by the exec tag (SANDGATE_EXEC_ID) the supervisor
// gives each exec. Shared by the tests that prove an exec's tree ends with it (exec-kill, exec-ws).
import { readdir, readFile } from 'node:fs/promises';
import { cliBin } from './cluster.ts';
import { sleep, waitFor } from './wait.ts';

export interface Proc {
  pid: number;
  cmd: string;
}

/**
 * One /proc scan (command lines, and environments when asked) shared by every caller within a few
 * milliseconds: concurrent cases poll at once, and on a loaded 2-core machine a scan is not free.
 */
interface Snapshot {
  at: number;
  procs: Proc[];
  environ?: Map<number, Buffer>;
}
let lastScan: Snapshot | undefined;
let scanning: Promise<Snapshot> | undefined;
let scanningEnv = false;

async function scan(withEnv: boolean): Promise<Snapshot> {
  const fresh = lastScan && Date.now() - lastScan.at < 20 && (!withEnv || lastScan.environ) ? lastScan : undefined;
  if (fresh) return fresh;
  if (scanning && (scanningEnv || !withEnv)) return scanning;
  if (scanning) await scanning.catch(() => undefined);
  scanningEnv = withEnv;
  scanning = (async () => {
    const procs: Proc[] = [];
    const environ = withEnv ? new Map<number, Buffer>() : undefined;
    const pids = (await readdir('/proc')).filter((e) => /^\d+$/.test(e)).map(Number);
    await Promise.all(
      pids.map(async (pid) => {
        try {
          const cmd = (await readFile(`/proc/${pid}/cmdline`)).toString().replace(/\0/g, ' ').trim();
          procs.push({ pid, cmd });
          if (environ) environ.set(pid, await readFile(`/proc/${pid}/environ`));
        } catch {
          // gone meanwhile, or not readable
        }
      }),
    );
    lastScan = { at: Date.now(), procs, environ };
    return lastScan;
  })().finally(() => {
    scanning = undefined;
  });
  return scanning;
}

export async function listProcs(): Promise<Proc[]> {
  return (await scan(false)).procs;
}

/**
 * Processes of a case's tree: any command line naming one of its sleeps (`sleep 60N.<token>`), the
 * `sh -c` included; the CLI client whose arguments contain the script is not part of the tree.
 */
export async function treeProcs(tok: string): Promise<Proc[]> {
  const re = new RegExp(`sleep \\d+\\.${tok}(\\s|$)`);
  return (await listProcs()).filter((p) => re.test(p.cmd) && !p.cmd.includes(cliBin) && p.pid !== process.pid);
}

export async function environOf(pid: number): Promise<Buffer | undefined> {
  try {
    return await readFile(`/proc/${pid}/environ`);
  } catch {
    return undefined;
  }
}

export function envVar(environ: Buffer, name: string): string | undefined {
  for (const kv of environ.toString().split('\0')) if (kv.startsWith(`${name}=`)) return kv.slice(name.length + 1);
  return undefined;
}

/** Every process on the machine carrying SANDGATE_EXEC_ID=<execId>. */
export async function taggedProcs(execId: string): Promise<Proc[]> {
  const tag = `SANDGATE_EXEC_ID=${execId}`;
  const { procs, environ } = await scan(true);
  return procs.filter((p) => environ!.get(p.pid)?.toString().split('\0').includes(tag));
}

/** Waits for the case's tree to appear and returns its exec id (read from a member's environment). */
export async function execIdOf(tok: string, timeoutMs = 30_000): Promise<string> {
  return waitFor(`processes of case ${tok} with an exec tag`, async () => {
    for (const p of await treeProcs(tok)) {
      const env = await environOf(p.pid);
      const id = env && envVar(env, 'SANDGATE_EXEC_ID');
      if (id) return id;
    }
    return undefined;
  }, timeoutMs, 25);
}

export const describeProcs = (ps: Proc[]) => ps.map((p) => `${p.pid} ${p.cmd}`).join('; ');

/**
 * Polls until nothing of the tree (by command line, and by exec tag) is left; fails with the
 * survivors (and `context()`, e.g. the cluster's logs).
 */
export async function expectTreeGone(tok: string, execId: string | undefined, withinMs: number, context: () => string = () => ''): Promise<number> {
  const t0 = Date.now();
  const deadline = t0 + withinMs;
  for (;;) {
    const left = [...(await treeProcs(tok)), ...(execId ? await taggedProcs(execId) : [])];
    if (left.length === 0) return Date.now() - t0;
    if (Date.now() >= deadline) {
      throw new Error(`exec tree of case ${tok} (exec ${execId}) still alive ${withinMs} ms later: ${describeProcs(left)}\n${context()}`);
    }
    await sleep(50);
  }
}
