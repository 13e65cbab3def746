// What the docker driver's tests do from inside a sandbox container.
import { spawnSync } from 'node:child_process';
import { NODE_IN_CONTAINER } from '../src/docker/launch.ts';

/**
 * Tries a TCP connection from inside the container as `user`, with the bind-mounted node binary;
 * returns 'connected', an errno such as ECONNREFUSED, or 'timeout'.
 */
export function connectFrom(container: string, user: string, host: string, port: number, timeoutMs = 2_000): string {
  const script =
    `const s=require('net').connect({host:${JSON.stringify(host)},port:${port}});` +
    `const t=setTimeout(()=>{console.log('timeout');process.exit(0)},${timeoutMs});` +
    `s.on('connect',()=>{console.log('connected');process.exit(0)});` +
    `s.on('error',e=>{console.log(e.code||e.message);process.exit(0)});`;
  const r = spawnSync('docker', ['exec', '--user', user, container, NODE_IN_CONTAINER, '-e', script], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`probe in ${container} failed (${r.status}): ${r.stderr}`);
  return r.stdout.trim();
}
