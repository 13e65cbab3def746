// Helpers for e2e tests that create sandboxes through the CLI and inspect them in Redis.
import { keysFor, type RedisClient } from '@sandgate/store';
import { runCli } from './cluster.ts';
import { waitFor } from './wait.ts';

export interface CreatedSandbox {
  id: string;
  name: string;
}

export async function createSandbox(gateway: string, name: string, command: string[] = ['sleep', 'infinity']): Promise<CreatedSandbox> {
  const res = await runCli(['sandbox', 'create', '--name', name, '--detach', '-o', 'json', '--', ...command], { gateway });
  if (res.code !== 0) throw new Error(`create failed (${res.code}): ${res.stderr}`);
  const sb = JSON.parse(res.stdout.toString()) as { metadata: { id: string; name: string }; status: { phase: string } };
  return { id: sb.metadata.id, name: sb.metadata.name };
}

/** Deletes every sandbox `gateway` lists (a test's clean-up: a supervisor outlives its replicas); best effort. */
export async function deleteAllSandboxes(gateway: string): Promise<void> {
  const list = await runCli(['sandbox', 'list', '-o', 'json'], { gateway }).catch(() => null);
  if (list?.code !== 0) return;
  for (const sb of (JSON.parse(list.stdout.toString()) as { sandboxes: { metadata: { name: string } }[] }).sandboxes) {
    await runCli(['sandbox', 'delete', sb.metadata.name], { gateway }).catch(() => undefined);
  }
}

/** The replica id named by the sandbox's owner record, waiting until there is one. */
export async function ownerOf(redis: RedisClient, sandboxId: string): Promise<string> {
  return waitFor(`owner record of ${sandboxId}`, async () => (await redis.hget(keysFor(redis).owner(sandboxId), 'replica')) ?? undefined);
}

/** Pids of processes whose command line contains `needle` (the whole machine, like `ps`). */
export async function pidsMatching(needle: string): Promise<number[]> {
  const { readdir, readFile } = await import('node:fs/promises');
  const out: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmd = (await readFile(`/proc/${entry}/cmdline`)).toString().replace(/\0/g, ' ').trim();
      if (cmd.includes(needle)) out.push(Number(entry));
    } catch {
      // the process went away while we looked
    }
  }
  return out.filter((p) => p !== process.pid);
}

/** Resident memory of a process in bytes. */
export async function rssBytes(pid: number): Promise<number> {
  const { readFile } = await import('node:fs/promises');
  const status = (await readFile(`/proc/${pid}/status`)).toString();
  const m = /VmRSS:\s+(\d+) kB/.exec(status);
  return m ? Number(m[1]) * 1024 : 0;
}

/** SIGKILLs a sandbox's supervisor process (found by its SANDGATE_SANDBOX_ID), leaving the rest. */
export async function killSupervisor(sandboxId: string): Promise<number> {
  const { readFile } = await import('node:fs/promises');
  const tag = `SANDGATE_SANDBOX_ID=${sandboxId}`;
  let killed = 0;
  for (const pid of await pidsMatching('apps/supervisor/src/main.ts')) {
    try {
      const env = (await readFile(`/proc/${pid}/environ`)).toString().split('\0');
      const argv0 = (await readFile(`/proc/${pid}/cmdline`)).toString().split('\0')[0] ?? '';
      // The node process itself, not the bwrap processes around it (same argv tail, same env).
      if (env.includes(tag) && argv0.endsWith('node')) {
        process.kill(pid, 'SIGKILL');
        killed++;
      }
    } catch {
      // gone already
    }
  }
  return killed;
}
