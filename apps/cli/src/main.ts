// Entry point: global flags, command dispatch, and turning results and errors into exit statuses.
// Command modules are imported lazily so `sandgate sandbox list` never loads the gateway.
import { readFileSync } from 'node:fs';
import { UsageError, type Env } from './args.ts';
import type { CommandContext, CommandRun } from './context.ts';
import { cliLogger } from './diagnostics.ts';
import { EXIT_OK, EXIT_USAGE, reportError } from './errors.ts';
import { USAGE } from './usage.ts';

/** What a command module hands the dispatcher: its entry and, for the usage test, its flags. */
export interface CommandModule {
  run: CommandRun;
  OPTIONS?: Readonly<Record<string, { readonly type: string; readonly short?: string }>>;
}

/** Every command, by the words that name it. Each must have a USAGE entry (unit-tested). */
export const COMMANDS: Record<string, () => Promise<CommandModule>> = {
  gateway: () => import('./commands/gateway.ts'),
  up: () => import('./commands/up.ts'),
  worker: () => import('./commands/worker.ts'),
  'sandbox create': () => import('./commands/sandbox-create.ts'),
  'sandbox get': () => import('./commands/sandbox-get.ts'),
  'sandbox list': () => import('./commands/sandbox-list.ts'),
  'sandbox delete': () => import('./commands/sandbox-delete.ts'),
  'sandbox exec': () => import('./commands/sandbox-exec.ts'),
  'sandbox connect': () => import('./commands/sandbox-connect.ts'),
  'sandbox ssh-config': () => import('./commands/sandbox-ssh-config.ts'),
  'sandbox upload': () => import('./commands/sandbox-files.ts').then((m) => ({ run: m.runUpload, OPTIONS: m.OPTIONS })),
  'sandbox download': () => import('./commands/sandbox-files.ts').then((m) => ({ run: m.runDownload, OPTIONS: m.OPTIONS })),
  'sandbox policy': () => import('./commands/sandbox-policy.ts'),
  'ssh-proxy': () => import('./commands/ssh-proxy.ts'),
  'forward start': () => import('./commands/forward.ts'),
  'sandbox stop': () => import('./commands/sandbox-lifecycle.ts').then((m) => ({ run: m.runStop, OPTIONS: m.OPTIONS })),
  'sandbox start': () => import('./commands/sandbox-lifecycle.ts').then((m) => ({ run: m.runStart, OPTIONS: m.OPTIONS })),
  logs: () => import('./commands/logs.ts'),
  'workspace create': () => import('./commands/workspace.ts').then((m) => ({ run: m.runCreate, OPTIONS: m.CREATE_OPTIONS })),
  'workspace get': () => import('./commands/workspace.ts').then((m) => ({ run: m.runGet, OPTIONS: m.GET_OPTIONS })),
  'workspace list': () => import('./commands/workspace.ts').then((m) => ({ run: m.runList, OPTIONS: m.LIST_OPTIONS })),
  'workspace delete': () => import('./commands/workspace.ts').then((m) => ({ run: m.runDelete, OPTIONS: m.DELETE_OPTIONS })),
  'workspace member': () => import('./commands/workspace.ts').then((m) => ({ run: m.runMember, OPTIONS: m.MEMBER_OPTIONS })),
  whoami: () => import('./commands/whoami.ts'),
  'token create': () => import('./commands/token.ts').then((m) => ({ run: m.runCreate, OPTIONS: m.CREATE_OPTIONS })),
  'token list': () => import('./commands/token.ts').then((m) => ({ run: m.runList, OPTIONS: m.LIST_OPTIONS })),
  'token revoke': () => import('./commands/token.ts').then((m) => ({ run: m.runRevoke, OPTIONS: m.REVOKE_OPTIONS })),
  // Exposed services (issue 14).
  'service expose': () => import('./commands/service.ts').then((m) => ({ run: m.runExpose, OPTIONS: m.EXPOSE_OPTIONS })),
  'service list': () => import('./commands/service.ts').then((m) => ({ run: m.runList, OPTIONS: m.LIST_OPTIONS })),
  'service get': () => import('./commands/service.ts').then((m) => ({ run: m.runGet, OPTIONS: m.GET_OPTIONS })),
  'service delete': () => import('./commands/service.ts').then((m) => ({ run: m.runDelete, OPTIONS: m.DELETE_OPTIONS })),
  'service url': () => import('./commands/service.ts').then((m) => ({ run: m.runUrl, OPTIONS: m.URL_OPTIONS })),
  // Warm pools (sandgate.v1.Sandgate SetPool, ListPools, DeletePool).
  'pool set': () => import('./commands/pool.ts').then((m) => ({ run: m.runSet, OPTIONS: m.SET_OPTIONS })),
  'pool list': () => import('./commands/pool.ts').then((m) => ({ run: m.runList, OPTIONS: m.LIST_OPTIONS })),
  'pool delete': () => import('./commands/pool.ts').then((m) => ({ run: m.runDelete, OPTIONS: m.DELETE_OPTIONS })),
};

export const GROUPS = new Set(['sandbox', 'workspace', 'token', 'forward', 'service', 'pool']);

const isHelp = (arg: string | undefined) => arg === '-h' || arg === '--help';

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version?: string };
  return pkg.version ?? '0.0.0';
}

/** Connection flags that may come before the command, like --gateway. */
const GLOBAL_CONNECTION_FLAGS = ['token', 'ca', 'client-cert', 'client-key', 'tls-server-name'] as const;

/** Runs the CLI and returns its exit status (does not exit). */
export async function run(argv: string[], env: Env): Promise<number> {
  const ctx: CommandContext = { env, gateway: undefined };
  let i = 0;
  // Global flags before the command.
  while (i < argv.length && argv[i]!.startsWith('-')) {
    const arg = argv[i]!;
    if (isHelp(arg)) {
      process.stdout.write(USAGE['']!);
      return EXIT_OK;
    }
    if (arg === '--version') {
      process.stdout.write(`sandgate ${version()}\n`);
      return EXIT_OK;
    }
    if (arg === '--gateway') {
      const value = argv[i + 1];
      if (value === undefined) throw new UsageError("option '--gateway <value>' argument missing");
      ctx.gateway = value;
      i += 2;
      continue;
    }
    if (arg.startsWith('--gateway=')) {
      ctx.gateway = arg.slice('--gateway='.length);
      i += 1;
      continue;
    }
    const global = GLOBAL_CONNECTION_FLAGS.find((f) => arg === `--${f}` || arg.startsWith(`--${f}=`));
    if (global !== undefined) {
      const value = arg.includes('=') ? arg.slice(arg.indexOf('=') + 1) : argv[i + 1];
      if (value === undefined) throw new UsageError(`option '--${global} <value>' argument missing`);
      ctx.connection = { ...ctx.connection, [global]: value };
      i += arg.includes('=') ? 1 : 2;
      continue;
    }
    throw new UsageError(`unknown option '${arg}'`);
  }
  const word = argv[i];
  if (word === undefined) {
    process.stderr.write(USAGE['']!);
    return EXIT_USAGE;
  }
  if (word === 'help') {
    const topic = argv.slice(i + 1).join(' ');
    const text = USAGE[topic];
    if (text === undefined) throw new UsageError(`no help for '${topic}'`);
    process.stdout.write(text);
    return EXIT_OK;
  }
  let name = word;
  let rest = argv.slice(i + 1);
  if (GROUPS.has(word)) {
    const sub = rest[0];
    if (sub === undefined || isHelp(sub)) {
      (sub === undefined ? process.stderr : process.stdout).write(USAGE[word]!);
      return sub === undefined ? EXIT_USAGE : EXIT_OK;
    }
    name = `${word} ${sub}`;
    rest = rest.slice(1);
  }
  const load = COMMANDS[name];
  if (!load) throw new UsageError(`unknown command '${name}'`, GROUPS.has(word) ? word : undefined);
  // `--help` anywhere before `--` shows the command's help without parsing the rest.
  const beforeTerminator = rest.includes('--') ? rest.slice(0, rest.indexOf('--')) : rest;
  if (beforeTerminator.some(isHelp)) {
    process.stdout.write(USAGE[name]!);
    return EXIT_OK;
  }
  const command = await load();
  ctx.log = await cliLogger(env, name);
  ctx.log.debug('command', { node: process.version });
  try {
    return await command.run(rest, ctx);
  } catch (err) {
    // Point value errors (`--env NOEQUALS`…) at the command they came from.
    if (err instanceof UsageError && err.command === undefined) throw new UsageError(err.message, name);
    throw err;
  }
}

function flush(stream: NodeJS.WriteStream): Promise<void> {
  return new Promise((resolve) => {
    if (stream.destroyed || !stream.writable) resolve();
    else stream.write('', () => resolve());
  });
}

/** Runs the CLI, flushes stdout/stderr and exits the process with the command's status. */
/** `env` is the process environment, handed over once by the entry point (bin/sandgate.js). */
export async function main(argv: string[], env: Env): Promise<never> {
  // A closed stdout (`sandgate sandbox list | head -1`) ends us quietly, as SIGPIPE would.
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') process.exit(141);
    throw err;
  });
  let code: number;
  try {
    code = await run(argv, env);
  } catch (err) {
    code = reportError(err);
  }
  await Promise.all([flush(process.stdout), flush(process.stderr)]);
  process.exit(code);
}
