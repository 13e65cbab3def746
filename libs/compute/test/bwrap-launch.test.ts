// The bwrap command line and sandbox environment, as pure data.
import { describe, expect, it } from 'vitest';
import { buildBwrapArgs, buildSandboxEnv, hostnameFor, identityFilesFor, SUPERVISOR_CAPABILITIES, tmpfsSizes } from '../src/bwrap-launch.ts';
import { buildContainerEnv } from '../src/docker/launch.ts';
import { SUPERVISOR_NODE_FLAGS, type LaunchSpec } from '../src/driver.ts';

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
      { name: 'var', kind: 'dir' },
      { name: 'sys', kind: 'dir' },
      { name: 'root', kind: 'dir' },
      { name: 'home', kind: 'dir' },
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
    workloadCgroups: [
      { name: 'memory', hostDir: '/sys/fs/cgroup/memory/sandgate/sb-1234567890/workload' },
      { name: 'cpu,cpuacct', hostDir: '/sys/fs/cgroup/cpu,cpuacct/sandgate/sb-1234567890/workload' },
    ],
    cgroupTrees: [{ parentDir: '/sys/fs/cgroup/memory/sandgate', sandboxDir: '/sys/fs/cgroup/memory/sandgate/sb-1234567890' }],
    identityFiles: { passwd: '/var/lib/sandgate/sandboxes/sb-1234567890/passwd', group: '/var/lib/sandgate/sandboxes/sb-1234567890/group' },
    gatewayCaFile: '/var/lib/sandgate/sandboxes/sb-1234567890/gateway-ca.pem',
    compileCacheDir: '/var/lib/sandgate/compile-cache',
    environmentFile: '/var/lib/sandgate/sandboxes/sb-1234567890/environment.json',
  });
  const joined = args.join(' ');

  it('hands the supervisor the sandbox\'s variables as a read-only file, after the state mask', () => {
    expect(joined).toContain('--ro-bind /var/lib/sandgate/sandboxes/sb-1234567890/environment.json /run/sandgate/environment.json');
    expect(joined.indexOf('environment.json /run/sandgate')).toBeGreaterThan(joined.indexOf('--tmpfs /var/lib/sandgate'));
  });

  it('shows the supervisors\' compile cache read-only, after the state mask', () => {
    expect(joined).toContain('--ro-bind /var/lib/sandgate/compile-cache /run/sandgate/compile-cache');
    expect(joined).not.toMatch(/--bind \/var\/lib\/sandgate\/compile-cache/);
    expect(joined.indexOf('compile-cache /run/sandgate')).toBeGreaterThan(joined.indexOf('--tmpfs /var/lib/sandgate'));
  });

  it('hands the supervisor the gateway\'s CA read-only when the gateway serves TLS', () => {
    expect(joined).toContain('--ro-bind /var/lib/sandgate/sandboxes/sb-1234567890/gateway-ca.pem /run/sandgate/gateway-ca.pem');
    // After the state mask, or the source would be hidden.
    expect(joined.indexOf('gateway-ca.pem /run/sandgate')).toBeGreaterThan(joined.indexOf('--tmpfs /var/lib/sandgate'));
  });

  it('isolates pid/ipc/uts, never shares or ties to a parent, and keeps only the supervisor\'s capabilities', () => {
    expect(args.slice(0, 5)).toEqual(['--unshare-pid', '--unshare-ipc', '--unshare-uts', '--hostname', 'sandbox-sb-12345']);
    // The supervisor stays in the host's network namespace (it dials the gateway on loopback);
    // its workload gets its own, made by the supervisor.
    expect(args).not.toContain('--unshare-net');
    expect(args).not.toContain('--share-net');
    expect(args).not.toContain('--unshare-all');
    expect(args).not.toContain('--die-with-parent');
    expect(args.slice(5, 7)).toEqual(['--cap-drop', 'ALL']);
    const added = args.flatMap((a, i) => (a === '--cap-add' ? [args[i + 1]] : []));
    expect(added).toEqual([
      'CAP_SYS_ADMIN',
      'CAP_NET_ADMIN',
      'CAP_SETUID',
      'CAP_SETGID',
      'CAP_KILL',
      'CAP_SYS_PTRACE',
      'CAP_DAC_OVERRIDE',
    ]);
    expect(added).toEqual([...SUPERVISOR_CAPABILITIES]);
    // All of them before anything else, so no later argument can be taken for one.
    expect(args.lastIndexOf('--cap-add')).toBe(5 + 2 * SUPERVISOR_CAPABILITIES.length);
  });

  it('binds each workload cgroup writable under /run/sandgate/cgroup, and the generated passwd/group read-only', () => {
    expect(joined).toContain('--bind /sys/fs/cgroup/memory/sandgate/sb-1234567890/workload /run/sandgate/cgroup/memory');
    expect(joined).toContain('--bind /sys/fs/cgroup/cpu,cpuacct/sandgate/sb-1234567890/workload /run/sandgate/cgroup/cpu,cpuacct');
    expect(joined).toContain('--ro-bind /var/lib/sandgate/sandboxes/sb-1234567890/passwd /etc/passwd');
    expect(joined).toContain('--ro-bind /var/lib/sandgate/sandboxes/sb-1234567890/group /etc/group');
    // After the host's /run is replaced and the state masked (sources are read from the host).
    expect(joined.indexOf('/run/sandgate/cgroup/memory')).toBeGreaterThan(joined.indexOf('--tmpfs /var/lib/sandgate'));
    expect(joined.indexOf('/etc/passwd')).toBeGreaterThan(joined.indexOf('--ro-bind /usr /usr'));
    expect(joined.indexOf('--remount-ro /')).toBeGreaterThan(joined.indexOf('/run/sandgate/cgroup/cpu,cpuacct'));
  });

  it('masks every sandbox\'s cgroups under /sys but its own', () => {
    expect(joined).toContain(
      '--tmpfs /sys/fs/cgroup/memory/sandgate --ro-bind /sys/fs/cgroup/memory/sandgate/sb-1234567890 /sys/fs/cgroup/memory/sandgate/sb-1234567890',
    );
    expect(joined.indexOf('--tmpfs /sys/fs/cgroup/memory/sandgate')).toBeGreaterThan(joined.indexOf('--ro-bind /sys /sys'));
  });

  it('reproduces the host root read-only, except the private top-level directories', () => {
    expect(joined).toContain('--ro-bind /usr /usr');
    expect(joined).toContain('--ro-bind /.dockerenv /.dockerenv');
    expect(joined).toContain('--symlink usr/bin /bin');
    // Homes are empty, whatever their modes on the host.
    expect(joined).toContain('--perms 0700 --tmpfs /root');
    expect(joined).toContain('--perms 0755 --tmpfs /home');
    expect(joined).not.toContain('--ro-bind /root');
    expect(joined).not.toContain('--ro-bind /home');
    for (const p of ['/proc /proc', '/run /run', '/tmp /tmp', '/sandbox /sandbox', '/weird.sock']) {
      expect(joined).not.toContain(`--ro-bind ${p}`);
    }
    expect(joined).toContain('--dev /dev --perms 1777 --size 67108864 --tmpfs /dev/shm --proc /proc --perms 1777 --size 1073741824 --tmpfs /tmp --tmpfs /run');
    expect(joined).toContain('--tmpfs /var/lib/sandgate --bind /var/lib/sandgate/sandboxes/sb-1234567890/work /sandbox');
    expect(joined).toContain('--ro-bind /var/lib/sandgate/sandboxes/sb-1234567890/credential /run/sandgate/credential');
    expect(joined).toContain('--remount-ro / --chdir /sandbox');
  });

  it("shows an empty read-only /var (links, /var/tmp on /tmp, the package database), never the host's", () => {
    expect(joined).not.toContain('--ro-bind /var /var');
    expect(joined).toContain(
      '--perms 0755 --tmpfs /var --symlink ../run /var/run --symlink ../run/lock /var/lock --symlink ../tmp /var/tmp ' +
        '--ro-bind-try /var/lib/dpkg /var/lib/dpkg',
    );
    expect(joined).toContain('--remount-ro /var --remount-ro / --chdir /sandbox');
  });

  it('binds the supervisor runtime read-only over the private /tmp and /run, under the state mask', () => {
    expect(joined).toContain(
      '--tmpfs /run --ro-bind-try /run/systemd/resolve /run/systemd/resolve ' +
        '--ro-bind /opt/node/bin/node /opt/node/bin/node --ro-bind /tmp/app /tmp/app --tmpfs /var/lib/sandgate',
    );
  });

  it('ends with node, the supervisor entry, -- and the command verbatim', () => {
    expect(args.slice(-(5 + SUPERVISOR_NODE_FLAGS.length))).toEqual(['/usr/local/bin/node', ...SUPERVISOR_NODE_FLAGS, '/tmp/app/apps/supervisor/src/main.ts', '--', '--looks-like-an-option', 'x']);
    // The idle supervisor's last-resort collection needs gc exposed (apps/supervisor/src/memory-trim.ts).
    expect(SUPERVISOR_NODE_FLAGS).toContain('--expose-gc');
    expect(joined).not.toContain('top-secret');
  });
});

describe('buildSandboxEnv', () => {
  it('is a fixed PATH and HOME plus the SANDGATE_* contract (and Node\'s compile cache): nothing of the sandbox\'s own environment (bwrap runs as root)', () => {
    expect(buildSandboxEnv(spec)).toEqual({
      PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
      HOME: '/sandbox',
      SANDGATE_GATEWAY: '127.0.0.1:7443,127.0.0.1:7444',
      SANDGATE_SANDBOX_ID: 'sb-1234567890',
      SANDGATE_CREDENTIAL_FILE: '/run/sandgate/credential',
      SANDGATE_ENVIRONMENT_FILE: '/run/sandgate/environment.json',
      SANDGATE_MAIN_TTY: '0',
      SANDGATE_LOG_LEVEL: 'warn',
      SANDGATE_DEBUG_BREAK: '',
      SANDGATE_DEBUG_UNSAFE: '0',
      SANDGATE_POLICY: '',
      SANDGATE_GATEWAY_CA_FILE: '',
      SANDGATE_GATEWAY_TLS_NAME: '',
      SANDGATE_COMPILE_CACHE: '',
      NODE_COMPILE_CACHE: '',
      SANDGATE_DEFER_MAIN: '0',
    });
    // The attack: a caller's LD_PRELOAD would load a library of its choosing into bwrap, as root on the host.
    expect(buildSandboxEnv({ ...spec, environment: { LD_PRELOAD: '/tmp/x.so', NODE_OPTIONS: '--require /sandbox/x.js' } })).not.toHaveProperty('LD_PRELOAD');
    expect(buildSandboxEnv({ ...spec, environment: { NODE_OPTIONS: '--require /sandbox/x.js' } })).not.toHaveProperty('NODE_OPTIONS');
    expect(buildSandboxEnv({ ...spec, environment: {}, tty: true })).toMatchObject({
      PATH: expect.stringContaining('/usr/bin'),
      SANDGATE_MAIN_TTY: '1',
    });
  });

  it('carries the workload isolation the driver hands over', () => {
    const workload = { uid: 10001, gid: 10002, isolateNetwork: true, cgroupDirs: ['/run/sandgate/cgroup/memory', '/run/sandgate/cgroup/pids'] };
    expect(buildSandboxEnv(spec, workload)).toMatchObject({
      SANDGATE_WORKLOAD_UID: '10001',
      SANDGATE_WORKLOAD_GID: '10002',
      SANDGATE_NETWORK_ISOLATION: '1',
      SANDGATE_WORKLOAD_CGROUPS: '/run/sandgate/cgroup/memory:/run/sandgate/cgroup/pids',
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
      // How each driver confines the workload is its own (uid, cgroups); the rest is shared.
      const own = new Set(['PATH', 'HOME', 'SANDGATE_WORKLOAD_UID', 'SANDGATE_WORKLOAD_GID', 'SANDGATE_NETWORK_ISOLATION', 'SANDGATE_WORKLOAD_CGROUPS']);
      const shared = (env: Record<string, string>) => Object.fromEntries(Object.entries(env).filter(([k]) => !own.has(k)));
      expect(shared(local)).toEqual(shared(docker));
      for (const k of ['PATH', 'HOME'] as const) {
        if (docker[k] !== undefined) expect(local[k]).toBe(docker[k]);
      }
      expect(local.SANDGATE_MAIN_TTY).toBe(s.tty ? '1' : '0');
    }
    expect(buildSandboxEnv({ ...spec, debugBreaks: 'exec-kill' })).toMatchObject({ SANDGATE_DEBUG_BREAK: 'exec-kill', SANDGATE_DEBUG_UNSAFE: '1' });
  });

  it('names the workload\'s user `sandbox` in passwd and group, replacing any entry with its name or id', () => {
    const passwd = 'root:x:0:0:root:/root:/bin/bash\nsandbox:x:500:500::/home/sandbox:/bin/sh\nbob:x:10001:10001::/home/bob:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/bash\n';
    const group = 'root:x:0:\nbob:x:10001:\nstaff:x:50:alice\n';
    expect(identityFilesFor(passwd, group, 10001, 10001)).toEqual({
      passwd:
        'root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/bash\nsandbox:x:10001:10001:sandgate workload:/sandbox:/bin/sh\n',
      group: 'root:x:0:\nstaff:x:50:alice\nsandbox:x:10001:\n',
    });
  });

  it('names the host after the first 8 characters of the id', () => {
    expect(hostnameFor('abcdefghijk')).toBe('sandbox-abcdefgh');
    expect(hostnameFor('ab')).toBe('sandbox-ab');
  });

  it('sizes /tmp and /dev/shm to a quarter of a memory limit each, so filling both leaves half to run in', () => {
    expect(tmpfsSizes(undefined)).toEqual({ tmp: 1024 * 2 ** 20, shm: 64 * 2 ** 20 });
    expect(tmpfsSizes(64 * 2 ** 20)).toEqual({ tmp: 16 * 2 ** 20, shm: 16 * 2 ** 20 });
    expect(tmpfsSizes(8 * 2 ** 30)).toEqual({ tmp: 1024 * 2 ** 20, shm: 64 * 2 ** 20 });
    expect(tmpfsSizes(100_000_001).tmp % 4096).toBe(0);
  });
});
