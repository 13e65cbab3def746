import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// A supervisor runs once per sandbox, so what it loads is paid per sandbox (BENCHMARKS.md, "The
// supervisor's gRPC client", "Static codecs in the supervisor", "The supervisor's log lines
// without pino"). These libraries are the gateway's; one imported into the supervisor again by a
// value import would pass every other test.
describe('the supervisor’s modules', () => {
  it('include neither grpc-js, protobufjs’ reflection, long.js, pino, nor the OTel API', () => {
    const src = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../src');
    const script = `
      import { registerHooks } from 'node:module';
      const loaded = new Set();
      registerHooks({ resolve(spec, ctx, next) { const r = next(spec, ctx); loaded.add(r.url); return r; } });
      await import(${JSON.stringify(path.join(src, 'without-long.ts'))}); // as main.ts does
      await import(${JSON.stringify(path.join(src, 'supervisor-main.ts'))});
      // Without long.js a 64-bit field still round-trips, as a number.
      const { supervisorGateway } = await import('@sandgate/protocols/supervisor-wire');
      const update = { policy_update: { revision: 2 ** 53 - 1 } };
      const decoded = supervisorGateway.Control.response.decode(supervisorGateway.Control.response.encode(update));
      process.stdout.write(JSON.stringify({ loaded: [...loaded], decoded }));
    `;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: src, encoding: 'utf8', timeout: 30_000 });
    expect(r.status, r.stderr).toBe(0);
    const { loaded, decoded } = JSON.parse(r.stdout) as { loaded: string[]; decoded: unknown };
    expect(decoded).toEqual({ policy_update: { revision: 2 ** 53 - 1 } });
    // The probe saw the supervisor: its client, the egress proxy and the static codecs.
    for (const module of ['gateway-client.ts', 'egress-proxy.ts', 'supervisor-wire.generated.js', 'protobufjs/minimal.js']) {
      expect(loaded.some((url) => url.endsWith(module)), `${module} is loaded`).toBe(true);
    }
    const unwanted = loaded.filter(
      (url) => url.includes('@grpc/') || url.includes('@opentelemetry/') || url.endsWith('protobufjs/index.js') || url.endsWith('protobufjs/src/type.js') || url.endsWith('protocols/src/load.ts') || url.includes('/node_modules/long/') || url.includes('/node_modules/pino/'),
    );
    expect(unwanted).toEqual([]);
    // node:tls as an ES module would read tls.rootCertificates, a copy of Node's bundled roots
    // (gateway-client.ts takes it with process.getBuiltinModule instead).
    expect(loaded.filter((url) => url === 'node:tls')).toEqual([]);
  });
});
