// Defensive checks on everything the local driver turns into paths, argv or environment. The
// sandbox id becomes a directory name and handles come back from Redis, so neither is trusted.
import type { ComputeHandle, LaunchSpec } from './driver.ts';

const SANDBOX_ID = /^[A-Za-z0-9._-]{1,128}$/;

export function assertSandboxId(id: unknown): asserts id is string {
  // '.' and '..' match the character class but are not usable directory names.
  if (typeof id !== 'string' || !SANDBOX_ID.test(id) || id === '.' || id === '..') {
    throw new Error(`invalid sandbox id ${JSON.stringify(id)}: must match ${SANDBOX_ID.source}`);
  }
}

function assertNoNul(what: string, s: unknown): asserts s is string {
  if (typeof s !== 'string') throw new Error(`${what} must be a string`);
  if (s.includes('\0')) throw new Error(`${what} must not contain NUL`);
}

export function assertLaunchSpec(spec: LaunchSpec): void {
  assertSandboxId(spec.sandboxId);
  if (!Array.isArray(spec.command) || spec.command.length === 0) {
    throw new Error('command must be a non-empty argv array');
  }
  spec.command.forEach((a, i) => assertNoNul(`command[${i}]`, a));
  if (spec.environment === null || typeof spec.environment !== 'object') {
    throw new Error('environment must be an object');
  }
  for (const [k, v] of Object.entries(spec.environment)) {
    if (k === '' || k.includes('=') || k.includes('\0')) {
      throw new Error(`invalid environment variable name ${JSON.stringify(k)}`);
    }
    assertNoNul(`environment.${k}`, v);
  }
  assertNoNul('gatewayEndpoints', spec.gatewayEndpoints);
  if (spec.gatewayEndpoints.trim() === '') throw new Error('gatewayEndpoints must not be empty');
  assertNoNul('credential', spec.credential);
  if (spec.credential === '') throw new Error('credential must not be empty');
  assertNoNul('logLevel', spec.logLevel ?? '');
  if (spec.gatewayTls) {
    if (!spec.gatewayTls.ca.includes('-----BEGIN CERTIFICATE-----')) throw new Error('gatewayTls.ca must be a PEM certificate');
    assertNoNul('gatewayTls.serverName', spec.gatewayTls.serverName);
    if (!/^[A-Za-z0-9.:*-]+$/.test(spec.gatewayTls.serverName)) throw new Error(`gatewayTls.serverName ${JSON.stringify(spec.gatewayTls.serverName)} is not a host name`);
  }
}

/** The local driver's handle, as persisted by the gateway. */
export interface LocalHandle {
  /** pid of the outer bwrap process (in the host's PID namespace). */
  pid: number;
  /** Field 22 of /proc/<pid>/stat when the sandbox was created, to detect pid reuse. */
  startTime: number;
  /** The sandbox directory on the host (informational: the driver derives it from the id). */
  dir: string;
}

/** A handle from Redis or handle.json, or null if it is not one of ours. */
export function parseHandle(h: ComputeHandle | null | undefined): LocalHandle | null {
  if (h === null || h === undefined || typeof h !== 'object') return null;
  const { pid, startTime, dir } = h as Record<string, unknown>;
  if (typeof pid !== 'number' || !Number.isSafeInteger(pid) || pid <= 1) return null;
  if (typeof startTime !== 'number' || !Number.isSafeInteger(startTime) || startTime < 0) return null;
  return { pid, startTime, dir: typeof dir === 'string' ? dir : '' };
}
