// The docker driver's part in TLS, without an engine: the gateway's CA is bind-mounted read-only
// at the contract's path and the supervisor is told to use it, for the name in the certificate.
import { describe, expect, it } from 'vitest';
import type { LaunchSpec } from '../src/driver.ts';
import { buildContainerCreateOptions, buildContainerEnv } from '../src/docker/launch.ts';

const spec: LaunchSpec = {
  sandboxId: 'abc',
  command: ['true'],
  tty: false,
  environment: { SANDGATE_GATEWAY_CA_FILE: '/evil.pem' },
  image: 'x',
  gatewayEndpoints: '172.18.0.1:8080',
  credential: 'TOPSECRET',
  logLevel: '',
  gatewayTls: { ca: '-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n', serverName: 'localhost' },
};
const workload = { uid: 10001, gid: 10001, isolateNetwork: true, cgroupDirs: [] };
const launch = {
  spec,
  image: 'x',
  command: ['true'],
  nodeHostPath: '/opt/node/bin/node',
  appHostPath: '/repo',
  supervisorRelPath: 'apps/supervisor/src/main.ts',
  credentialHostPath: '/state/docker/abc/credential',
  environmentHostPath: '/state/docker/abc/environment.json',
  network: 'sandgate',
  workload,
  limits: {},
};

describe('docker driver over TLS (pure)', () => {
  it('mounts the CA read-only and points the supervisor at it, whatever the sandbox environment says', () => {
    const env = buildContainerEnv(spec, workload);
    expect(env).toContain('SANDGATE_GATEWAY_CA_FILE=/run/sandgate/gateway-ca.pem');
    expect(env).toContain('SANDGATE_GATEWAY_TLS_NAME=localhost');
    expect(env).not.toContain('SANDGATE_GATEWAY_CA_FILE=/evil.pem');
    const mounts = buildContainerCreateOptions({ ...launch, gatewayCaHostPath: '/state/docker/abc/gateway-ca.pem' }).HostConfig!.Mounts!;
    expect(mounts).toContainEqual({ Type: 'bind', Source: '/state/docker/abc/gateway-ca.pem', Target: '/run/sandgate/gateway-ca.pem', ReadOnly: true });
    // Plaintext: no CA mount, the variables empty.
    const plain = { ...spec, gatewayTls: undefined };
    expect(buildContainerEnv(plain, workload)).toContain('SANDGATE_GATEWAY_CA_FILE=');
    expect(buildContainerCreateOptions({ ...launch, spec: plain }).HostConfig!.Mounts!.map((m) => m.Target)).not.toContain('/run/sandgate/gateway-ca.pem');
  });
});
