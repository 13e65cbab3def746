// Create-to-first-exec latency of the docker driver next to plain `docker run` of the same image,
// interleaved in one run so machine noise hits both alike.
//   node load-tests/docker-create.ts [--iterations 10] [--image sandgate-sandbox:latest]
//
// Measured per iteration:
//   driver          driver.create() (real supervisor entry, no gateway) → `docker exec <c> true` exits 0
//   … unlabelled    the same from IMAGE with its sandgate.sandbox-owner label cleared (a derived
//                   image, built here): the driver then gives /sandbox to the workload itself,
//                   through an archive upload, as for any image that does not declare its owner
//   … netns spares  the same with a driver that keeps two network namespaces ready
//                   (docker/netns-holders.ts, as the gateway's replicas do): the create claims
//                   one instead of giving its container an endpoint of its own on the bridge.
//                   The spare is made again 1 s after the claim; the iteration then waits 2.5 s,
//                   so that work lands on no measured path (in a burst, creates find no spare
//                   and take the bridge path, the `driver` row)
//   driver → dial   driver.create() → the supervisor's first "dialling gateway" log line (Node up,
//                   supervisor loaded: what a gateway would see as the earliest possible hello)
//   docker run      `docker run --rm IMAGE true` (create + start + run + exit + remove)
//   run -d + exec   `docker run -d --network host IMAGE sleep infinity` → `docker exec <c> true` exits 0
// Deletion is not timed. Needs a Docker engine (scripts/ensure-docker.sh) and the image
// (scripts/build-sandbox-image.sh). For now this drives the driver directly, not the gateway.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import Docker from 'dockerode';
import { DockerDriver } from '@sandgate/compute';
import { summarise, ms, table } from './stats.ts';

const { values } = parseArgs({
  options: {
    iterations: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '2' },
    image: { type: 'string', default: 'sandgate-sandbox:latest' },
  },
});
const iterations = Number(values.iterations);
const warmup = Number(values.warmup);
const image = values.image!;

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const docker = new Docker();

function run(argv: string[]): Promise<{ code: number; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, out }));
  });
}

const now = () => Number(process.hrtime.bigint()) / 1e6;

/** Retries `docker exec <c> true` until it exits 0; returns the time it did. */
async function firstExec(container: string, deadlineMs = 30_000): Promise<number> {
  const end = now() + deadlineMs;
  for (;;) {
    const r = await run(['docker', 'exec', container, 'true']);
    if (r.code === 0) return now();
    if (now() > end) throw new Error(`docker exec ${container} true never succeeded: ${r.out.trim()}`);
  }
}

/** Resolves with the time the container's log first contains `needle`. */
async function logLine(container: string, needle: string, deadlineMs = 30_000): Promise<number> {
  const stream = (await docker.getContainer(container).logs({ follow: true, stdout: true, stderr: true })) as NodeJS.ReadableStream & {
    destroy(): void;
  };
  return new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => {
      stream.destroy();
      reject(new Error(`no "${needle}" in ${container}'s log within ${deadlineMs} ms`));
    }, deadlineMs);
    stream.on('data', (d: Buffer) => {
      seen = (seen + d.toString('latin1')).slice(-4096);
      if (seen.includes(needle)) {
        const t = now();
        clearTimeout(timer);
        stream.destroy();
        resolve(t);
      }
    });
    stream.on('error', () => {});
  });
}

async function main() {
  const ok = await run(['docker', 'image', 'inspect', image]);
  if (ok.code !== 0) throw new Error(`image ${image} missing: run scripts/build-sandbox-image.sh`);
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sg-bench-docker-'));
  const driver = new DockerDriver({
    stateDir,
    repoRoot,
    supervisorEntry: path.join(repoRoot, 'apps', 'supervisor', 'src', 'main.ts'),
    defaultImage: image,
  });
  const withSpares = new DockerDriver({
    stateDir,
    repoRoot,
    supervisorEntry: path.join(repoRoot, 'apps', 'supervisor', 'src', 'main.ts'),
    defaultImage: image,
    netnsSpares: 2,
  });
  const tag = `bench${process.pid}`;
  // The same image with the owner label cleared (Docker keeps a label whose value is empty).
  const unlabelled = `sandgate-bench-unlabelled:${process.pid}`;
  const built = await run(['sh', '-c', `printf 'FROM %s\\nLABEL sandgate.sandbox-owner=""\\n' '${image}' | docker build -q -t ${unlabelled} -`]);
  if (built.code !== 0) throw new Error(`could not build ${unlabelled}: ${built.out}`);
  const samples = { driver: [] as number[], dial: [] as number[], unlabelled: [] as number[], spares: [] as number[], run: [] as number[], runExec: [] as number[] };
  /** driver.create() → `docker exec true` succeeds (and the supervisor's dialling line), ms. */
  const createThroughDriver = async (id: string, from: string, through = driver): Promise<{ exec: number; dial: number }> => {
    const t0 = now();
    await through.create({
      sandboxId: id,
      command: ['sleep', 'infinity'],
      tty: false,
      environment: {},
      image: from,
      gatewayEndpoints: '127.0.0.1:1',
      credential: `bench-${id}`,
      logLevel: 'debug',
    });
    const name = `sandgate-${id}`;
    const [tExec, tDial] = await Promise.all([firstExec(name), logLine(name, '"msg":"dialling gateway"')]);
    await through.delete(id, null);
    return { exec: tExec - t0, dial: tDial - t0 };
  };
  try {
    for (let i = 0; i < warmup + iterations; i++) {
      const record = i >= warmup;
      // 1. the driver, the image as it is and unlabelled, in alternating order
      const labelledFirst = i % 2 === 0;
      const a = labelledFirst ? await createThroughDriver(`${tag}-${i}`, image) : undefined;
      const u = await createThroughDriver(`${tag}-u${i}`, unlabelled);
      const b = a ?? (await createThroughDriver(`${tag}-${i}`, image));
      if (record) {
        samples.driver.push(b.exec);
        samples.dial.push(b.dial);
        samples.unlabelled.push(u.exec);
      }
      // 1b. the same image through a driver with network namespaces kept ready
      const sp = await createThroughDriver(`${tag}-s${i}`, image, withSpares);
      if (record) samples.spares.push(sp.exec);
      await new Promise((r) => setTimeout(r, 2500));

      // 2. plain docker run --rm IMAGE true
      const t1 = now();
      const r = await run(['docker', 'run', '--rm', image, 'true']);
      if (r.code !== 0) throw new Error(`docker run failed: ${r.out}`);
      if (record) samples.run.push(now() - t1);

      // 3. plain docker run -d + first docker exec (the same shape as the driver's figure)
      const plain = `${tag}-plain-${i}`;
      const t2 = now();
      const d = await run(['docker', 'run', '-d', '--name', plain, '--network', 'host', image, 'sleep', 'infinity']);
      if (d.code !== 0) throw new Error(`docker run -d failed: ${d.out}`);
      const tPlainExec = await firstExec(plain);
      if (record) samples.runExec.push(tPlainExec - t2);
      await run(['docker', 'rm', '-f', plain]);
    }
  } finally {
    for (const o of await driver.list()) if (o.sandboxId.startsWith(tag)) await driver.delete(o.sandboxId, o.handle).catch(() => {});
    await withSpares.close();
    fs.rmSync(stateDir, { recursive: true, force: true });
    await run(['docker', 'rmi', unlabelled]);
  }
  const s = {
    unlabelled: summarise(samples.unlabelled),
    driver: summarise(samples.driver),
    spares: summarise(samples.spares),
    dial: summarise(samples.dial),
    run: summarise(samples.run),
    runExec: summarise(samples.runExec),
  };
  const row = (name: string, x: ReturnType<typeof summarise>) => [name, ms(x.p50), ms(x.p90), ms(x.mean)];
  const ratio = (name: string, a: ReturnType<typeof summarise>, b: ReturnType<typeof summarise>) => [
    name,
    (a.p50 / b.p50).toFixed(2),
    (a.p90 / b.p90).toFixed(2),
    (a.mean / b.mean).toFixed(2),
  ];
  console.log(`docker create-to-first-exec, image ${image}, ${iterations} iterations each after ${warmup} warm-up, interleaved`);
  console.log(
    table(
      ['path', 'p50', 'p90', 'mean'],
      [
        row('driver: create → docker exec true', s.driver),
        row('driver: create → supervisor dialling', s.dial),
        row('driver, image without its owner label: create → docker exec true', s.unlabelled),
        row('driver with netns spares: create → docker exec true', s.spares),
        row('plain: docker run --rm IMAGE true', s.run),
        row('plain: docker run -d → docker exec true', s.runExec),
        ratio('ratio driver / driver without the owner label', s.driver, s.unlabelled),
        ratio('ratio driver / docker run --rm', s.driver, s.run),
        ratio('ratio driver / run -d + exec', s.driver, s.runExec),
        ratio('ratio driver with netns spares / driver', s.spares, s.driver),
        ratio('ratio driver with netns spares / run -d + exec', s.spares, s.runExec),
      ],
    ),
  );
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
