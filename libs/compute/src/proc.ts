// Small, synchronous readers over /proc. The local driver has to find and kill process trees from
// any process on the host knowing only a pid and its start time, so everything here tolerates the
// process vanishing between two reads (every reader returns null instead of throwing).
import fs from 'node:fs';

export interface ProcStat {
  pid: number;
  /** Executable name, truncated by the kernel to 15 characters. */
  comm: string;
  /** One-letter state: R, S, D, Z (zombie), X (dead), … */
  state: string;
  ppid: number;
  pgrp: number;
  session: number;
  /** Field 22: clock ticks since boot when the process started. Distinguishes a reused pid. */
  startTime: number;
}

/** Parses /proc/<pid>/stat, or null if the process does not exist (or is unreadable). */
export function readStat(pid: number): ProcStat | null {
  let raw: string;
  try {
    raw = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  return parseStat(raw);
}

export function parseStat(raw: string): ProcStat | null {
  // comm is in parentheses and may itself contain spaces and ')', so split at the *last* ')'.
  const open = raw.indexOf('(');
  const close = raw.lastIndexOf(')');
  if (open < 0 || close < open) return null;
  const pid = Number(raw.slice(0, open).trim());
  const comm = raw.slice(open + 1, close);
  // rest[0] is field 3 (state), so field N is rest[N - 3].
  const rest = raw.slice(close + 2).split(' ');
  const startTime = Number(rest[22 - 3]);
  if (!Number.isInteger(pid) || !Number.isFinite(startTime)) return null;
  return {
    pid,
    comm,
    state: rest[0] ?? '',
    ppid: Number(rest[4 - 3]),
    pgrp: Number(rest[5 - 3]),
    session: Number(rest[6 - 3]),
    startTime,
  };
}

/** A zombie (or dead) process has exited; only its parent's wait() keeps the entry around. */
export function isDead(stat: ProcStat): boolean {
  return stat.state === 'Z' || stat.state === 'X' || stat.state === 'x';
}

/** True if `pid` is a live (non-zombie) process that started at `startTime`, i.e. not a reused pid. */
export function isAlive(pid: number, startTime: number): boolean {
  const stat = readStat(pid);
  return stat !== null && stat.startTime === startTime && !isDead(stat);
}

/** Every pid currently in /proc. */
export function listPids(): number[] {
  let names: string[];
  try {
    names = fs.readdirSync('/proc');
  } catch {
    return [];
  }
  const pids: number[] = [];
  for (const name of names) {
    if (/^[0-9]+$/.test(name)) pids.push(Number(name));
  }
  return pids;
}

/** argv of a process, or null. Empty for kernel threads and zombies. */
export function readCmdline(pid: number): string[] | null {
  try {
    const raw = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    const parts = raw.split('\0');
    if (parts.length > 0 && parts[parts.length - 1] === '') parts.pop();
    return parts;
  } catch {
    return null;
  }
}

/** Identity of the PID namespace a process lives in (e.g. "pid:[4026532177]"), or null. */
export function readPidNamespace(pid: number | 'self'): string | null {
  try {
    return fs.readlinkSync(`/proc/${pid}/ns/pid`);
  } catch {
    return null;
  }
}

/** SIGKILL that ignores "no such process" (the target may exit on its own at any moment). */
export function killQuietly(pid: number): boolean {
  try {
    process.kill(pid, 'SIGKILL');
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw err;
  }
}
