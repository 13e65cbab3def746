// sandgate up: its banner, its private redis-server, and what it installs (or asks for) on a
// machine lacking redis-server or bwrap. Decisions only: nothing here installs or removes a package.
import { describe, expect, it } from 'vitest';
import { redactRedisUrl, upBanner } from '../src/commands/up.ts';
import { REDIS_NOT_FOUND, findOnPath, redisServerArgs } from '../src/redis-server.ts';
import { aptInstall, installNotice, needsListsUpdate, planPrerequisites, type AptResult, type Host } from '../src/prerequisites.ts';

function host(opts: { root?: boolean; debian?: boolean; bins?: string[]; docker?: boolean }): Host {
  const bins = new Set(opts.bins ?? []);
  return {
    isRoot: opts.root ?? true,
    debianLike: opts.debian ?? true,
    has: (bin) => bins.has(bin),
    dockerAnswers: () => opts.docker ?? false,
  };
}

const privateRedis = { privateRedis: true, driver: 'auto' };

describe('up', () => {
  it('prints the endpoint and a first command', () => {
    expect(upBanner({ grpcAddress: '127.0.0.1:8080', httpUrl: 'http://127.0.0.1:8081' }, 'private, 127.0.0.1:6000')).toBe(
      'sandgate is up: gRPC 127.0.0.1:8080, HTTP http://127.0.0.1:8081 (redis: private, 127.0.0.1:6000)\n' +
        'HTTP API: http://127.0.0.1:8081/v1 (OpenAPI http://127.0.0.1:8081/openapi.json, docs http://127.0.0.1:8081/docs)\n' +
        'try:  sandgate sandbox create --name demo --detach -- sleep infinity && sandgate sandbox exec demo -- echo hi\n',
    );
    expect(upBanner({ grpcAddress: '127.0.0.1:9000', httpUrl: 'http://127.0.0.1:9001' }, 'x')).toContain(
      'try:  export SANDGATE_GATEWAY=127.0.0.1:9000; sandgate sandbox create',
    );
  });

  it('with the client config file written, the tour needs no flag; with one left alone, says which to use', () => {
    const replica = { grpcAddress: '127.0.0.1:9000', httpUrl: 'https://127.0.0.1:9001' };
    const written = upBanner(replica, 'x', { written: true, path: '/h/.config/sandgate/config.json', url: 'https://127.0.0.1:9000' });
    expect(written).toContain('sandgate is up: gRPC https://127.0.0.1:9000, HTTP https://127.0.0.1:9001');
    expect(written).toContain('try:  sandgate sandbox create --name demo');
    expect(written).not.toMatch(/sgt_|token:/);
    const kept = upBanner(replica, 'x', { written: false, path: '/h/c.json', ownPath: '/s/client-config.json', reason: 'it names another gateway, https://prod:443', url: 'https://127.0.0.1:9000' });
    expect(kept).toContain('try:  export SANDGATE_CONFIG=/s/client-config.json; sandgate sandbox create');
  });

  it('never prints a Redis password', () => {
    expect(redactRedisUrl('redis://user:secret@r:6379/0')).toBe('redis://user:***@r:6379/0');
    expect(redactRedisUrl('redis://r:6379')).toBe('redis://r:6379');
  });

  it('runs redis-server with persistence on loopback, its users from an ACL file (no password in its argv)', () => {
    expect(redisServerArgs(6001, '/s/redis', '/s/redis/users.acl')).toEqual([
      '--port', '6001', '--dir', '/s/redis', '--save', '60', '1', '--appendonly', 'yes', '--daemonize', 'no', '--bind', '127.0.0.1', '--protected-mode', 'yes',
      '--aclfile', '/s/redis/users.acl',
    ]);
  });

  it('looks redis-server up on PATH', () => {
    expect(findOnPath('sh', '/nonexistent:/bin:/usr/bin')).toMatch(/\/sh$/);
    expect(findOnPath('redis-server', '/nonexistent')).toBeUndefined();
    expect(REDIS_NOT_FOUND).toBe('redis-server not found on PATH: install it (apt-get install redis-server) or pass --redis URL');
  });
});

describe('sandgate up prerequisites', () => {
  it('needs nothing when both are there, and picks the local driver', () => {
    expect(planPrerequisites(privateRedis, host({ bins: ['redis-server', 'bwrap', 'ip'] }))).toEqual({ action: 'none', driver: 'local' });
  });

  it('as root on Debian installs what is missing, both at once', () => {
    const plan = planPrerequisites(privateRedis, host({ bins: [] }));
    expect(plan.action).toBe('install');
    if (plan.action !== 'install') return;
    expect(plan.driver).toBe('local');
    expect(plan.missing.map((m) => m.package)).toEqual(['redis-server', 'bubblewrap', 'iproute2']);
    expect(installNotice(plan.missing)).toBe(
      "sandgate up: installing redis-server (for the private Redis: no --redis URL given) and bubblewrap (for the local sandbox driver) and iproute2 (for each sandbox's own network) with apt-get\n",
    );
  });

  it('installs only redis-server when bwrap is there, only bubblewrap when redis-server is', () => {
    const a = planPrerequisites(privateRedis, host({ bins: ['bwrap', 'ip'] }));
    const b = planPrerequisites(privateRedis, host({ bins: ['redis-server', 'ip'] }));
    expect(a.action === 'install' && a.missing.map((m) => m.package)).toEqual(['redis-server']);
    expect(b.action === 'install' && b.missing.map((m) => m.package)).toEqual(['bubblewrap']);
  });

  it('does not want redis-server with --redis URL, nor bwrap with --driver docker', () => {
    expect(planPrerequisites({ privateRedis: false, driver: 'docker' }, host({ bins: [] }))).toEqual({ action: 'none', driver: 'docker' });
    const plan = planPrerequisites({ privateRedis: false, driver: 'local' }, host({ bins: [] }));
    expect(plan.action === 'install' && plan.missing.map((m) => m.package)).toEqual(['bubblewrap', 'iproute2']);
    const ipOnly = planPrerequisites({ privateRedis: false, driver: 'local' }, host({ bins: ['bwrap'] }));
    expect(ipOnly.action === 'install' && ipOnly.missing.map((m) => m.package)).toEqual(['iproute2']);
  });

  it('as root on Debian prefers installing bubblewrap over falling back to Docker', () => {
    const plan = planPrerequisites(privateRedis, host({ bins: ['redis-server', 'docker'], docker: true }));
    expect(plan.action === 'install' && plan.driver).toBe('local');
  });

  it('elsewhere falls back to a running Docker engine when bwrap is missing', () => {
    expect(planPrerequisites(privateRedis, host({ root: false, bins: ['redis-server', 'docker'], docker: true }))).toEqual({ action: 'none', driver: 'docker' });
    // docker on PATH but no engine answering is no driver
    const plan = planPrerequisites(privateRedis, host({ root: false, bins: ['redis-server', 'docker'], docker: false }));
    expect(plan.action).toBe('refuse');
  });

  it('not root on Debian: prints the one sudo command and the alternatives', () => {
    const plan = planPrerequisites(privateRedis, host({ root: false, bins: ['ip'] }));
    expect(plan.action).toBe('refuse');
    if (plan.action !== 'refuse') return;
    expect(plan.message).toBe(
      'sandgate up needs redis-server (for the private Redis: no --redis URL given) and bwrap (for the local sandbox driver), not found on PATH. Run:\n' +
        '  sudo apt-get install -y --no-install-recommends redis-server bubblewrap\n' +
        '(or pass --redis URL to use an existing Redis, or start a Docker engine to use the docker driver)\n',
    );
  });

  it('root but not Debian: says what to install, without an apt-get command', () => {
    const plan = planPrerequisites({ privateRedis: true, driver: 'local' }, host({ debian: false, bins: ['bwrap', 'ip'] }));
    expect(plan.action).toBe('refuse');
    if (plan.action !== 'refuse') return;
    expect(plan.message).toBe(
      "sandgate up needs redis-server (for the private Redis: no --redis URL given), not found on PATH. Run:\n  install redis-server with this system's package manager\n(or pass --redis URL to use an existing Redis)\n",
    );
  });

  it('recognises apt-get failing for want of package lists', () => {
    expect(needsListsUpdate('E: Unable to locate package redis-server')).toBe(true);
    expect(needsListsUpdate("E: Package 'bubblewrap' has no installation candidate")).toBe(true);
    expect(needsListsUpdate('E: Failed to fetch http://deb.example/pool/main/r/redis_7.0.deb  404  Not Found')).toBe(true);
    expect(needsListsUpdate('E: Could not get lock /var/lib/dpkg/lock-frontend')).toBe(false);
  });

  it('runs apt-get update once, only when the install failed for want of lists', () => {
    const calls: string[] = [];
    const replies: AptResult[] = [
      { status: 100, output: 'E: Unable to locate package redis-server' },
      { status: 0, output: '' },
      { status: 0, output: '' },
    ];
    const log: string[] = [];
    aptInstall(['redis-server', 'bubblewrap'], (l) => log.push(l), (args) => (calls.push(args.join(' ')), replies.shift()!));
    expect(calls).toEqual([
      'apt-get install -y --no-install-recommends redis-server bubblewrap',
      'apt-get update',
      'apt-get install -y --no-install-recommends redis-server bubblewrap',
    ]);
    expect(log.join('')).toContain('running apt-get update first');

    const once: string[] = [];
    aptInstall(['bubblewrap'], () => undefined, (args) => (once.push(args.join(' ')), { status: 0, output: '' }));
    expect(once).toEqual(['apt-get install -y --no-install-recommends bubblewrap']);
  });

  it('reports apt-get failures with its last lines', () => {
    expect(() =>
      aptInstall(['bubblewrap'], () => undefined, () => ({ status: 100, output: 'Reading package lists...\nE: Could not get lock /var/lib/dpkg/lock-frontend' })),
    ).toThrow(/apt-get install -y --no-install-recommends bubblewrap failed:\n  Reading package lists...\n  E: Could not get lock/);
    expect(() =>
      aptInstall(['bubblewrap'], () => undefined, (args) =>
        args[1] === 'update' ? { status: 100, output: 'E: network unreachable' } : { status: 100, output: 'E: Unable to locate package bubblewrap' },
      ),
    ).toThrow(/apt-get update failed:\n  E: network unreachable/);
  });
});
