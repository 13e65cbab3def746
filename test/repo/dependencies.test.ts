// Every workspace package says what it depends on, and reaches other packages only through their
// public entry points. The packages are found from the root package.json's workspaces, so a new
// package (libs/jobs, …) is checked without touching this file.
//
// The rules:
// * a package's runtime code (everything outside its test/ folder) imports only node builtins,
//   its own files, and packages named in its `dependencies`;
// * its tests may also use its `devDependencies`;
// * another package is imported by name (`@sandgate/core`), never by a relative path that leaves
//   the package, and only through a path its `exports` map publishes (never `@sandgate/x/src/…`);
// * root-level code (test/e2e, load-tests, …) sees every workspace, imports npm packages the root
//   declares, and may reach a workspace package by relative path only to a published file;
// * libs never depend on apps, and the `dependencies` between workspace packages have no cycle.
import { readFileSync, readdirSync, statSync, existsSync } from 'node:fs';
import { isBuiltin } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const SOURCE = /\.(ts|mts|cts|js|mjs|cjs)$/;

interface Manifest {
  name?: string;
  workspaces?: string[];
  exports?: unknown;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
}

interface Pkg {
  name: string;
  /** Relative to the repository root, '' for the root. */
  dir: string;
  manifest: Manifest;
}

function readManifest(dir: string): Manifest {
  return JSON.parse(readFileSync(path.join(repoRoot, dir, 'package.json'), 'utf8')) as Manifest;
}

/** The workspace packages: `dir/*` and plain `dir` patterns, as npm expands them. */
function workspacePackages(root: Manifest): Pkg[] {
  const dirs: string[] = [];
  for (const pattern of root.workspaces ?? []) {
    if (pattern.endsWith('/*')) {
      const parent = pattern.slice(0, -2);
      for (const entry of readdirSync(path.join(repoRoot, parent)).sort()) {
        if (existsSync(path.join(repoRoot, parent, entry, 'package.json'))) dirs.push(`${parent}/${entry}`);
      }
    } else if (!pattern.includes('*')) {
      dirs.push(pattern);
    } else {
      throw new Error(`workspace pattern ${pattern} is not understood by this test: teach it`);
    }
  }
  return dirs.map((dir) => {
    const manifest = readManifest(dir);
    if (!manifest.name) throw new Error(`${dir}/package.json has no name`);
    return { name: manifest.name, dir, manifest };
  });
}

function sourceFiles(dir: string, skip: (rel: string) => boolean): string[] {
  const out: string[] = [];
  const walk = (rel: string) => {
    for (const entry of readdirSync(path.join(repoRoot, rel))) {
      const child = rel ? `${rel}/${entry}` : entry;
      if (entry === 'node_modules' || entry.startsWith('.') || skip(child)) continue;
      const stat = statSync(path.join(repoRoot, child));
      if (stat.isDirectory()) walk(child);
      else if (SOURCE.test(entry) && !entry.endsWith('.d.ts')) out.push(child);
    }
  };
  walk(dir);
  return out;
}

/** Module specifiers of static imports/exports, dynamic imports, `import('x').T` types and require(). */
export function importSpecifiers(text: string): string[] {
  // Drop comment lines, so prose that quotes a module never counts as an import.
  const code = text
    .split('\n')
    .filter((line) => !/^\s*(\/\/|\/\*|\*)/.test(line))
    .join('\n');
  const found: string[] = [];
  const patterns = [
    /(?:^|[\s;}])(?:import|export)\s+(?:type\s+)?(?:[^'"`;]*?\sfrom\s*)?['"]([^'"\n]+)['"]/g,
    /\bimport\s*\(\s*['"]([^'"\n]+)['"]\s*\)/g,
    /\brequire\s*\(\s*['"]([^'"\n]+)['"]\s*\)/g,
  ];
  for (const re of patterns) for (const m of code.matchAll(re)) found.push(m[1]!);
  return found;
}

/** `@scope/name/sub` → `@scope/name`; `name/sub` → `name`. */
export function packageOf(specifier: string): string {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!;
}

/** The files (relative to the package) and subpaths its `exports` map publishes. */
function published(manifest: Manifest): { subpath: RegExp; file: RegExp }[] {
  const exportsField = manifest.exports ?? { '.': './index.js' };
  const map: Record<string, unknown> =
    typeof exportsField === 'string' || !Object.keys(exportsField as object).every((k) => k.startsWith('.'))
      ? { '.': exportsField }
      : (exportsField as Record<string, unknown>);
  const targets = (value: unknown): string[] =>
    typeof value === 'string' ? [value] : value && typeof value === 'object' ? Object.values(value).flatMap(targets) : [];
  const glob = (pattern: string) =>
    new RegExp(`^${pattern.replace(/^\.\//, '').split('*').map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.+')}$`);
  return Object.entries(map).flatMap(([subpath, value]) =>
    targets(value).map((target) => ({ subpath: glob(subpath === '.' ? '' : subpath), file: glob(target) })),
  );
}

function load() {
  const rootManifest = readManifest('');
  const packages = workspacePackages(rootManifest);
  const byName = new Map(packages.map((p) => [p.name, p]));
  const root: Pkg = { name: rootManifest.name ?? '(root)', dir: '', manifest: rootManifest };
  const owner = (file: string): Pkg =>
    packages.find((p) => file === p.dir || file.startsWith(`${p.dir}/`)) ?? root;
  return { rootManifest, packages, byName, root, owner };
}

/** Every rule broken, one line each: `file: what is wrong`. */
function violations(): string[] {
  const { packages, byName, root, owner } = load();
  const problems: string[] = [];
  const isWorkspaceDir = (rel: string) => packages.some((p) => p.dir === rel);
  const scan: { pkg: Pkg; files: string[] }[] = [
    ...packages.map((pkg) => ({ pkg, files: sourceFiles(pkg.dir, () => false) })),
    { pkg: root, files: sourceFiles('', isWorkspaceDir) },
  ];

  for (const { pkg, files } of scan) {
    const deps = pkg.manifest.dependencies ?? {};
    const devDeps = pkg.manifest.devDependencies ?? {};
    for (const file of files) {
      const inTests = pkg === root || file.slice(pkg.dir.length).replace(/^\//, '').split('/')[0] === 'test';
      const text = readFileSync(path.join(repoRoot, file), 'utf8');
      for (const spec of importSpecifiers(text)) {
        if (isBuiltin(spec)) continue;
        if (spec.startsWith('.')) {
          const target = path.posix.normalize(path.posix.join(path.posix.dirname(file), spec));
          const targetPkg = owner(target);
          if (targetPkg === pkg) continue;
          if (pkg !== root) {
            problems.push(`${file}: imports ${spec}, a file of ${targetPkg.name}: import the package by name and declare it`);
          } else if (!published(targetPkg.manifest).some((e) => e.file.test(target.slice(targetPkg.dir.length + 1)))) {
            problems.push(`${file}: imports ${spec}, internals of ${targetPkg.name}: use what its package entry exports`);
          }
          continue;
        }
        const name = packageOf(spec);
        const workspace = byName.get(name);
        if (workspace) {
          const subpath = spec.slice(name.length).replace(/^\//, '');
          if (!published(workspace.manifest).some((e) => e.subpath.test(subpath))) {
            problems.push(`${file}: imports ${spec}, internals of ${name}: use what its package entry exports`);
          }
          if (workspace === pkg) continue;
          if (pkg === root) continue; // the root has every workspace
        }
        const declared = name in deps || (inTests && name in devDeps);
        if (!declared) {
          const where = inTests && pkg !== root ? 'dependencies or devDependencies' : pkg === root ? 'dependencies or devDependencies' : 'dependencies';
          problems.push(`${file}: imports ${name}, which ${pkg.dir || '.'}/package.json does not list in its ${where}`);
        }
      }
    }
  }
  return [...new Set(problems)];
}

/** Violations being fixed on another branch right now; each entry is the start of a violation line. */
const KNOWN: string[] = [];

describe('package dependencies', () => {
  it('finds imports in every form the code uses', () => {
    const text = [
      "import { a } from '@sandgate/core';",
      "import type { B } from 'ioredis';",
      'import {\n  c,\n  d,\n} from "@grpc/grpc-js";',
      "export * from './pump.ts';",
      "const { e } = await import('@sandgate/gateway');",
      "let r: import('bullmq').Job;",
      "// see '@not/an-import' and from 'nor-this'",
      "import 'side-effect';",
    ].join('\n');
    expect(importSpecifiers(text)).toEqual(
      expect.arrayContaining(['@sandgate/core', 'ioredis', '@grpc/grpc-js', './pump.ts', '@sandgate/gateway', 'bullmq', 'side-effect']),
    );
    expect(importSpecifiers(text)).not.toContain('@not/an-import');
    expect(packageOf('@sandgate/gateway/config')).toBe('@sandgate/gateway');
    expect(packageOf('ssh2')).toBe('ssh2');
  });

  it('every import is declared and goes through a public entry point', () => {
    const found = violations();
    expect(found.filter((v) => !KNOWN.some((k) => v.startsWith(k))), 'declare these in the package.json named, or import a public entry').toEqual([]);
    // An exception that no longer matches anything must go, so the list only ever shrinks.
    expect(KNOWN.filter((k) => !found.some((v) => v.startsWith(k))), 'fixed: delete these from KNOWN in test/repo/dependencies.test.ts').toEqual([]);
  });

  it('workspace dependencies name existing packages, and each npm package has one range everywhere', () => {
    const { rootManifest, packages, byName } = load();
    const problems: string[] = [];
    const ranges = new Map<string, Map<string, string[]>>();
    for (const pkg of [{ dir: '.', manifest: rootManifest }, ...packages]) {
      for (const [name, range] of Object.entries({ ...pkg.manifest.devDependencies, ...pkg.manifest.dependencies })) {
        if (name.startsWith('@sandgate/')) {
          if (!byName.has(name)) problems.push(`${pkg.dir}/package.json: ${name} is not a workspace package (renamed or moved?)`);
          else if (range !== '*') problems.push(`${pkg.dir}/package.json: ${name} should be "*" (always the workspace copy)`);
          continue;
        }
        const seen = ranges.get(name) ?? new Map<string, string[]>();
        seen.set(range, [...(seen.get(range) ?? []), pkg.dir]);
        ranges.set(name, seen);
      }
    }
    for (const [name, seen] of ranges) {
      if (seen.size > 1) problems.push(`${name} has different ranges: ${[...seen].map(([r, dirs]) => `${r} in ${dirs.join(', ')}`).join('; ')}`);
    }
    expect(problems).toEqual([]);
  });

  it('libs never depend on apps, and workspace dependencies have no cycle', () => {
    const { packages, byName } = load();
    const problems: string[] = [];
    for (const pkg of packages.filter((p) => p.dir.startsWith('libs/'))) {
      for (const name of Object.keys({ ...pkg.manifest.dependencies, ...pkg.manifest.devDependencies })) {
        if (byName.get(name)?.dir.startsWith('apps/')) problems.push(`${pkg.dir} (a lib) depends on ${name} (an app)`);
      }
    }
    const edges = (p: Pkg) => Object.keys(p.manifest.dependencies ?? {}).flatMap((n) => (byName.has(n) ? [byName.get(n)!] : []));
    const state = new Map<string, 'open' | 'done'>();
    const visit = (p: Pkg, trail: string[]) => {
      if (state.get(p.name) === 'done') return;
      if (state.get(p.name) === 'open') {
        problems.push(`dependency cycle: ${[...trail.slice(trail.indexOf(p.name)), p.name].join(' → ')}`);
        return;
      }
      state.set(p.name, 'open');
      for (const next of edges(p)) visit(next, [...trail, p.name]);
      state.set(p.name, 'done');
    };
    for (const p of packages) visit(p, []);
    expect(problems).toEqual([]);
  });
});
