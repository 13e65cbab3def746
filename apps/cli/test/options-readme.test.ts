// README.md documents every option of the replica, of the client commands and of the worker in tables; they
// must be exactly what the option tables in the code say (flag, variable, aliases, default,
// description), so neither can drift. On a mismatch the expected table is printed for pasting.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { REPLICA_OPTIONS, WORKER_OPTIONS, type OptionSpec } from '@sandgate/gateway';
import { CLIENT_OPTIONS } from '@sandgate/cli';

const readme = readFileSync(new URL('../../../README.md', import.meta.url), 'utf8');

function defaultCell(spec: OptionSpec<unknown>): string {
  if (typeof spec.default !== 'string') return spec.default.text;
  return spec.default === '' ? 'none' : `\`${spec.default}\``;
}

function markdownTable(options: Record<string, OptionSpec<unknown>>): string {
  const rows = Object.values(options).map((spec) => {
    const also = [spec.up && '`up`', spec.worker && '`worker`'].filter(Boolean).join(', ');
    const flag = spec.flag === undefined ? '' : `\`--${spec.flag}\`${also ? ` (also ${also})` : ''}`;
    const env = [`\`${spec.env}\``, ...(spec.aliases ?? []).map((a) => `(alias \`${a}\`)`)].join(' ');
    return `| ${flag} | ${env} | ${defaultCell(spec)} | ${spec.description} |`;
  });
  return ['| flag | environment | default | what it sets |', '|---|---|---|---|', ...rows].join('\n') + '\n\n';
}

describe('README.md option tables', () => {
  it.each([
    ['replica', REPLICA_OPTIONS as Record<string, OptionSpec<unknown>>],
    ['client', CLIENT_OPTIONS as Record<string, OptionSpec<unknown>>],
    ['worker', WORKER_OPTIONS as Record<string, OptionSpec<unknown>>],
  ])('documents every %s option with its flag, variable and default', (_what, options) => {
    const table = markdownTable(options);
    expect(readme.includes(table), `README.md should contain exactly:\n\n${table}`).toBe(true);
  });

  it('mentions no SANDGATE_* variable the tables do not know', () => {
    const known = new Set(
      [REPLICA_OPTIONS, CLIENT_OPTIONS, WORKER_OPTIONS].flatMap((options) => Object.values(options as Record<string, OptionSpec<unknown>>)).flatMap(
        (spec) => [spec.env, ...(spec.aliases ?? [])],
      ),
    );
    // Named in the debug-fault description and the chaos notes; read by parseDebugBreaks.
    for (const companion of ['SANDGATE_DEBUG_UNSAFE', 'SANDGATE_DEBUG_DISABLE_FENCING', 'SANDGATE_DEBUG_DISABLE_JOBS']) known.add(companion);
    // The test harness' Redis mode (test/harness/redis.ts), in the README's Tests section; no process of sandgate reads it.
    known.add('SANDGATE_TEST_REDIS');
    const mentioned = new Set(readme.match(/SANDGATE_[A-Z_]+/g));
    expect([...mentioned].filter((name) => !known.has(name))).toEqual([]);
  });
});
