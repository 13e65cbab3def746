// What `sandgate up` needs from the machine (redis-server for a private Redis, bwrap and ip for the
// local driver) and how it gets them: as root on Debian it installs them with apt-get, so
// `npm install && npx sandgate up` is all a fresh machine needs; anywhere else it says the one
// command to run. Deciding is pure (planPrerequisites) so it is tested without touching packages.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { findOnPath } from './redis-server.ts';

export interface Host {
  isRoot: boolean;
  /** Debian or a derivative: apt-get installs Debian package names. */
  debianLike: boolean;
  has(bin: string): boolean;
  dockerAnswers(): boolean;
}

export interface Wants {
  /** No --redis URL: `up` starts its own redis-server. */
  privateRedis: boolean;
  /** The driver asked for, or 'auto' to take the best this machine can run. */
  driver: string;
}

export interface MissingPackage {
  package: 'redis-server' | 'bubblewrap' | 'iproute2';
  bin: 'redis-server' | 'bwrap' | 'ip';
  why: string;
}

export type Plan =
  | { action: 'none'; driver: string }
  | { action: 'install'; driver: string; missing: MissingPackage[] }
  | { action: 'refuse'; missing: MissingPackage[]; message: string };

export const APT_INSTALL = ['apt-get', 'install', '-y', '--no-install-recommends'];

const REDIS: MissingPackage = { package: 'redis-server', bin: 'redis-server', why: 'for the private Redis: no --redis URL given' };
const BWRAP: MissingPackage = { package: 'bubblewrap', bin: 'bwrap', why: 'for the local sandbox driver' };
// The supervisor brings up the loopback of each sandbox's own network namespace with `ip`. (It
// also runs unshare, nsenter and setpriv, from util-linux, which every Debian system has.)
const IPROUTE: MissingPackage = { package: 'iproute2', bin: 'ip', why: "for each sandbox's own network" };

export function planPrerequisites(wants: Wants, host: Host): Plan {
  const canInstall = host.isRoot && host.debianLike;
  const missing: MissingPackage[] = [];
  if (wants.privateRedis && !host.has('redis-server')) missing.push(REDIS);

  let driver = wants.driver;
  if (driver === 'auto') {
    // The local driver is the default; Docker stands in only where bubblewrap cannot be had.
    if (host.has('bwrap') || canInstall) driver = 'local';
    else if (host.has('docker') && host.dockerAnswers()) driver = 'docker';
    else driver = 'local';
  }
  if (driver === 'local' && !host.has('bwrap')) missing.push(BWRAP);
  if (driver === 'local' && !host.has('ip')) missing.push(IPROUTE);

  if (missing.length === 0) return { action: 'none', driver };
  if (canInstall) return { action: 'install', driver, missing };
  return { action: 'refuse', missing, message: refusal(missing, wants, host) };
}

function refusal(missing: MissingPackage[], wants: Wants, host: Host): string {
  const what = missing.map((m) => `${m.bin} (${m.why})`).join(' and ');
  const packages = missing.map((m) => m.package).join(' ');
  const command = host.debianLike
    ? `${host.isRoot ? '' : 'sudo '}${[...APT_INSTALL, packages].join(' ')}`
    : `install ${packages} with this system's package manager`;
  const alternatives: string[] = [];
  if (missing.includes(REDIS)) alternatives.push('pass --redis URL to use an existing Redis');
  if (missing.includes(BWRAP) && wants.driver === 'auto') alternatives.push('start a Docker engine to use the docker driver');
  return (
    `sandgate up needs ${what}, not found on PATH. Run:\n  ${command}\n` +
    (alternatives.length ? `(or ${alternatives.join(', or ')})\n` : '')
  );
}

/** What `up` says on stderr before installing. */
export function installNotice(missing: MissingPackage[]): string {
  return `sandgate up: installing ${missing.map((m) => `${m.package} (${m.why})`).join(' and ')} with apt-get\n`;
}

/** apt-get failed because it has no (or outdated) package lists: `apt-get update` fixes that. */
export function needsListsUpdate(aptOutput: string): boolean {
  return /Unable to locate package|has no installation candidate|is not available, but is referred to|Unable to fetch some archives|Failed to fetch|try running apt-get update/i.test(aptOutput);
}

export interface AptResult {
  status: number | null;
  output: string;
}

export type AptRunner = (args: string[]) => AptResult;

/** Runs apt-get non-interactively with the CLI's environment. */
export const aptRunner = (env: Readonly<Record<string, string | undefined>>): AptRunner => (args) => {
  const r = spawnSync(args[0]!, args.slice(1), {
    env: { ...env, DEBIAN_FRONTEND: 'noninteractive' },
    stdio: ['ignore', 'pipe', 'pipe'],
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  });
  return { status: r.error ? null : r.status, output: `${r.stdout ?? ''}${r.stderr ?? ''}${r.error ? String(r.error) : ''}` };
};

const tail = (output: string) => output.trim().split('\n').slice(-5).join('\n  ');

/**
 * Installs the packages with apt-get, running `apt-get update` first only when the install
 * fails for want of package lists. Throws with apt's last lines when it cannot.
 */
export function aptInstall(packages: string[], log: (line: string) => void, run: AptRunner): void {
  const install = [...APT_INSTALL, ...packages];
  let result = run(install);
  if (result.status !== 0 && needsListsUpdate(result.output)) {
    log('sandgate up: apt-get has no usable package lists; running apt-get update first\n');
    const update = run(['apt-get', 'update']);
    if (update.status !== 0) throw new Error(`apt-get update failed:\n  ${tail(update.output)}`);
    result = run(install);
  }
  if (result.status !== 0) throw new Error(`${install.join(' ')} failed:\n  ${tail(result.output)}`);
}

/** The facts about this machine planPrerequisites needs. */
export function thisHost(dockerAnswers: () => boolean, pathVar: string | undefined): Host {
  const has = (bin: string) => findOnPath(bin, pathVar) !== undefined;
  return {
    isRoot: process.getuid?.() === 0,
    debianLike: existsSync('/etc/debian_version') || has('apt-get'),
    has,
    dockerAnswers,
  };
}
