// The wire contract: names that other processes (and other versions) depend on, the supervisor
// environment round trip, and the loopback rule.
import { describe, expect, it } from 'vitest';
import {
  loopbackHost,
  MetadataKey,
  parseSandboxEnvironment,
  parseSupervisorEnvironment,
  renderSandboxEnvironment,
  SANDBOX_ENVIRONMENT_PATH,
  SANDBOX_CREDENTIAL_PATH,
  SandboxPhase,
  supervisorEnvironment,
  type SupervisorLaunch,
} from '../src/contract.ts';
import { messageType } from '../src/index.ts';

describe('names on the wire', () => {
  it('phase numbers are the .proto enum', () => {
    const proto = messageType('openshell.v1.SandboxStatus').lookupEnum('openshell.v1.SandboxPhase').values;
    for (const [name, value] of Object.entries(SandboxPhase)) expect(proto[`SANDBOX_PHASE_${name}`], name).toBe(value);
    expect(Object.keys(proto)).toHaveLength(Object.keys(SandboxPhase).length);
  });

  it('metadata keys are unchanged (older supervisors send these)', () => {
    expect(MetadataKey).toEqual({
      sandboxId: 'x-sandgate-sandbox-id',
      credential: 'x-sandgate-credential',
    });
  });
});

describe('supervisor environment', () => {
  const launch: SupervisorLaunch = {
    sandboxId: 'sb-1',
    gatewayEndpoints: 'a:1,b:2',
    credentialFile: SANDBOX_CREDENTIAL_PATH,
    tty: true,
    logLevel: 'debug',
    environment: { FOO: 'bar', SANDGATE_GATEWAY: 'spoofed', SANDGATE_DEBUG_UNSAFE: '1' },
  };

  it('writes every SANDGATE_* variable explicitly and none of the sandbox\'s own (they go in a file)', () => {
    expect(supervisorEnvironment(launch)).toEqual({
      SANDGATE_GATEWAY: 'a:1,b:2',
      SANDGATE_SANDBOX_ID: 'sb-1',
      SANDGATE_CREDENTIAL_FILE: '/run/sandgate/credential',
      // Empty here (no file named): the supervisor's own tests; every driver names one.
      SANDGATE_ENVIRONMENT_FILE: '',
      SANDGATE_MAIN_TTY: '1',
      SANDGATE_LOG_LEVEL: 'debug',
      SANDGATE_DEBUG_BREAK: '',
      SANDGATE_DEBUG_UNSAFE: '0',
      SANDGATE_POLICY: '',
      // Empty, not absent: an image's ENV must not turn TLS on or point it at another CA.
      SANDGATE_GATEWAY_CA_FILE: '',
      SANDGATE_GATEWAY_TLS_NAME: '',
      // Empty, not absent: an image's ENV must not point the supervisor at a cache it could write,
      // nor Node at its start (which reads NODE_COMPILE_CACHE before any of sandgate's code runs).
      SANDGATE_COMPILE_CACHE: '',
      NODE_COMPILE_CACHE: '',
      // 0, not absent: an image's ENV must not make a sandbox wait for a start_main that never comes.
      SANDGATE_DEFER_MAIN: '0',
    });
    expect(supervisorEnvironment({ ...launch, deferMain: true })).toMatchObject({ SANDGATE_DEFER_MAIN: '1' });
    // The attack: variables that act on the supervisor process (and on bwrap, root on the host).
    const hostile = supervisorEnvironment({
      ...launch,
      environmentFile: SANDBOX_ENVIRONMENT_PATH,
      environment: { LD_PRELOAD: '/sandbox/x.so', NODE_OPTIONS: '--require /sandbox/x.js', PATH: '/sandbox', NODE_COMPILE_CACHE: '/sandbox/cache' },
    });
    expect(Object.keys(hostile).filter((k) => !k.startsWith('SANDGATE_'))).toEqual(['NODE_COMPILE_CACHE']);
    expect(hostile.NODE_COMPILE_CACHE).toBe(''); // the driver's (none), never the caller's
    expect(hostile.SANDGATE_ENVIRONMENT_FILE).toBe('/run/sandgate/environment.json');
    expect(supervisorEnvironment({ ...launch, compileCacheDir: '/run/sandgate/compile-cache' })).toMatchObject({
      SANDGATE_COMPILE_CACHE: '/run/sandgate/compile-cache',
      NODE_COMPILE_CACHE: '/run/sandgate/compile-cache',
    });
    expect(supervisorEnvironment({ ...launch, tty: false, logLevel: '' })).toMatchObject({
      SANDGATE_MAIN_TTY: '0',
      SANDGATE_LOG_LEVEL: 'info',
    });
    expect(supervisorEnvironment({ ...launch, debugBreaks: 'exec-kill' })).toMatchObject({
      SANDGATE_DEBUG_BREAK: 'exec-kill',
      SANDGATE_DEBUG_UNSAFE: '1',
    });
  });

  it('round-trips through the supervisor\'s parser', () => {
    for (const l of [launch, { ...launch, tty: false, environment: {} }]) {
      expect(parseSupervisorEnvironment(supervisorEnvironment(l))).toEqual({
        endpoints: l.gatewayEndpoints.split(','),
        sandboxId: l.sandboxId,
        credentialFile: l.credentialFile,
        mainTty: l.tty,
        logLevel: l.logLevel,
        // Only the process environment's own (none here): the sandbox's variables are in the file.
        sandboxEnv: {},
        workload: undefined,
        policy: Buffer.alloc(0),
        gatewayTls: undefined,
        deferMain: false,
      });
    }
    expect(parseSupervisorEnvironment(supervisorEnvironment({ ...launch, deferMain: true })).deferMain).toBe(true);
  });

  it('keeps the supervisor\'s NODE_COMPILE_CACHE out of the base of the workload\'s environment', () => {
    const env = { ...supervisorEnvironment({ ...launch, compileCacheDir: '/run/sandgate/compile-cache' }), PATH: '/usr/bin', HOME: '/sandbox' };
    const parsed = parseSupervisorEnvironment(env);
    expect(parsed.compileCacheDir).toBe('/run/sandgate/compile-cache');
    expect(parsed.sandboxEnv).toEqual({ PATH: '/usr/bin', HOME: '/sandbox' });
    // A sandbox's own NODE_COMPILE_CACHE comes through its environment file, which the parser keeps.
    expect(parseSandboxEnvironment(renderSandboxEnvironment({ NODE_COMPILE_CACHE: '/tmp/mine' }))).toEqual({ NODE_COMPILE_CACHE: '/tmp/mine' });
  });

  it('hands the sandbox\'s variables over as a file the supervisor parses, SANDGATE_* names dropped', () => {
    const text = renderSandboxEnvironment({ FOO: 'bar', LD_PRELOAD: '/x.so', SANDGATE_GATEWAY: 'spoofed' });
    expect(parseSandboxEnvironment(text)).toEqual({ FOO: 'bar', LD_PRELOAD: '/x.so' });
    expect(parseSupervisorEnvironment(supervisorEnvironment({ ...launch, environmentFile: SANDBOX_ENVIRONMENT_PATH })).environmentFile).toBe(SANDBOX_ENVIRONMENT_PATH);
    expect(() => parseSandboxEnvironment('[1]')).toThrow(/no JSON object/);
    expect(() => parseSandboxEnvironment('{"A":1}')).toThrow(/A a non-string value/);
  });

  it('carries the gateway\'s TLS (CA file and name) and round-trips it', () => {
    const tls = { ...launch, gatewayTls: { caFile: '/run/sandgate/gateway-ca.pem', serverName: 'localhost' } };
    expect(supervisorEnvironment(tls)).toMatchObject({ SANDGATE_GATEWAY_CA_FILE: '/run/sandgate/gateway-ca.pem', SANDGATE_GATEWAY_TLS_NAME: 'localhost' });
    expect(parseSupervisorEnvironment(supervisorEnvironment(tls)).gatewayTls).toEqual(tls.gatewayTls);
  });

  it('carries the workload confinement and the policy, and round-trips them', () => {
    const confined = {
      ...launch,
      workload: { uid: 10001, gid: 10002, isolateNetwork: true, cgroupDirs: ['/run/sandgate/cgroup/memory', '/run/sandgate/cgroup/pids'] },
      policy: Buffer.from([0x2a, 0x00]),
    };
    const env = supervisorEnvironment(confined);
    expect(env).toMatchObject({
      SANDGATE_WORKLOAD_UID: '10001',
      SANDGATE_WORKLOAD_GID: '10002',
      SANDGATE_NETWORK_ISOLATION: '1',
      SANDGATE_WORKLOAD_CGROUPS: '/run/sandgate/cgroup/memory:/run/sandgate/cgroup/pids',
      SANDGATE_POLICY: 'KgA=',
    });
    const parsed = parseSupervisorEnvironment(env);
    expect(parsed.workload).toEqual(confined.workload);
    expect(parsed.policy).toEqual(Buffer.from([0x2a, 0x00]));
    // The sandbox's own environment can't set any of them: every SANDGATE_* name is the driver's.
    const spoofed = supervisorEnvironment({ ...launch, environment: { SANDGATE_WORKLOAD_UID: '0', SANDGATE_POLICY: 'AAAA' } });
    expect(spoofed.SANDGATE_WORKLOAD_UID).toBeUndefined();
    expect(spoofed.SANDGATE_POLICY).toBe('');
  });

  it('refuses a workload uid or gid of 0 or one that is not a number', () => {
    for (const [uid, gid] of [['0', '10001'], ['10001', '0'], ['root', '10001'], ['', '10001'], ['10001', undefined]]) {
      expect(() => parseSupervisorEnvironment({ SANDGATE_WORKLOAD_UID: uid, SANDGATE_WORKLOAD_GID: gid }), `${uid}:${gid}`).toThrow(
        /SANDGATE_WORKLOAD_(UID|GID) must be a numeric id other than 0/,
      );
    }
  });

  it('parses what is missing as empty, never throws (no workload uid: no confinement)', () => {
    expect(parseSupervisorEnvironment({ SANDGATE_GATEWAY: ' a:1, ,b:2 ', SANDGATE_MAIN_TTY: 'yes', X: undefined })).toEqual({
      endpoints: ['a:1', 'b:2'],
      sandboxId: '',
      credentialFile: '',
      mainTty: false,
      logLevel: '',
      sandboxEnv: {},
      workload: undefined,
      policy: Buffer.alloc(0),
      deferMain: false,
    });
  });
});

describe('loopbackHost', () => {
  it('passes 127.0.0.0/8 as written and maps localhost to 127.0.0.1', () => {
    for (const h of ['127.0.0.1', '127.8.9.10', '127.255.255.255', ' 127.0.0.2 ', '[127.0.0.1]']) {
      expect(loopbackHost(h), h).toBe(h.trim().replace(/^\[|\]$/g, ''));
    }
    expect(loopbackHost('localhost')).toBe('127.0.0.1');
    expect(loopbackHost('LocalHost')).toBe('127.0.0.1');
  });

  it('maps every spelling of ::1 to ::1', () => {
    for (const h of ['::1', '[::1]', '0:0:0:0:0:0:0:1', '::0:1', '0000::0001']) expect(loopbackHost(h), h).toBe('::1');
  });

  it('maps IPv4-mapped loopback to its IPv4 form', () => {
    expect(loopbackHost('::ffff:127.0.0.1')).toBe('127.0.0.1');
    expect(loopbackHost('[::FFFF:127.1.2.3]')).toBe('127.1.2.3');
    expect(loopbackHost('0:0:0:0:0:ffff:127.0.0.1')).toBe('127.0.0.1');
    expect(loopbackHost('::ffff:7f00:1')).toBe('127.0.0.1');
  });

  it('refuses everything else', () => {
    for (const bad of [
      '',
      '0.0.0.0',
      '10.0.0.1',
      '128.0.0.1',
      '1.127.0.0',
      '::',
      '::2',
      '1::1',
      'fe80::1%lo',
      '::ffff:10.0.0.1',
      '::ffff:0:127.0.0.1',
      '::127.0.0.1',
      '64:ff9b::127.0.0.1',
      'example.com',
      'localhost.evil',
      'localhost:22',
      '127.0.0.1:22',
    ]) {
      expect(loopbackHost(bad), bad).toBeNull();
    }
  });
});
