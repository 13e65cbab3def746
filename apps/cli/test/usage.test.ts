// The help texts cover the CLI: every command the dispatcher knows is listed in the overview
// (and in its group's), has its own help, and documents each flag it accepts.
import { describe, expect, it } from 'vitest';
import { COMMANDS, GROUPS } from '../src/main.ts';
import { USAGE } from '../src/usage.ts';

const names = Object.keys(COMMANDS);

describe('usage', () => {
  it('knows the commands it is checking', () => {
    expect(names).toEqual(expect.arrayContaining(['up', 'gateway', 'sandbox create', 'sandbox connect', 'sandbox stop', 'sandbox start', 'logs']));
  });

  it.each(names)("'%s' is in the overview and has its own help", (name) => {
    expect(USAGE['']).toContain(`sandgate ${name} `);
    expect(USAGE[name], `USAGE['${name}'] is missing: '${name} --help' would print nothing`).toBeDefined();
    expect(USAGE[name]).toContain(`sandgate ${name}`);
    const group = name.split(' ')[0]!;
    if (GROUPS.has(group)) expect(USAGE[group]).toContain(`sandgate ${name}`);
  });

  it.each(names)("'%s' --help documents every flag the command accepts", async (name) => {
    const { OPTIONS } = await COMMANDS[name]!();
    for (const [flag, spec] of Object.entries(OPTIONS ?? {})) {
      const documented = USAGE[name]!.includes(`--${flag}`) || (spec.short !== undefined && USAGE[name]!.includes(`-${spec.short} `));
      expect(documented, `${name}: --${flag} is not in its help`).toBe(true);
    }
  });

  it('every group and topic help is reachable and non-empty', () => {
    for (const group of GROUPS) expect(USAGE[group]).toMatch(/Usage:/);
    for (const [topic, text] of Object.entries(USAGE)) expect(text.length, `USAGE['${topic}']`).toBeGreaterThan(20);
  });
});
