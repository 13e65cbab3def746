// The short fuzz run as part of `npm test`: load-tests/fuzz.ts --short (5 000 hostile inputs at
// every door of two replicas, slow-loris on each port) must exit 0: no replica crashed, no
// anonymous call let in, memory back within 10 %, every well-formed request still served. It runs
// as its own process, exactly as `npm run fuzz -- --short`; its report is printed whole.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../harness/cluster.ts';

describe('fuzz (short)', () => {
  it('5 000 hostile inputs leave both replicas up, closed to anonymous calls, bounded and serving', { timeout: 600_000 }, async () => {
    const proc = spawn(process.execPath, [path.join(repoRoot, 'load-tests/fuzz.ts'), '--short'], {
      cwd: repoRoot,
      stdio: ['ignore', 'pipe', 'pipe'],
      // A hung run is ended (SIGTERM) inside the test's own time, not left behind it.
      timeout: 580_000,
    });
    let report = '';
    proc.stdout.on('data', (c: Buffer) => (report += c.toString()));
    proc.stderr.on('data', (c: Buffer) => (report += c.toString()));
    const code = await new Promise<number | null>((resolve) => proc.on('close', (c) => resolve(c)));
    console.log(report);
    expect(code, `fuzz --short exited ${code}; its report:\n${report}`).toBe(0);
  });
});
