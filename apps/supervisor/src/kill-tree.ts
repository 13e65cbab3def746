// Kills every process belonging to one exec. An exec's leader starts its own session and process
// group, but a process can leave the group (a job-control shell's background jobs, setsid, double
// fork, daemonising), so the group alone is not enough: members of the leader's session are swept
// too, and every exec process inherits SANDGATE_EXEC_ID=<exec id> in its environment, so
// /proc/<pid>/environ finds it wherever it went. Pids found by a scan are remembered with their
// start time so a pid recycled by an unrelated process in the meantime is never signalled; the
// group and session are only trusted while no other process has taken over the leader's pid.
import fs from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { EXEC_ID_ENV } from './config.ts';
import type { Logger } from '@sandgate/telemetry/log';

export interface KillTreeOptions {
  /** The exec runs on a PTY: also SIGHUP the group, as a terminal hangup would. */
  pty?: boolean;
  /**
   * Start time (/proc/<pid>/stat field 22) of the exec's leader, whose pid is the group and session
   * id. Once a different process holds that pid, the group and session are someone else's.
   */
  leaderStartTime?: string;
  /** Time between SIGTERM and SIGKILL. */
  graceMs?: number;
  /** How long to keep re-scanning and SIGKILLing after the grace period. */
  killDeadlineMs?: number;
  /** Overridable for tests. */
  procRoot?: string;
  log?: Logger;
}

export interface ProcStat {
  state: string;
  pgrp: number;
  /** Session id. */
  session: number;
  startTime: string;
}

/** Parses /proc/<pid>/stat. The command name may contain spaces and ')', so split after the last ')'. */
export function readProcStat(pid: number, procRoot = '/proc'): ProcStat | undefined {
  try {
    const text = fs.readFileSync(`${procRoot}/${pid}/stat`, 'utf8');
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    // fields[0] is field 3 (state), pgrp is field 5, session field 6, starttime field 22.
    return { state: fields[0], pgrp: Number(fields[2]), session: Number(fields[3]), startTime: fields[19] };
  } catch {
    return undefined;
  }
}

function environHasTag(environ: Buffer, tag: Buffer): boolean {
  let from = 0;
  for (;;) {
    const i = environ.indexOf(tag, from);
    if (i < 0) return false;
    if (i === 0 || environ[i - 1] === 0) return true;
    from = i + 1;
  }
}

const isDead = (state: string) => state === 'Z' || state === 'X';

/** The exec's group/session id may be used: a real id, not ours, and not taken over by a new process. */
function groupIsOurs(pgid: number | undefined, leaderStartTime: string | undefined, procRoot: string): pgid is number {
  if (!pgid || pgid <= 1 || pgid === process.pid) return false;
  if (leaderStartTime === undefined) return true;
  // The leader alive (or a zombie) with its own start time, or gone: its pid then stays reserved
  // as long as members of its group or session exist, so the ids still name the exec's processes.
  // Another process under that pid means the exec's group emptied and the pid was recycled.
  const leader = readProcStat(pgid, procRoot);
  return !leader || leader.startTime === leaderStartTime;
}

/**
 * Live processes of the exec, as pid -> start time: those tagged with the exec id, plus any member
 * of its process group or of its leader's session (a child started with a scrubbed environment
 * stays in the group, or at least in the session when a job-control shell moved it to a group of
 * its own). Zombies are already dead; whoever inherited them (bwrap as init) reaps them.
 */
export function findExecProcesses(execId: string, pgid?: number, procRoot = '/proc', leaderStartTime?: string): Map<number, string> {
  // The trailing NUL makes `abc` not match `abcd`; environHasTag anchors the start.
  const tag = Buffer.from(`${EXEC_ID_ENV}=${execId}\0`);
  const found = new Map<number, string>();
  let entries: string[];
  try {
    entries = fs.readdirSync(procRoot);
  } catch {
    return found;
  }
  const group = groupIsOurs(pgid, leaderStartTime, procRoot) ? pgid : undefined;
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    if (pid === process.pid) continue;
    const stat = readProcStat(pid, procRoot);
    if (!stat || isDead(stat.state)) continue;
    if (group !== undefined && (stat.pgrp === group || stat.session === group)) {
      found.set(pid, stat.startTime);
      continue;
    }
    let environ: Buffer;
    try {
      environ = fs.readFileSync(`${procRoot}/${pid}/environ`);
    } catch {
      continue; // exited meanwhile, or not ours to read
    }
    if (environHasTag(environ, tag)) found.set(pid, stat.startTime);
  }
  return found;
}

/** Only the tagged processes (no process group): what remains of an exec after it is "gone". */
export function findTaggedProcesses(execId: string, procRoot = '/proc'): Map<number, string> {
  return findExecProcesses(execId, undefined, procRoot);
}

function signalGroup(pgid: number | undefined, leaderStartTime: string | undefined, signal: NodeJS.Signals, procRoot: string): void {
  // Never signal group 0/1 or our own (-0 would hit the supervisor's group), nor a recycled one.
  if (!groupIsOurs(pgid, leaderStartTime, procRoot)) return;
  try {
    process.kill(-pgid, signal);
  } catch {
    // ESRCH: the group is gone.
  }
}

/** Signals each pid only if it is still the process we found (same start time); forgets the dead. */
function signalTagged(known: Map<number, string>, signal: NodeJS.Signals | 0, procRoot: string): void {
  for (const [pid, startTime] of known) {
    const stat = readProcStat(pid, procRoot);
    if (!stat || stat.startTime !== startTime || isDead(stat.state)) {
      known.delete(pid);
      continue;
    }
    try {
      process.kill(pid, signal);
    } catch {
      known.delete(pid);
    }
  }
}

/** Re-scans /proc and adds newly tagged processes to `known`; returns only the new ones. */
function rescan(execId: string, pgid: number | undefined, leaderStartTime: string | undefined, known: Map<number, string>, procRoot: string): Map<number, string> {
  const fresh = new Map<number, string>();
  for (const [pid, startTime] of findExecProcesses(execId, pgid, procRoot, leaderStartTime)) {
    if (known.get(pid) === startTime) continue;
    known.set(pid, startTime);
    fresh.set(pid, startTime);
  }
  return fresh;
}

/**
 * SIGTERM the exec's process group and every tagged process, SIGKILL whatever is left after the
 * grace period, and keep scanning (bounded) until neither tagged processes nor live group members
 * remain. Resolves true when the exec's processes are all gone, false if some survived the deadline.
 */
export async function killExecTree(execId: string, pgid: number | undefined, opts: KillTreeOptions = {}): Promise<boolean> {
  const procRoot = opts.procRoot ?? '/proc';
  const graceMs = opts.graceMs ?? 500;
  const killDeadlineMs = opts.killDeadlineMs ?? 2000;
  const leader = opts.leaderStartTime;
  // Processes usually die within a millisecond of SIGTERM: look again soon, then less often.
  let pollMs = 5;
  const maxPollMs = 50;
  const known = findExecProcesses(execId, pgid, procRoot, leader);
  // The common case at a normal exit: nothing of the exec is left, so nothing to wait for.
  if (known.size === 0) return true;

  // SIGTERM, and for a PTY the SIGHUP a terminal hangup would deliver, to the group and to every
  // process found (members that left the group get theirs individually).
  const soft = (pids: Map<number, string>) => {
    signalTagged(pids, 'SIGTERM', procRoot);
    if (opts.pty) signalTagged(pids, 'SIGHUP', procRoot);
  };
  signalGroup(pgid, leader, 'SIGTERM', procRoot);
  if (opts.pty) signalGroup(pgid, leader, 'SIGHUP', procRoot);
  soft(known);

  // Most processes die promptly on SIGTERM: stop waiting as soon as nothing is left.
  const graceEnd = Date.now() + graceMs;
  while (Date.now() < graceEnd) {
    await sleep(Math.min(pollMs, Math.max(1, graceEnd - Date.now())));
    pollMs = Math.min(maxPollMs, pollMs * 2);
    // Children forked during the grace period get their SIGTERM too; the others only a liveness check.
    soft(rescan(execId, pgid, leader, known, procRoot));
    signalTagged(known, 0, procRoot);
    if (known.size === 0) return true;
  }

  const killEnd = Date.now() + killDeadlineMs;
  pollMs = 5;
  for (;;) {
    rescan(execId, pgid, leader, known, procRoot);
    signalGroup(pgid, leader, 'SIGKILL', procRoot);
    signalTagged(known, 'SIGKILL', procRoot);
    if (known.size === 0) return true;
    if (Date.now() >= killEnd) break;
    await sleep(pollMs);
    pollMs = Math.min(maxPollMs, pollMs * 2);
  }
  const left = [...findExecProcesses(execId, pgid, procRoot, leader).keys()];
  opts.log?.warn('exec processes survived kill', { exec_id: execId, pids: left, pgid });
  return left.length === 0;
}
