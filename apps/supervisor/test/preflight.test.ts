// Preflight: the checks the supervisor runs before starting anything.
import { describe, expect, it } from 'vitest';
import { preflight } from '../src/preflight.ts';

describe('preflight', () => {
  const env = { PATH: '/usr/bin:/bin' };
  it('accepts runnable commands', () => {
    expect(preflight('sh', '/', env)).toEqual({ ok: true });
    expect(preflight('/bin/sh', '/', env)).toEqual({ ok: true });
    expect(preflight('./sh', '/bin', env)).toEqual({ ok: true });
  });
  it('reports like a shell', () => {
    expect(preflight('nope-xyz', '/', env)).toEqual({ ok: false, exitCode: 127, message: 'nope-xyz: command not found' });
    expect(preflight('/nope/xyz', '/', env)).toEqual({ ok: false, exitCode: 127, message: '/nope/xyz: No such file or directory' });
    expect(preflight('/tmp', '/', env)).toEqual({ ok: false, exitCode: 126, message: '/tmp: Is a directory' });
    expect(preflight('sh', '/nope', env)).toEqual({ ok: false, exitCode: 126, message: 'sh: /nope: No such file or directory' });
    expect(preflight('', '/', env)).toMatchObject({ ok: false, exitCode: 127 });
    expect(preflight('/etc/passwd/x', '/', env)).toEqual({ ok: false, exitCode: 126, message: '/etc/passwd/x: Not a directory' });
    // PATH entries that miss (absent, or through a file) are passed over; one that exists but
    // cannot be run is the answer only when nothing later on PATH can.
    expect(preflight('sh', '/', { PATH: '/nonexistent:/etc/passwd:/bin' })).toEqual({ ok: true });
    expect(preflight('passwd', '/', { PATH: '/nonexistent:/etc' })).toEqual({ ok: false, exitCode: 126, message: 'passwd: Permission denied' });
    // The exec's PATH decides, not the supervisor's.
    expect(preflight('sh', '/', { PATH: '/nonexistent' })).toMatchObject({ ok: false, exitCode: 127 });
  });
});
