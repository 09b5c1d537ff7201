import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { findRoot } from '../support/repo-root';

/**
 * The published packages ask for the same versions of what they share: an application that installs
 * the NestJS starter and the dashboard (or the CLI) gets one set of ranges to satisfy, and the
 * compatibility matrix (scripts/compat-matrix.js) that proves one package's ranges proves them all.
 * The dashboard once asked for `@nestjs/* ^12`, `ioredis ^6` and core at exactly 0.1.0 while the
 * starter supports Nest 10-12 and ioredis 5-6.
 */
const root = findRoot(__dirname);

interface Manifest {
  name: string;
  version: string;
  private?: boolean;
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
}

const workspaces = (JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')).workspaces as string[]).flatMap((pattern) =>
  pattern.endsWith('/*')
    ? fs.readdirSync(path.join(root, pattern.slice(0, -2))).map((dir) => path.join(pattern.slice(0, -2), dir))
    : [pattern],
);
const published = workspaces
  .map((dir) => path.join(root, dir, 'package.json'))
  .filter((file) => fs.existsSync(file))
  .map((file) => JSON.parse(fs.readFileSync(file, 'utf8')) as Manifest)
  .filter((manifest) => !manifest.private);
const versionOf = new Map(published.map((manifest) => [manifest.name, manifest.version]));

/** Every range a published package gives a dependency or peer dependency: name -> "package: range" lines. */
function rangesByDependency(): Map<string, Map<string, string>> {
  const ranges = new Map<string, Map<string, string>>();
  for (const manifest of published) {
    for (const [name, range] of Object.entries({ ...manifest.dependencies, ...manifest.peerDependencies })) {
      if (!ranges.has(name)) ranges.set(name, new Map());
      ranges.get(name)!.set(manifest.name, range);
    }
  }
  return ranges;
}

describe('the version ranges of the published packages', () => {
  it('are the core, the NestJS starter, the CLI and the dashboard', () => {
    expect([...versionOf.keys()].sort()).toEqual([
      '@redis-stream-coordinator/cli',
      '@redis-stream-coordinator/core',
      '@redis-stream-coordinator/dashboard',
      '@redis-stream-coordinator/nestjs',
    ]);
  });

  it('agree: a dependency two packages share has one range in both (Nest 10-12, ioredis 5-6 everywhere)', () => {
    const disagreements = [...rangesByDependency()]
      .filter(([, byPackage]) => new Set(byPackage.values()).size > 1)
      .map(([name, byPackage]) => `${name}: ${[...byPackage].map(([pkg, range]) => `${pkg} ${range}`).join(', ')}`);
    expect(disagreements).toEqual([]);
    const ranges = rangesByDependency();
    expect(ranges.get('ioredis')?.get('@redis-stream-coordinator/dashboard')).toBe('^5.0.0 || ^6.0.0');
    expect(ranges.get('@nestjs/core')?.get('@redis-stream-coordinator/dashboard')).toBe('^10.0.0 || ^11.0.0 || ^12.0.0');
  });

  it('name each other by a caret range of the current version, never pinned', () => {
    const internal = [...rangesByDependency()]
      .filter(([name]) => versionOf.has(name))
      .flatMap(([name, byPackage]) => [...byPackage].map(([pkg, range]) => ({ pkg, name, range })));
    expect(internal.length).toBeGreaterThan(0);
    for (const { pkg, name, range } of internal) expect(`${pkg} -> ${name} ${range}`).toBe(`${pkg} -> ${name} ^${versionOf.get(name)}`);
  });
});
