// Stand-in for apps/supervisor/src/main.ts in the docker driver tests: reports what the supervisor
// sees from inside the container (identity, capabilities, credential, environment) to
// /run/sandgate-report.json (root's, outside /sandbox, which belongs to the workload's uid and is
// not writable by a root without CAP_DAC_OVERRIDE), starts the main argv (after `--`) and never
// exits.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';

function tryWrite(file) {
  try {
    fs.writeFileSync(file, 'probe');
    return 'ok';
  } catch (err) {
    return err.code ?? String(err);
  }
}

function tryRead(file) {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch (err) {
    return `ERR:${err.code ?? err}`;
  }
}

// The driver's compile cache fill: main.ts --fill-compile-cache writes the cache and exits; after
// a while (a real fill takes seconds), so a launch that does not wait for the fill starts before it.
if (process.argv.includes('--fill-compile-cache')) {
  await new Promise((resolve) => setTimeout(resolve, 1500));
  fs.writeFileSync(`${process.env.SANDGATE_COMPILE_CACHE}/fake-entry`, 'cached');
  process.exit(0);
}

const status = fs.readFileSync('/proc/self/status', 'utf8');
const field = (name) => new RegExp(`^${name}:\\s*(\\S+)`, 'm').exec(status)?.[1] ?? null;
const args = process.argv.slice(2);
const sep = args.indexOf('--');
const main = sep < 0 ? [] : args.slice(sep + 1);
const report = {
  argv: process.argv,
  env: process.env,
  // The sandbox's own variables: a file the driver wrote, never this process's environment.
  sandboxEnvFile: tryRead(process.env.SANDGATE_ENVIRONMENT_FILE || '/nonexistent'),
  pid: process.pid,
  uid: process.getuid(),
  hostname: os.hostname(),
  cwd: process.cwd(),
  credential: tryRead(process.env.SANDGATE_CREDENTIAL_FILE ?? '/nonexistent'),
  credentialWrite: tryWrite(process.env.SANDGATE_CREDENTIAL_FILE ?? '/nonexistent'),
  sandboxWrite: tryWrite('/sandbox/probe.txt'),
  // What the compile cache holds, and whether code could be planted there for the next supervisor.
  compileCacheEntry: tryRead(`${process.env.SANDGATE_COMPILE_CACHE || '/nonexistent'}/fake-entry`),
  compileCacheWrite: tryWrite(`${process.env.SANDGATE_COMPILE_CACHE || '/nonexistent'}/planted`),
  capEff: field('CapEff'),
  capBnd: field('CapBnd'),
  noNewPrivs: field('NoNewPrivs'),
  seccomp: field('Seccomp'),
  oomScoreAdj: Number(fs.readFileSync('/proc/self/oom_score_adj', 'utf8')),
};
fs.writeFileSync('/run/sandgate-report.json.tmp', JSON.stringify(report, null, 2));
fs.renameSync('/run/sandgate-report.json.tmp', '/run/sandgate-report.json');

if (main.length > 0) {
  const child = spawn(main[0], main.slice(1), { stdio: 'inherit' });
  child.on('error', (err) => console.error('fake-supervisor: main failed:', err.message));
}
setInterval(() => {}, 1 << 30);
