// The bwrap command line and sandbox environment, as pure data.
import { describe, expect, it } from 'vitest';
import { buildBwrapArgs, buildSandboxEnv, hostnameFor } from '../src/bwrap-launch.ts';
import { buildContainerEnv } from '../src/docker/launch.ts';
import type { LaunchSpec } from '../src/driver.ts';

const spec: LaunchSpec = {
  sandboxId: 'sb-1234567890',
  command: ['--looks-like-an-option', 'x'],
  tty: false,
  environment: { FOO: 'bar', PATH: '/custom/bin', SANDGATE_CREDENTIAL_FILE: '/evil' },
  image: '',
  gatewayEndpoints: '127.0.0.1:7443,127.0.0.1:7444',
  credential: 'top-secret',
  logLevel: 'warn',
};

describe('buildBwrapArgs', () => {
  const args = buildBwrapArgs({
    sandboxId: spec.sandboxId,
    stateRoot: '/var/lib/sandgate',
    sandboxDir: '/var/lib/sandgate/sandboxes/sb-1234567890',
    rootEntries: [
      { name: 'usr', kind: 'dir' },
      { name: 'bin', kind: 'symlink', target: 'usr/bin' },
      { name: 'proc', kind: 'dir' },
      { name: 'run', kind: 'dir' },
      { name: 'tmp', kind: 'dir' },
      { name: 'sandbox', kind: 'dir' },
      { name: 'weird.sock', kind: 'other' },
      { name: '.dockerenv', kind: 'file' },
    ],
    nodePath: '/usr/local/bin/node',
    supervisorEntry: '/tmp/app/apps/supervisor/src/main.ts',
    runtimePaths: ['/tmp/app', '/opt/node/bin/node', '/tmp/app'],
    command: spec.command,
  });
  const joined = args.join(' ');

  it('isolates pid/ipc/uts but not the network, drops capabilities and never ties to a parent', () => {
    expect(args.slice(0, 5)).toEqual(['--unshare-pid', '--unshare-ipc', '--unshare-uts', '--hostname', 'sandbox-sb-12345']);
    expect(joined).toContain('--cap-drop ALL');
    expect(args).not.toContain('--unshare-net');
    expect(args).not.toContain('--unshare-all');
    expect(args).not.toContain('--die-with-parent');
  });

  it('reproduces the host root read-only, except the private top-level directories', () => {
    expect(joined).toContain('--ro-bind /usr /usr');
    expect(joined).toContain('--ro-bind /.dockerenv /.dockerenv');
    expect(joined).toContain('--symlink usr/bin /bin');
    for (const p of ['/proc /proc', '/run /run', '/tmp /tmp', '/sandbox /sandbox', '/weird.sock']) {
      expect(joined).not.toContain(`--ro-bind ${p}`);
    }
    expect(joined).toContain('--dev /dev --proc /proc --perms 1777 --tmpfs /tmp --tmpfs /run');
    expect(joined).toContain('--tmpfs /var/lib/sandgate --bind /var/lib/sandgate/sandboxes/sb-1234567890/work /sandbox');
    expect(joined).toContain('--ro-bind /var/lib/sandgate/sandboxes/sb-1234567890/credential /run/sandgate/credential');
    expect(joined).toContain('--remount-ro / --chdir /sandbox');
  });

  it('binds the supervisor runtime read-only over the private /tmp and /run, under the state mask', () => {
    expect(joined).toContain(
      '--tmpfs /run --ro-bind-try /run/systemd/resolve /run/systemd/resolve ' +
        '--ro-bind /opt/node/bin/node /opt/node/bin/node --ro-bind /tmp/app /tmp/app --tmpfs /var/lib/sandgate',
    );
  });

  it('ends with node, the supervisor entry, -- and the command verbatim', () => {
    expect(args.slice(-5)).toEqual(['/usr/local/bin/node', '/tmp/app/apps/supervisor/src/main.ts', '--', '--looks-like-an-option', 'x']);
    expect(joined).not.toContain('top-secret');
  });
});

describe('buildSandboxEnv', () => {
  it('is the sandbox environment plus the SANDGATE_* contract, which cannot be overridden', () => {
    expect(buildSandboxEnv(spec)).toEqual({
      FOO: 'bar',
      PATH: '/custom/bin',
      HOME: '/sandbox',
      SANDGATE_GATEWAY: '127.0.0.1:7443,127.0.0.1:7444',
      SANDGATE_SANDBOX_ID: 'sb-1234567890',
      SANDGATE_CREDENTIAL_FILE: '/run/sandgate/credential',
      SANDGATE_MAIN_TTY: '0',
      SANDGATE_LOG_LEVEL: 'warn',
      SANDGATE_DEBUG_BREAK: '',
      SANDGATE_DEBUG_UNSAFE: '0',
    });
    expect(buildSandboxEnv({ ...spec, environment: {}, tty: true })).toMatchObject({
      PATH: expect.stringContaining('/usr/bin'),
      SANDGATE_MAIN_TTY: '1',
    });
  });

  it('is the docker driver\'s environment plus the PATH and HOME an image would supply', () => {
    for (const s of [
      spec,
      { ...spec, tty: true, logLevel: '', debugBreaks: 'exec-kill' },
      { ...spec, environment: { HOME: '/root', PATH: '/x', SANDGATE_MAIN_TTY: '1', SANDGATE_DEBUG_UNSAFE: '1' } },
    ]) {
      const local = buildSandboxEnv(s);
      const docker = Object.fromEntries(buildContainerEnv(s).map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));
      const { PATH: _p, HOME: _h, ...localRest } = local;
      const { PATH: _dp, HOME: _dh, ...dockerRest } = docker;
      expect(localRest).toEqual(dockerRest);
      for (const k of ['PATH', 'HOME'] as const) {
        if (docker[k] !== undefined) expect(local[k]).toBe(docker[k]);
      }
      expect(local.SANDGATE_MAIN_TTY).toBe(s.tty ? '1' : '0');
    }
    expect(buildSandboxEnv({ ...spec, debugBreaks: 'exec-kill' })).toMatchObject({ SANDGATE_DEBUG_BREAK: 'exec-kill', SANDGATE_DEBUG_UNSAFE: '1' });
  });

  it('names the host after the first 8 characters of the id', () => {
    expect(hostnameFor('abcdefghijk')).toBe('sandbox-abcdefgh');
    expect(hostnameFor('ab')).toBe('sandbox-ab');
  });
});
